"""Prepared calls with a NumPy b (and a CuPy b beside), one tree per process: ms per call,
median [min-max] of calls 4..N of back-to-back ``x, info = P.solve(b)``; csv rows on stdout."""
import statistics as st
import sys
import time

import cupy as cp
import numpy as np

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

tree = sys.argv[1]
sync = cp.cuda.Device().synchronize
cases = [("2-D 64^2 maxiter=1", laplace_2d(64), {}, {"maxiter": 1}, 60),
         ("2-D 64^2", laplace_2d(64), {}, {}, 40),
         ("2-D 256^2", laplace_2d(256), {}, {}, 30),
         ("3-D 100^3 graph", laplace_3d(100), {"variant": "graph"}, {}, 12),
         ("3-D 100^3 persistent", laplace_3d(100), {"variant": "persistent"}, {}, 12),
         ("3-D 160^3 amg", laplace_3d(160), {"M": "amg"}, {}, 12)]
for name, A, popts, sopts, calls in cases:
    A = A.tocsr()
    b = A @ np.ones(A.shape[0])
    bd = cp.asarray(b)
    P = dpsolve.prepare(A, "cg", **popts)
    for rhs, kind in ((b, "numpy"), (bd, "cupy")):
        ts = []
        for _ in range(calls):
            sync()
            t = time.perf_counter()
            x, info = P.solve(rhs, rtol=1e-8, **sopts)
            ts.append((time.perf_counter() - t) * 1e3)
        xs = x if isinstance(x, np.ndarray) else x.get()
        ts = ts[3:]
        print(f"{tree},{name},{P.variant},{kind},{st.median(ts):.4f},{min(ts):.4f},{max(ts):.4f},"
              f"{info},{xs[:3].sum()!r}", flush=True)
