#!/usr/bin/env python3
"""The Chebyshev preconditioner's degree (issue 30, session 37, 2026-11-29): the data behind
``Chebyshev.DEFAULT_DEGREE = 5`` (it was 3).

    python3 benchmarks/chebyshev-degree-2026-11-29.py laplacians 2:128,2:512,2:1024,3:40,3:100,3:160
    python3 benchmarks/chebyshev-degree-2026-11-29.py real MATRICES_DIR     # the shared SPD ones
    python3 benchmarks/chebyshev-degree-2026-11-29.py host MATRICES_DIR     # no GPU: iterations

"laplacians": Jacobi-CG and Chebyshev-PCG of degree 2, 3, 4, 5, 6, 8 prepared on graph (x* =
ones, float64, rtol 1e-8), iterations and a solve (ms, median of 5). "real": the ten shared SPD
matrices, Jacobi and degrees 3 and 5 prepared with variant "auto" (CuPy inputs, b = A ones).
"host": the same on the host variant, iterations only. Its runs (H200 for the first two):
benchmarks/chebyshev-degree-2026-11-29.csv.
"""
import gzip
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

import dpsolve
from dpsolve.precond import Chebyshev

SPD = ("nos4", "bcsstk04", "Laplace3D10", "1138_bus", "bcsstk14", "bcsstk26", "bcsstk13",
       "bcsstk16", "s3rmt3m3", "FEM_3D_thermal1")


def timed(P, b) -> tuple:
    import cupy
    _, info, rep = P.solve(b, rtol=1e-8, maxiter=50000, full_output=True)
    ts = []
    for _ in range(5):
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        P.solve(b, rtol=1e-8, maxiter=50000)
        cupy.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t)
    return rep.iterations, info, statistics.median(ts) * 1e3, rep.variant


def laplacians(spec: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from vcycle_ab import systems
    for item, A, b in systems(spec):
        out = []
        for name, M in [("jacobi", "jacobi")] + [(f"cheb{d}", Chebyshev(degree=d))
                                                 for d in (2, 3, 4, 5, 6, 8)]:
            its, _, ms, _ = timed(dpsolve.prepare(A, "cg", M=M, variant="graph"), b)
            out.append(f"{name}:{its}it/{ms:.2f}ms")
        print(item, " ".join(out), flush=True)


def real(folder: str, host: bool) -> None:
    for name in SPD:
        with gzip.open(Path(folder) / f"{name}.mtx.gz") as f:
            A = sp.csr_array(scipy.io.mmread(f)).astype(np.float64)
        row = []
        for label, M in (("jac", "jacobi"), ("c3", Chebyshev(degree=3)),
                         ("c5", Chebyshev(degree=5))):
            if host:
                b = A @ np.ones(A.shape[0])
                _, info, rep = dpsolve.cg(A, b, rtol=1e-8, M=M, variant="host", maxiter=50000,
                                          full_output=True)
                row.append(f"{label} {rep.iterations}({info})")
                continue
            import cupy
            import cupyx.scipy.sparse as csp
            dA = csp.csr_matrix(A)
            its, info, ms, variant = timed(dpsolve.prepare(dA, "cg", M=M),
                                           dA @ cupy.ones(A.shape[0]))
            row.append(f"{label} {its}({info}) {ms:.2f}ms [{variant}]")
        print(name, A.shape[0], " | ".join(row), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "laplacians":
        laplacians(sys.argv[2])
    else:
        real(sys.argv[2], host=sys.argv[1] == "host")
