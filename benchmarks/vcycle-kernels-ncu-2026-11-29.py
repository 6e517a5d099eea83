# ruff: noqa
# Kept for BENCHMARKS.md (issue 30). Session 24, H200 2026-11-29: as setup-kernels-ncu's command
# with dram__bytes_read.sum,dram__bytes_write.sum added, argument 2d|3d; the second V-cycle's rows
# are vcycle-kernels-ncu-2026-11-29-h200.csv. Session 36 added the levels' RS and SELL columns
# and FUSE_CASTS (env, 1 by default) and ran, on the H200:
#   ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size --csv --page raw python3 THIS 2d|3d
# (session36-experiments-2026-11-29.csv, ncu-kernels), and with -k regex:"vc_restrict|vc_dense|vc_prolong_sell_low|vc_jacobi_ell_low"
# --launch-skip 5 --launch-count 5 and the sections SpeedOfLight, MemoryWorkloadAnalysis,
# Occupancy, WarpStateStats (its ncu-detail rows).
"""Per-kernel durations of one V-cycle (run under ncu): levels, then two V-cycles in a profiler
range after the set-up."""
import sys
import cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
name = sys.argv[1]
A = laplace_2d(1024, 1024) if name == "2d" else laplace_3d(160, 160, 160)
dA = csp.csr_matrix(A)
import os
from dpsolve.precond.amg import device as _dev
_dev.FUSE_CASTS = os.environ.get("FUSE_CASTS", "1") == "1"
P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
h = P.precond.hierarchy
lo = h.low if h.low is not None else h
from dpsolve.precond.amg import reference
for i, lev in enumerate(lo.levels):
    print(f"LEVEL {i} n {lev.n} nnzA {int(lev.A.nnz)} RS {None if lev.RS is None else int(lev.RS.nnz)} uses_rs {reference.uses_rs(lo, lev)} sellA {lev.sell_A is not None} sellP {lev.sell_P is not None} sellR {lev.sell_R is not None} lanes {lev.lanes} P {lev.lanes_P} R {lev.lanes_R} fused {lev.fused}", flush=True)
print("COARSE", lo.coarse_inv.shape, lo.coarse_inv.dtype, "ell0", lo.ell0 is not None, "fused casts", h.casts_fused())
print("VCYCLE_TIME_US", P.precond.vcycle_time * 1e6, "BYTES", P.precond.vcycle_bytes, flush=True)
b = cupy.ones(dA.shape[0]); z = cupy.empty_like(b)
s = cupy.cuda.Stream(non_blocking=True)
cupy.cuda.runtime.profilerStart()
for _ in range(2):
    h.vcycle(b, z, s)
s.synchronize()
cupy.cuda.runtime.profilerStop()
