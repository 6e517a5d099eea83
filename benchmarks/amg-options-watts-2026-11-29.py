#!/usr/bin/env python3
"""Watts, joules and time of AMG options against Jacobi-CG, in one process (issue 30's energy
target: AMG-PCG's mean power at most Jacobi-CG's). Session 37, H200 2026-11-29, on 09b86b6.

    python3 benchmarks/amg-options-watts-2026-11-29.py PROBLEMS [CONFIG,...]

PROBLEMS as vcycle_ab.systems ("3:160"). Per problem: Jacobi-CG and AMG-PCG under each option
set of CONFIGS prepared on graph (x* = ones, rtol 1e-8), their iterations and V-cycles (us,
graph-captured, median of 3); after 6 s of warming, NVML windows of 1.5 s in the order
J c1 .. ck J ck .. c1 J, twice, pooled per kind. Lines "problem,kind,solves,ms,W" a window, then
a summary. Its run: the rows "options-watts-09b86b6" of
benchmarks/session37-experiments-2026-11-29.csv.
"""
import statistics
import sys
from pathlib import Path

import cupy

import dpsolve
from dpsolve.measure import measure_window
from dpsolve.precond import AMG

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vcycle_ab import systems, vcycle_us  # noqa: E402

CONFIGS = {"default": {}, "cheb2": dict(smoother="chebyshev", degree=2),
           "cheb3": dict(smoother="chebyshev", degree=3), "sp1": dict(second_pass=1),
           "mixed": dict(precision="mixed"), "om.8": dict(omega=0.8)}


def main(problems: str, names: list, seconds: float = 1.5) -> None:
    configs = {k: CONFIGS[k] for k in names}
    sync = cupy.cuda.Device().synchronize
    out = []
    for item, A, b in systems(problems):
        P = {"jacobi": dpsolve.prepare(A, "cg", M="jacobi", variant="graph")}
        its = {}
        for name, opts in configs.items():
            P[name] = dpsolve.prepare(A, "cg", M=AMG(**opts), variant="graph")
        for name in P:
            its[name] = P[name].solve(b, rtol=1e-8, full_output=True)[2].iterations
        cyc = {n: statistics.median([vcycle_us(P[n]) for _ in range(3)]) for n in configs}
        measure_window(lambda: P[names[0]].solve(b, rtol=1e-8), seconds=6.0, sync=sync)
        order = ["jacobi", *configs, "jacobi", *list(configs)[::-1], "jacobi"]
        pooled = {k: [0, 0.0, 0.0] for k in P}
        for k in order + order:
            m = measure_window(lambda: P[k].solve(b, rtol=1e-8), seconds=seconds, sync=sync)
            acc = pooled[k]
            acc[0] += m["reps"]
            acc[1] += m["wall"] * m["reps"]
            acc[2] += m["gpu_energy"] * m["reps"]
            print(f"{item},{k},{m['reps']},{m['wall'] * 1e3:.3f},{m['gpu_power']:.0f}", flush=True)
        jr, js, jj = pooled["jacobi"]
        out.append(f"{item}: Jacobi-CG {its['jacobi']} it {js / jr * 1e3:.2f} ms "
                   f"{jj / js:.0f} W {jj / jr:.3f} J")
        for n in configs:
            r, s, j = pooled[n]
            out.append(f"  {n:8s} it {its[n]:3d} V {cyc[n]:7.1f} us solve {s / r * 1e3:7.3f} ms "
                       f"{j / s:4.0f} W {j / r:.4f} J; t-ratio {(js / jr) / (s / r):6.2f} "
                       f"J-ratio {(jj / jr) / (j / r):6.2f}")
    print("SUMMARY")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(",") if len(sys.argv) > 2 else list(CONFIGS))
