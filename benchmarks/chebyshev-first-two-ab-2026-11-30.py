#!/usr/bin/env python3
"""A Chebyshev application's first two steps in one launch, against one launch a step (issue 30,
session 41, 2026-11-30), in one process: "fused" is the shipped schedule
(``device.chebyshev_launches``: from zero, steps 1 and 2 in one vc_cheb* launch that gathers
x_1 = c0 D^-1 b where it reads it); "apart" the schedule before it, the same kernels launched a
step each (the first alone, from zero, then each step from the last), which the patched
``chebyshev_launches`` below gives.

* ``M="chebyshev"`` (degrees 5, the default, and 3), CG prepared on graph, float64, x* = ones,
  rtol 1e-8: iterations, whether x is bit for bit the other schedule's, and a solve's time (ms,
  ABAB x ROUNDS, each config its own prepared system and captured graph; the median).
* AMG with ``smoother="chebyshev"`` (degrees 2 and 3), its V-cycle: the same bits, and its time
  (us; vcycle_ab.vcycle_us, ABAB x ROUNDS, the median).

    python3 benchmarks/chebyshev-first-two-ab-2026-11-30.py PROBLEMS [ROUNDS]

PROBLEMS as vcycle_ab.systems ("2:1024,3:160"). Prints CSV rows: kind,problem,config,metric,value.
"""
import contextlib
import os
import statistics
import sys

import cupy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpsolve  # noqa: E402
from dpsolve.precond import AMG, Chebyshev  # noqa: E402
from dpsolve.precond.amg import device  # noqa: E402
from vcycle_ab import solve_ms, systems, vcycle_us  # noqa: E402

SHIPPED = device.chebyshev_launches


@contextlib.contextmanager
def schedule(config: str):
    """device.chebyshev_launches as shipped ("fused") or a launch a step ("apart")."""
    if config == "apart":
        device.chebyshev_launches = lambda coeffs, from_zero: SHIPPED(coeffs, False)
    try:
        yield
    finally:
        device.chebyshev_launches = SHIPPED


def row(*cells):
    print(",".join(str(c) for c in cells), flush=True)


def main(problems: str, rounds: int) -> None:
    for item, A, b in systems(problems):
        for deg in (5, 3):
            prepared, xs = {}, {}
            for config in ("fused", "apart"):
                with schedule(config):
                    P = dpsolve.prepare(A.copy(), "cg", M=Chebyshev(degree=deg), variant="graph")
                    x, info, rep = P.solve(b, rtol=1e-8, full_output=True)
                prepared[config], xs[config] = P, x
                row("chebyshev-pcg", item, f"{config}-deg{deg}", "iterations", rep.iterations)
                row("chebyshev-pcg", item, f"{config}-deg{deg}", "info", info)
            row("chebyshev-pcg", item, f"deg{deg}", "x_bit_equal",
                bool(cupy.array_equal(xs["fused"], xs["apart"])))
            times = {c: [] for c in prepared}
            for _ in range(rounds):
                for config in ("fused", "apart", "apart", "fused"):
                    times[config].append(solve_ms(prepared[config], b)[0])
            for config, ts in times.items():
                row("chebyshev-pcg", item, f"{config}-deg{deg}", "solve_ms_median",
                    f"{statistics.median(ts):.3f}")
            row("chebyshev-pcg", item, f"deg{deg}", "apart_over_fused",
                f"{statistics.median(times['apart']) / statistics.median(times['fused']):.4f}")
            del prepared, xs
        for deg in (2, 3):
            P = dpsolve.prepare(A, "cg", M=AMG(smoother="chebyshev", degree=deg), variant="graph")
            h = P.precond.hierarchy
            r = cupy.asarray(np.random.default_rng(1).standard_normal(A.shape[0]), h.dtype)
            zs, us = {}, {"fused": [], "apart": []}
            s = cupy.cuda.Stream(non_blocking=True)
            for config in ("fused", "apart"):
                with schedule(config), s:
                    zs[config] = cupy.empty_like(r)
                    h.vcycle(r, zs[config], s)
                    s.synchronize()
            row("amg-cheb-vcycle", item, f"deg{deg}", "z_bit_equal",
                bool(cupy.array_equal(zs["fused"], zs["apart"])))
            for _ in range(rounds):
                for config in ("fused", "apart", "apart", "fused"):
                    with schedule(config):
                        us[config].append(vcycle_us(P))
            for config, ts in us.items():
                row("amg-cheb-vcycle", item, f"{config}-deg{deg}", "vcycle_us_median",
                    f"{statistics.median(ts):.1f}")
            del P, h


if __name__ == "__main__":
    row("kind", "problem", "config", "metric", "value")
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
