#!/usr/bin/env python3
"""An A/B of dpsolve.batch between two trees in ONE process: each tree's package imported in turn
(``sys.modules`` purged of dpsolve between), rounds in ABBA order, each config's time the median
of 7 calls (cupy synchronised) after a warm-up call, so both trees share the process's speed mode.
Why: the per-process A/B (batch-range-ab-2026-11-30.sh) showed a mode per process, every config
of one process fast or every one ~25 % slower, which a 5-round run cannot average away.

Works: 100 x 2-D 72^2 (CG past batch_cg_rows: batch_cg; BiCGStab), 1,000 x 2-D 32^2 (CG on
batch_cg_rows; BiCGStab), 200 x 3-D 16^3 (BiCGStab); A_i = A + s_i I, s_i uniform in [0, 1), B
standard normal, seed 0 (batch-range-ab-2026-11-30.py's inputs), values and B on the device,
float64 (rtol 1e-8) and float32 (1e-5), M None and "jacobi". Session 51 (2026-11-30), H200: the
csv batch-redo-inproc-ab-2026-11-30.csv, main (016fd00) "before", batch-rows-redo "after".

    python3 benchmarks/batch-inproc-ab-2026-11-30.py ROUNDS before=DIR after=DIR > ab.csv

Prints CSV: round,tag,work,method,dtype,M,ms,path.
"""
import csv
import importlib
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import cupy

# the inputs of the range A/B (``inputs``: the pattern, the shifted values, B) and its
# matrices; it imports a dpsolve (PYTHONPATH's), dropped by load before any timing
_spec = importlib.util.spec_from_file_location(
    "batch_range_ab", Path(__file__).with_name("batch-range-ab-2026-11-30.py"))
range_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(range_ab)
REPS = 7
RTOL = {"float64": 1e-8, "float32": 1e-5}


def load(path, trees):
    """dpsolve from ``path`` (the other trees' out of sys.path, every dpsolve module dropped)."""
    for name in [k for k in sys.modules if k == "dpsolve" or k.startswith("dpsolve.")]:
        del sys.modules[name]
    sys.path[:] = [path] + [p for p in sys.path if p not in {t for _, t in trees}]
    importlib.invalidate_caches()
    module = importlib.import_module("dpsolve")
    assert module.__file__.startswith(path), module.__file__
    return module


def main():
    rounds = int(sys.argv[1])
    trees = [a.split("=", 1) for a in sys.argv[2:]]
    works = (("100 x 2-D 72^2", range_ab.inputs(lambda: range_ab.laplace_2d(72), 100),
              ("cg", "bicgstab")),
             ("1k x 2-D 32^2", range_ab.inputs(lambda: range_ab.laplace_2d(32), 1_000),
              ("cg", "bicgstab")),
             ("200 x 3-D 16^3", range_ab.inputs(lambda: range_ab.laplace_3d(16), 200),
              ("bicgstab",)))
    out = csv.writer(sys.stdout)
    out.writerow(["round", "tag", "work", "method", "dtype", "M", "ms", "path"])
    for r in range(rounds):
        for tag, path in trees if r % 2 == 0 else trees[::-1]:
            dp = load(path, trees)
            for label, (A, values, B), methods in works:
                for method in methods:
                    solve = getattr(dp.batch, method)
                    for dtype in ("float64", "float32"):
                        dv, dB = cupy.asarray(values.astype(dtype)), cupy.asarray(B.astype(dtype))
                        Ab = dp.batch.csr(dv, A.indices, A.indptr)
                        for M in (None, "jacobi"):
                            _, _, rep = solve(Ab, dB, rtol=RTOL[dtype], M=M, full_output=True)
                            ts = []
                            for _ in range(REPS):
                                cupy.cuda.Device().synchronize()
                                t0 = time.perf_counter()
                                solve(Ab, dB, rtol=RTOL[dtype], M=M)
                                cupy.cuda.Device().synchronize()
                                ts.append(time.perf_counter() - t0)
                            out.writerow([r, tag, label, method, dtype, M,
                                          f"{statistics.median(ts) * 1e3:.3f}", rep.path])
            sys.stdout.flush()


if __name__ == "__main__":
    main()
