#!/usr/bin/env python3
"""The Chebyshev-smoothed V-cycle on level 0's ELL and the SELL copies against its CSR kernels
(issue 30, session 37, H200 2026-11-29): per tree, each of Jacobi and Chebyshev degree 2 and 3,
AMG-PCG prepared on graph (x* = ones, rtol 1e-8): iterations, info, the error against x*, the
V-cycle (us, graph-captured: vcycle_ab.vcycle_us, median of 3) and a prepared solve (ms, median
of 7). One line a (tree, problem, smoother) on stdout.

    python3 benchmarks/chebyshev-cycle-ab-2026-11-29.py LABEL PROBLEMS BENCHMARKS_DIR

Run from each tree's root with PYTHONPATH at that tree, alternating (new base new base):

    for round in 1 2; do for t in new base; do D=...; (cd $D && PYTHONPATH=$D python3 \
        $R/benchmarks/chebyshev-cycle-ab-2026-11-29.py $t 2:1024,3:100,3:160 \
        $R/benchmarks); done; done

Its run: benchmarks/chebyshev-cycle-ab-2026-11-29.csv (base: 09b86b6's dpsolve/).
"""
import statistics
import sys
import time

import cupy

import dpsolve
from dpsolve.precond import AMG

sys.path.insert(0, sys.argv[3])
from vcycle_ab import systems, vcycle_us  # noqa: E402

CONFIGS = (("jacobi", {}), ("cheb2", dict(smoother="chebyshev", degree=2)),
           ("cheb3", dict(smoother="chebyshev", degree=3)))


def main(label: str, problems: str) -> None:
    sync = cupy.cuda.Device().synchronize
    for item, A, b in systems(problems):
        for name, opts in CONFIGS:
            P = dpsolve.prepare(A, "cg", M=AMG(**opts), variant="graph")
            x, info, rep = P.solve(b, rtol=1e-8, full_output=True)
            err = float(cupy.linalg.norm(x - 1) / cupy.linalg.norm(cupy.ones_like(x)))
            vc = statistics.median([vcycle_us(P) for _ in range(3)])
            ts = []
            for _ in range(7):
                sync()
                t = time.perf_counter()
                P.solve(b, rtol=1e-8)
                sync()
                ts.append(time.perf_counter() - t)
            print(f"{label},{item},{name},{rep.iterations},{info},{err:.2e},{vc:.1f},"
                  f"{statistics.median(ts) * 1e3:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
