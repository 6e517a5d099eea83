#!/usr/bin/env python3
"""Joules and watts of a prepared Jacobi-CG solve on each variant that runs it, beside AMG-PCG on
graph (issue 30's energy target: AMG-PCG's joules ratio at least its time ratio; bench-amg
compares the fastest variant of each, and its runs had only graph and merge). Float64 CG, rtol
1e-8, x* = ones, one process: each solver prepared once, then NVML windows of S seconds of
repeated solves (dpsolve.measure.measure_window) in the order of the solvers and back (the GPU
warms over a window), pooled. The csv beside it: session 49, H200, main at 016fd00, from this
script's first form (the same windows in the same order; its output put in these columns).

    python3 benchmarks/jacobi-cg-watts-by-variant-2026-11-30.py laplace3d:160,laplace3d:100 [S]

Prints one line a solver: problem, solver, ms, J and W a solve, and its time and joules over
AMG-PCG's.
"""
import sys

import cupy as cp
import cupyx.scipy.sparse as csp
import numpy as np
import scipy.sparse as sp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.measure import measure_window

SOLVERS = (("jacobi", "graph"), ("jacobi", "persistent"), ("jacobi", "dynamic"),
           ("jacobi", "merge"), ("amg", "graph"))


def main():
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    print("problem,M,variant,ms,J,W,time_over_amg,joules_over_amg")
    for spec in sys.argv[1].split(","):
        kind, k = spec.split(":")
        A = sp.csr_array(laplace_2d(int(k)) if kind == "poisson2d" else laplace_3d(int(k)))
        A.sort_indices()
        dA, db = csp.csr_matrix(A), cp.asarray(A @ np.ones(A.shape[0]))
        prepared = {}
        for M, variant in SOLVERS:
            try:
                prepared[M, variant] = dpsolve.prepare(dA, "cg", M=M, variant=variant)
                prepared[M, variant].solve(db, rtol=1e-8)
            except Exception as e:                  # a variant that refuses M: named
                print(f"# {spec} {M} {variant}: {type(e).__name__}: {e}", flush=True)
                prepared.pop((M, variant), None)
        pooled = {key: [0, 0.0, 0.0] for key in prepared}
        for key in list(prepared) + list(prepared)[::-1]:
            m = measure_window(lambda: prepared[key].solve(db, rtol=1e-8), seconds=seconds,
                               sync=cp.cuda.Device().synchronize)
            acc = pooled[key]
            acc[0] += m["reps"]
            acc[1] += m["wall"] * m["reps"]
            acc[2] += m["gpu_energy"] * m["reps"]
        reps, s, j = pooled["amg", "graph"]
        t_amg, j_amg = s / reps, j / reps
        for (M, variant), (reps, s, j) in pooled.items():
            print(f"{spec},{M},{variant},{s / reps * 1e3:.3f},{j / reps:.4f},{j / s:.0f},"
                  f"{s / reps / t_amg:.2f},{j / reps / j_amg:.2f}", flush=True)


if __name__ == "__main__":
    main()
