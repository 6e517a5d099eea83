"""A/B: the Krylov kernels captured into graph's WHILE body with programmatic dependent launch
(pdl.ENABLED) against ordinary launches, in one process, prepared solves (CuPy b, rtol 1e-8,
x* = ones), ABBA rounds; plus merge (never captured) for a cross-tree comparison. Bits compared.
Run in a tree without dpsolve/cuda/pdl.py, only the ordinary configuration is timed."""
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
import numpy as np

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

try:
    from dpsolve.cuda import pdl
except ImportError:
    pdl = None

tag = sys.argv[1] if len(sys.argv) > 1 else "tree"
CASES = [
    ("2-D 256^2", lambda: laplace_2d(256), "cg", "jacobi", "graph"),
    ("2-D 1024^2", lambda: laplace_2d(1024), "cg", "jacobi", "graph"),
    ("3-D 100^3", lambda: laplace_3d(100), "cg", "jacobi", "graph"),
    ("3-D 160^3", lambda: laplace_3d(160), "cg", "jacobi", "graph"),
    ("2-D 1024^2", lambda: laplace_2d(1024), "bicgstab", "jacobi", "graph"),
    ("2-D 256^2", lambda: laplace_2d(256), "cg", "amg", "graph"),
    ("2-D 1024^2", lambda: laplace_2d(1024), "cg", "amg", "graph"),
    ("3-D 160^3", lambda: laplace_3d(160), "cg", "amg", "graph"),
    ("2-D 1024^2", lambda: laplace_2d(1024), "cg", "jacobi", "merge"),
    ("2-D 1024^2", lambda: laplace_2d(1024), "cg", "amg", "merge"),
]
configs = [True, False] if pdl is not None else [None]


def timed(P, b, k):
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(k):
        x, info = P.solve(b, rtol=1e-8)
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / k * 1e3, x, info


for name, make, method, M, variant in CASES:
    A = make()
    dA = csp.csr_matrix(A)
    b = dA @ cupy.ones(A.shape[0])
    Ps, xs = {}, {}
    for on in configs:
        if pdl is not None:
            pdl.ENABLED = on
        Ps[on] = dpsolve.prepare(dA, method, M=M, variant=variant)
        ms, x, info = timed(Ps[on], b, 1)
        xs[on] = (x.get(), info)
    if pdl is not None:
        pdl.ENABLED = True
    t1 = timed(Ps[configs[0]], b, 1)[0]
    k = max(2, int(300 / max(t1, 0.05)))
    k = min(k, 2000)
    res = {on: [] for on in configs}
    for rnd in range(6):
        order = configs if rnd % 2 == 0 else configs[::-1]
        for on in order:
            res[on].append(timed(Ps[on], b, k)[0])
    _, info_ref = xs[configs[0]]
    its = None
    same = all(np.array_equal(xs[c][0], xs[configs[0]][0]) for c in configs)
    row = [f"{tag}", name, method, M, variant, f"k={k}"]
    for on in configs:
        row.append(f"{'pdl' if on else ('off' if on is False else 'tree')} "
                   f"{statistics.median(res[on]):.4f} ms [{min(res[on]):.4f}-{max(res[on]):.4f}]")
    if len(configs) == 2:
        row.append(f"off/pdl {statistics.median(res[False]) / statistics.median(res[True]):.3f}")
    row.append(f"bits {'same' if same else 'DIFFER'} info {info_ref}")
    print("PDLAB " + " | ".join(row), flush=True)
