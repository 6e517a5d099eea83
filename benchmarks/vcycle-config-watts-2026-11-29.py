#!/usr/bin/env python3
"""Watts and joules of V-cycle configurations against Jacobi-CG, in one process (issue 30's
energy target: joules per prepared solve at least the time ratio below Jacobi-CG's, i.e. AMG-PCG's
mean power at most Jacobi-CG's). Session 32, H200 2026-11-29.

    python3 benchmarks/vcycle-config-watts-2026-11-29.py CONFIGS PROBLEMS [SECONDS]

CONFIGS and PROBLEMS as benchmarks/vcycle-config-ab-2026-11-29.py (``name:KNOB=v+-DMACRO=v``;
"2:1024,3:160"). Per problem: Jacobi-CG and each config's AMG-PCG prepared on graph (x* = ones,
rtol 1e-8); each config's iterations and its V-cycle (us, graph-captured, four rounds ABBA);
then, after 6 s of warming, NVML windows of SECONDS (default 1.5) in the order
J c1 .. ck J ck .. c1 J, twice: each kind's joules and seconds pooled over its windows.
CSV on stdout (problem,config,round,metric,value), then a summary: per config ms a solve,
W, joules a solve, and the time and joule ratios to Jacobi-CG.

Session 32's run (H200, b458ec4): ``"s256:,s1:SELL_SIGMA=1" 3:160 1.5``; its lines are run
h200-b of benchmarks/session32-experiments-2026-11-29.csv.
"""
import importlib.util
import statistics
import sys
from pathlib import Path

import cupy

import dpsolve
from dpsolve.measure import measure_window

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vcycle_ab import systems, vcycle_us  # noqa: E402

_spec = importlib.util.spec_from_file_location("vcycle_config_ab",
                                               HERE / "vcycle-config-ab-2026-11-29.py")
_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ab)


def main(config_spec: str, problems: str, seconds: float = 1.5) -> None:
    configs = _ab.parse(config_spec)
    sync = cupy.cuda.Device().synchronize
    print("problem,config,round,metric,value", flush=True)
    summary = []
    for item, A, b in systems(problems):
        P = {"jacobi": dpsolve.prepare(A, "cg", M="jacobi", variant="graph")}
        for name, (knobs, defines) in configs.items():
            with _ab.configured(knobs, defines):
                P[name] = dpsolve.prepare(A, "cg", M="amg", variant="graph")
                _, _, rep = P[name].solve(b, rtol=1e-8, full_output=True)
            print(f"{item},{name},0,iterations,{rep.iterations}", flush=True)
        cyc = {name: [] for name in configs}
        for rnd in range(4):
            for name in (list(configs) if rnd % 2 == 0 else list(configs)[::-1]):
                with _ab.configured(*configs[name]):
                    cyc[name].append(vcycle_us(P[name]))
                print(f"{item},{name},{rnd + 1},vcycle_us,{cyc[name][-1]:.1f}", flush=True)
        measure_window(lambda: P[next(iter(configs))].solve(b, rtol=1e-8), seconds=6.0, sync=sync)
        order = ["jacobi", *configs, "jacobi", *list(configs)[::-1], "jacobi"]
        pooled = {k: [0, 0.0, 0.0] for k in P}
        for rnd, k in enumerate(order + order):
            m = measure_window(lambda: P[k].solve(b, rtol=1e-8), seconds=seconds, sync=sync)
            acc = pooled[k]
            acc[0] += m["reps"]
            acc[1] += m["wall"] * m["reps"]
            acc[2] += m["gpu_energy"] * m["reps"]
            print(f"{item},{k},{rnd + 1},window,{m['reps']} solves {m['wall'] * 1e3:.3f} ms "
                  f"{m['gpu_energy']:.4f} J {m['gpu_power']:.0f} W", flush=True)
        jr, js, jj = pooled["jacobi"]
        summary.append(f"{item}: Jacobi-CG {js / jr * 1e3:.2f} ms {jj / js:.0f} W "
                       f"{jj / jr:.3f} J a solve")
        for name in configs:
            r, s, j = pooled[name]
            summary.append(
                f"  {name:10s} V-cycle {statistics.median(cyc[name]):7.1f} us, solve "
                f"{s / r * 1e3:7.3f} ms, {j / s:4.0f} W, {j / r:.4f} J; time ratio "
                f"{(js / jr) / (s / r):6.2f}x, joule ratio {(jj / jr) / (j / r):6.2f}x")
    print("SUMMARY")
    print("\n".join(summary), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 1.5)
