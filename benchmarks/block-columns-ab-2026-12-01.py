"""B (n, 8) on a prepared system whose block runs as columns (AMG on graph, persistent): ms a
call, CuPy and NumPy B. One JSON line a case; argv[1] labels the tree on PYTHONPATH. Run ABAB:
    for t in base work base work; do PYTHONPATH=TREE_$t python3 THIS $t; done
"""
import json
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
import numpy as np
import scipy.sparse as sp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

K = 8
CASES = [("2-D 1024^2 amg graph", lambda: laplace_2d(1024), "amg", "graph"),
         ("3-D 160^3 amg graph", lambda: laplace_3d(160), "amg", "graph"),
         ("2-D 64^2 none persistent", lambda: laplace_2d(64), None, "persistent"),
         ("3-D 100^3 jacobi persistent", lambda: laplace_3d(100), "jacobi", "persistent")]
for name, make, M, var in CASES:
    dA = csp.csr_matrix(sp.csr_matrix(make()))
    P = dpsolve.prepare(dA, "cg", M=M, variant=var)
    rng = np.random.default_rng(0)
    B = cupy.asarray(rng.standard_normal((dA.shape[0], K)))
    for kind, Bin in (("cupy", B), ("numpy", B.get())):
        for _ in range(2):
            X, info = P.solve(Bin, rtol=1e-8)
        ts = []
        for _ in range(7):
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            X, info = P.solve(Bin, rtol=1e-8)
            cupy.cuda.Device().synchronize()
            ts.append(time.perf_counter() - t)
        print(json.dumps({"tree": sys.argv[1], "case": name, "b": kind, "k": K,
                          "ms": 1e3 * float(np.median(ts)), "min_ms": 1e3 * min(ts),
                          "info": [int(i) for i in info]}), flush=True)
