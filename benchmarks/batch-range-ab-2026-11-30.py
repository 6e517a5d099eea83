#!/usr/bin/env python3
"""dpsolve.batch.cg before and after the range fix (b scaled by 2^-e inside batch_cg_rows;
session 43, 2026-11-30). The dpsolve imported is the one on PYTHONPATH: the driver
(``batch-range-ab-2026-11-30.sh``) runs this file in turn against copies of the package, ROUNDS
times each, on one machine. In the run of the csv beside it: "before" main (b3f060e); "v1" the
first form (d22b311: a nonzero flag and its barrier, e in shared memory, b read as b 2^-e at each
residual); "v2" the shipped one (ee924f6: b 2^-e written into the system's rows of X and read
from there, b = 0 through the rare path, no new barrier on the common path); "v3" v2 with b's
pointer chosen from s_exp at each read instead of kept.

Works: the batch headline of scripts/bench-many (10,000 x 3-D 10^3 and 1,000 x 2-D 32^2, A_i =
A + s_i I, s_i uniform in [0, 1), B standard normal, seed 0), CG, rtol 1e-8, values and B on the
device, in float64 and float32, M=None and "jacobi". A call's time is the median of REPS
(cupy synchronised), after a warm-up call. rtol 1e-8 is out of float32's reach: its runs go to
maxiter (10 n), a measure of the loop alone. AB_WORK=TEXT: only the works whose label holds it.

    python3 benchmarks/batch-range-ab-2026-11-30.py TAG [REPS]

Prints CSV: tag,work,dtype,M,ms,its_max,worst_rel_res,path (a header, then a row a config).
"""
import csv
import os
import statistics
import sys
import time

import cupy
import numpy as np
import scipy.sparse as sp

import dpsolve
from dpsolve.batch.reference import matvec
from dpsolve.matrices import laplace_2d, laplace_3d

WORKS = (("10k x 3-D 10^3", lambda: laplace_3d(10), 10_000),
         ("1k x 2-D 32^2", lambda: laplace_2d(32), 1_000))


def inputs(make, nb):
    A = sp.csr_array(make())
    A.sort_indices()
    rng = np.random.default_rng(0)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    values = np.tile(A.data, (nb, 1))
    values[:, A.indices == rows] += rng.random((nb, 1))
    return A, values, rng.standard_normal((nb, A.shape[0]))


def main():
    tag = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    out = csv.writer(sys.stdout)
    out.writerow(["tag", "work", "dtype", "M", "ms", "its_max", "worst_rel_res", "path"])
    for label, make, nb in WORKS:
        if os.environ.get("AB_WORK", "") not in label:
            continue
        A, values, B = inputs(make, nb)
        for dtype in (np.float64, np.float32):
            dv, dB = cupy.asarray(values.astype(dtype)), cupy.asarray(B.astype(dtype))
            Ab = dpsolve.batch.csr(dv, A.indices, A.indptr)
            for M in (None, "jacobi"):
                X, info, rep = dpsolve.batch.cg(Ab, dB, rtol=1e-8, M=M, full_output=True)
                ts = []
                for _ in range(reps):
                    cupy.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    dpsolve.batch.cg(Ab, dB, rtol=1e-8, M=M)
                    cupy.cuda.Device().synchronize()
                    ts.append(time.perf_counter() - t0)
                Xh = X.get().astype(np.float64)
                R = B - matvec(values, A.indptr, A.indices, Xh)
                worst = float((np.linalg.norm(R, axis=1) / np.linalg.norm(B, axis=1)).max())
                out.writerow([tag, label, np.dtype(dtype).name, M,
                              f"{statistics.median(ts) * 1e3:.3f}", int(rep.iterations.max()),
                              f"{worst:.2e}", rep.path])
                sys.stdout.flush()


if __name__ == "__main__":
    main()
