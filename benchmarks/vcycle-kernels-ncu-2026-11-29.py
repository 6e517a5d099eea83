# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24). H200 2026-11-29: as setup-kernels-ncu's command with dram__bytes_read.sum,dram__bytes_write.sum added, argument 2d|3d; the second V-cycle's rows are vcycle-kernels-ncu-2026-11-29-h200.csv.
"""Per-kernel durations of one V-cycle (run under ncu): levels, then 3 V-cycles marked by a
range of kernels after the set-up."""
import sys
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
name = sys.argv[1]
A = laplace_2d(1024, 1024) if name == "2d" else laplace_3d(160, 160, 160)
dA = csp.csr_matrix(A)
P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
h = P.precond.hierarchy
lo = h.low if h.low is not None else h
for i, lev in enumerate(lo.levels):
    print(f"LEVEL {i} n {lev.n} nnz {int(lev.A.nnz)} sellA {lev.sell_A is not None} sellP {lev.sell_P is not None} sellR {lev.sell_R is not None} lanes {lev.lanes} lanesP {lev.lanes_P} lanesR {lev.lanes_R} fused {lev.fused}", flush=True)
print("VCYCLE_TIME_MS", P.precond.vcycle_time * 1e3, flush=True)
b = cupy.ones(dA.shape[0]); z = cupy.empty_like(b)
s = cupy.cuda.Stream(non_blocking=True)
cupy.cuda.runtime.profilerStart()
for _ in range(2):
    h.vcycle(b, z, s)
s.synchronize()
cupy.cuda.runtime.profilerStop()
