#!/usr/bin/env python3
"""A/B of V-cycle configurations in one process (issue 30, session 31; H200 2026-11-29).

    python3 benchmarks/vcycle-config-ab-2026-11-29.py CONFIGS PROBLEMS

CONFIGS: comma-separated ``name:spec``, spec a ``+``-joined list of device-module knobs
(``LANE_ENTRIES=8``) and amg.cu macro definitions (``-DAMG_CSR_CHUNK=8``); an empty spec is the
tree as it is. PROBLEMS: ``vcycle_ab.systems``' spec (``2:1024,3:160,3:100``). Each config
prepares its own system (graph, M="amg") with its knobs set and its kernels built with its
macros, and keeps both while it is measured: first its iterations and its V-cycle's largest
difference from the first config's (one b), then five rounds, the configs in turn (ABAB then
BABA), of one prepared solve (ms) and one graph-captured V-cycle (us). CSV on stdout.

Session 31's runs (benchmarks/session31-experiments-2026-11-29.csv) were made by its scratch
forerunners, folded into this file afterwards and not run again in this form (the device budget
was spent): the same measurements; the lanes run set its knobs while preparing only, which is
where LANE_ENTRIES acts. Their configs:
  "now:,e8:LANE_ENTRIES=8,e8c8:LANE_ENTRIES=8+-DAMG_CSR_CHUNK=8,c8:-DAMG_CSR_CHUNK=8"
  "pf:,off:-DAMG_PREFETCH=0"  with benchmarks/vcycle-l2-prefetch-2026-11-29.patch's idea redone
                               on the chunked kernels (that patch's macro is DPS_VC_PREFETCH)
  "one:,two:SELL_LANES=2+-DAMG_SELL_LANES=2"  with benchmarks/sell-two-lanes-2026-11-29.patch
Session 32's runs, in this form (benchmarks/session32-experiments-2026-11-29.csv):
  "c8:,c2:-DAMG_BLOCK_CHUNK=2" 2:1024,3:160  with eacbaf9's block_row_sum applied
  "s256:,s1:SELL_SIGMA=1" 2:1024,3:100
  "tail:,t4:TAIL_SM_BLOCKS=4,apart:TAIL_ONE_LAUNCH=" 2:1024,3:160,3:100  with
      benchmarks/vcycle-coarse-tail-one-launch-2026-11-29.patch (a bool knob's empty value is False)
"""
import contextlib
import sys
from pathlib import Path

import cupy

import dpsolve
from dpsolve.precond.amg import device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vcycle_ab import kernels_built_with, solve_ms, systems, vcycle_us  # noqa: E402


def parse(spec: str) -> dict:
    """{name: (knobs, defines)} of CONFIGS."""
    configs = {}
    for item in spec.split(","):
        name, body = item.split(":", 1)
        parts = [p for p in body.split("+") if p]
        knobs = dict(p.split("=", 1) for p in parts if not p.startswith("-D"))
        configs[name] = (knobs, tuple(p for p in parts if p.startswith("-D")))
    return configs


@contextlib.contextmanager
def configured(knobs: dict, defines: tuple):
    """The device module's knobs set (each cast to its current type) and the V-cycle's kernels
    built with ``defines``, inside the block."""
    saved = {k: getattr(device, k) for k in knobs}
    for k, v in knobs.items():
        setattr(device, k, type(saved[k])(v))
    try:
        with kernels_built_with(defines):
            yield
    finally:
        for k, v in saved.items():
            setattr(device, k, v)


def main(config_spec: str, problems: str) -> None:
    configs = parse(config_spec)
    print("problem,config,round,metric,value", flush=True)
    for item, A, b in systems(problems):
        prepared, cycles = {}, {}
        r = cupy.random.default_rng(1).random(A.shape[0])
        for name, (knobs, defines) in configs.items():
            with configured(knobs, defines):
                P = prepared[name] = dpsolve.prepare(A, "cg", M="amg", variant="graph")
                _, _, rep = P.solve(b, rtol=1e-8, full_output=True)
                h, z = P.precond.hierarchy, cupy.empty_like(r)
                stream = cupy.cuda.Stream(non_blocking=True)
                h.vcycle(r, z, stream)
                stream.synchronize()
                cycles[name] = z
            lv = h.low or h
            lanes = "/".join(f"{lev.lanes}:{lev.lanes_P}:{lev.lanes_R}" for lev in lv.levels)
            first = cycles[next(iter(configs))]
            diff = float(cupy.abs(z - first).max() / cupy.abs(first).max())
            print(f"{item},{name},0,lanes,{lanes}\n{item},{name},0,iterations,{rep.iterations}\n"
                  f"{item},{name},0,vcycle_rel_diff,{diff:.3e}")
        for rnd in range(5):
            for name in (list(configs) if rnd % 2 == 0 else list(configs)[::-1]):
                with configured(*configs[name]):
                    ms, _ = solve_ms(prepared[name], b)
                    us = vcycle_us(prepared[name])
                print(f"{item},{name},{rnd + 1},solve_ms,{ms:.3f}\n"
                      f"{item},{name},{rnd + 1},vcycle_us,{us:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
