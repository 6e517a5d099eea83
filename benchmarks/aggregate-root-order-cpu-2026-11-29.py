"""Issue 30, on the CPU: the aggregates in their roots' order (reference.ROOT_ORDER) against the
passes' order. For each problem and numbering: the host reference's hierarchy (the device's
rules), AMG-PCG iterations (variant host, rtol 1e-8, x* = ones), and the 32-byte sectors and
128-byte lines of a float32 x that each slice of 32 consecutive rows gathers through A_1, P_0
and R_0, summed (a proxy for the V-cycle's L1/L2 traffic: the SELL kernels run a thread a row,
32 rows a warp). CSV lines. Usage: python3 benchmarks/aggregate-root-order-cpu-2026-11-29.py
[1024^2,512^2,100^3,64^3,160^3]"""
import sys

import numpy as np
import scipy.sparse as sp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import reference


def touched(M, item=4, rows=32):
    M = sp.csr_array(M)
    n, ptr, idx = M.shape[0], M.indptr, M.indices
    sectors = lines = 0
    for s0 in range(0, n, rows):
        c = idx[ptr[s0]:ptr[min(n, s0 + rows)]]
        sectors += np.unique(c * item // 32).size
        lines += np.unique(c * item // 128).size
    return sectors, lines


PROBLEMS = {"1024^2": lambda: laplace_2d(1024), "512^2": lambda: laplace_2d(512),
            "100^3": lambda: laplace_3d(100), "64^3": lambda: laplace_3d(64),
            "160^3": lambda: laplace_3d(160)}
print("problem,root_order,iterations,levels,A1 sectors,A1 lines,P0 sectors,P0 lines,"
      "R0 sectors,R0 lines", flush=True)
for name in (sys.argv[1] if len(sys.argv) > 1 else ",".join(PROBLEMS)).split(","):
    A = sp.csr_array(PROBLEMS[name]())
    b = A @ np.ones(A.shape[0])
    for order in (False, True):
        reference.ROOT_ORDER = order
        h = reference.setup(A)
        _, info, rep = dpsolve.cg(A, b, M="amg", variant="host", rtol=1e-8, full_output=True)
        counts = [c for M in (h.levels[1].A, h.levels[0].P, h.levels[0].R) for c in touched(M)]
        levels = " ".join(str(lev.A.shape[0]) for lev in h.levels)
        print(f"{name},{order},{rep.iterations},{levels}," + ",".join(map(str, counts)),
              flush=True)
reference.ROOT_ORDER = True
