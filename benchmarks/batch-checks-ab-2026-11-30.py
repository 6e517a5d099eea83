#!/usr/bin/env python3
"""What the batch's checks in CuPy cost, before and after the range fix and its follow-ups
(ee924f6, ab67d11: ``row_exponents`` and ``scaled_back``, ||b|| in float64), on the paths that
run them: BiCGStab (every size), and CG on systems too large for batch_cg_rows (over 4,096 rows,
or rows too long). Written in session 43 (2026-11-30) with no device time left: **not yet run**.
Run it as batch-range-ab-2026-11-30.sh runs its script, against a copy of b3f060e (before) and
the tree (after):

    AB_SCRIPT=batch-checks-ab-2026-11-30.py benchmarks/batch-range-ab-2026-11-30.sh 3 \
        before=DIR after=DIR

or directly: python3 benchmarks/batch-checks-ab-2026-11-30.py TAG [REPS]

Works: 1,000 x 2-D 32^2 and 200 x 3-D 16^3 (BiCGStab: the vectors in shared / global memory),
and 100 x 2-D 72^2 (5,184 rows: CG past the rows kernel); A_i = A + s_i I (s_i uniform in
[0, 1)), B standard normal, seed 0, rtol 1e-8 (float32: 1e-5; its first run, 11-30, had 1e-8:
every float32 solve went to maxiter), values and B on the device, float64 and float32,
M None and "jacobi". Prints CSV: tag,work,method,dtype,M,ms,its_max,path.
"""
import csv
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import cupy
import numpy as np

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

# the batches of the range A/B (its ``inputs``: the pattern, the shifted values, B), one source
_spec = importlib.util.spec_from_file_location(
    "batch_range_ab", Path(__file__).with_name("batch-range-ab-2026-11-30.py"))
range_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(range_ab)

RTOL = {"float64": 1e-8, "float32": 1e-5}     # 1e-8 in float32: maxiter, the loop's time

WORKS = (("1k x 2-D 32^2", lambda: laplace_2d(32), 1_000, ("bicgstab",)),
         ("200 x 3-D 16^3", lambda: laplace_3d(16), 200, ("bicgstab",)),
         ("100 x 2-D 72^2", lambda: laplace_2d(72), 100, ("cg", "bicgstab")))


def main():
    tag = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    out = csv.writer(sys.stdout)
    out.writerow(["tag", "work", "method", "dtype", "M", "ms", "its_max", "path"])
    for label, make, nb, methods in WORKS:
        A, values, B = range_ab.inputs(make, nb)
        for method in methods:
            solve = getattr(dpsolve.batch, method)
            for dtype in (np.float64, np.float32):
                dv, dB = cupy.asarray(values.astype(dtype)), cupy.asarray(B.astype(dtype))
                Ab = dpsolve.batch.csr(dv, A.indices, A.indptr)
                for M in (None, "jacobi"):
                    rtol = RTOL[np.dtype(dtype).name]
                    _, _, rep = solve(Ab, dB, rtol=rtol, M=M, full_output=True)
                    ts = []
                    for _ in range(reps):
                        cupy.cuda.Device().synchronize()
                        t0 = time.perf_counter()
                        solve(Ab, dB, rtol=rtol, M=M)
                        cupy.cuda.Device().synchronize()
                        ts.append(time.perf_counter() - t0)
                    out.writerow([tag, label, method, np.dtype(dtype).name, M,
                                  f"{statistics.median(ts) * 1e3:.3f}",
                                  int(rep.iterations.max()), rep.path])
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
