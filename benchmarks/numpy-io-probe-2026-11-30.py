"""Probe: what NumPy inputs cost beside CuPy ones, single GPU: raw downloads (CuPy's get and
_setup.download, this tree only), prepared AMG-PCG and Jacobi-CG solves and one-shot calls with
NumPy and CuPy b (rtol 1e-8); csv rows on stdout."""
import sys
import time

import cupy as cp
import cupyx.scipy.sparse as csp
import numpy as np

import dpsolve
from dpsolve import _setup
from dpsolve.matrices import laplace_3d

tree = sys.argv[1]
sync = cp.cuda.Device().synchronize


def row(case, kind, call, ms, extra=""):
    print(f"{tree},{case},{kind},{call},{ms:.3f},{extra}", flush=True)


if hasattr(_setup, "download"):
    for mb in (32, 64):
        d = cp.random.standard_normal(mb << 17)
        sync()
        for call in range(4):
            t = time.perf_counter()
            a = d.get()
            row(f"raw-{mb}MB", "get", call, (time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            b = _setup.download(d)
            row(f"raw-{mb}MB", "download", call, (time.perf_counter() - t) * 1e3,
                str(np.array_equal(a, b)))
for side, M, reps in ((160, "amg", 6), (100, "jacobi", 6), (160, "jacobi", 3)):
    A = laplace_3d(side).tocsr()
    b = A @ np.ones(A.shape[0])
    bd = cp.asarray(b)
    P = dpsolve.prepare(A, "cg", M=M)
    P.solve(bd, rtol=1e-8)
    P.solve(b, rtol=1e-8)
    for call in range(reps):
        for kind, rhs in (("numpy", b), ("cupy", bd)):
            sync()
            t = time.perf_counter()
            x, info, rep = P.solve(rhs, rtol=1e-8, full_output=True)
            ms = (time.perf_counter() - t) * 1e3
            row(f"prepared-{M}-{side}^3", kind, call, ms,
                f"{rep.iterations} {info} {float(x[0])!r}")
A = laplace_3d(160).tocsr()
Ad = csp.csr_matrix(A)
b = A @ np.ones(A.shape[0])
bd = cp.asarray(b)
dpsolve.cg(Ad, bd, rtol=1e-8)
dpsolve.cg(A, b, rtol=1e-8)
for call in range(3):
    for kind, (AA, rhs) in (("numpy", (A, b)), ("cupy", (Ad, bd))):
        sync()
        t = time.perf_counter()
        x, info = dpsolve.cg(AA, rhs, rtol=1e-8)
        row("one-shot-160^3", kind, call, (time.perf_counter() - t) * 1e3, f"{float(x[0])!r}")
