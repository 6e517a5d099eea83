"""Stress: prepared graph solves captured with PDL (pdl.ENABLED at capture) against the same
system captured with ordinary launches, in one process, repeated for argv[1] seconds; every x
compared bit for bit with the ordinary graph's first x. Run many copies at once (time-sliced
contexts). argv[2]: comma-separated case names (default all). The set-up modes of
BENCHMARKS.md's 12-01 entry (DPS_PDL_SETUP=all | only:K,.. | except:K,.., DPS_PDL_NO_TRIGGER,
DPS_PDL_NOATTR) need pdl-setup-experiment-2026-12-01.patch applied; without it the environment
is ignored and this measures the shipped iterations. As run (14 copies at once):
    for i in $(seq 14); do python3 pdl-stress-2026-12-01.py 30 & done; wait"""
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
import numpy as np
import scipy.sparse as sp

import dpsolve
from dpsolve.cuda import pdl
from dpsolve.matrices import laplace_2d, laplace_3d

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0


def nonherm(n):
    A = sp.csr_matrix(laplace_2d(n), dtype=np.complex128)
    return (A + sp.diags(np.full(A.shape[0], 0.3j)) + sp.eye(A.shape[0], k=1) * 0.2).tocsr()


CASES = {
    "cg-jacobi-2d128": (lambda: laplace_2d(128), "cg", "jacobi", np.float64),
    "bicgstab-jacobi-2d128": (lambda: laplace_2d(128), "bicgstab", "jacobi", np.float64),
    "bicg-none-c128-2d64": (lambda: nonherm(64), "bicg", None, np.complex128),
    "bicgstab-none-c64-2d64": (lambda: nonherm(64), "bicgstab", None, np.complex64),
    "cg-amg-2d256": (lambda: laplace_2d(256), "cg", "amg", np.float64),
    "cg-jacobi-f32-3d40": (lambda: laplace_3d(40), "cg", "jacobi", np.float32),
}
names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(CASES)
systems = []
for name in names:
    make, method, M, dtype = CASES[name]
    A = csp.csr_matrix(sp.csr_matrix(make()).astype(dtype))
    b = A @ cupy.ones(A.shape[0], dtype)
    P = {}
    for on in (False, True):
        pdl.ENABLED = on
        P[on] = dpsolve.prepare(A, method, M=M, variant="graph")
        P[on].solve(b, rtol=1e-6)                      # captures
    pdl.ENABLED = True
    x_ref, info_ref = P[False].solve(b, rtol=1e-6)
    systems.append((name, P, b, x_ref.get(), info_ref))
counts = {name: {True: [0, 0], False: [0, 0]} for name in names}   # [solves, mismatches]
t_end = time.perf_counter() + seconds
while time.perf_counter() < t_end:
    for name, P, b, x_ref, info_ref in systems:
        for on in (True, False):
            x, info = P[on].solve(b, rtol=1e-6)
            c = counts[name][on]
            c[0] += 1
            if info != info_ref or not np.array_equal(x.get(), x_ref):
                c[1] += 1
for name in names:
    c = counts[name]
    print(f"{name}: pdl {c[True][1]}/{c[True][0]} mismatched, ordinary {c[False][1]}/{c[False][0]}",
          flush=True)
