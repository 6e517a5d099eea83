# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24). H200 2026-11-29: `ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw python3 <this> 2d|3d`.
"""One AMG set-up (prepare, graph) between profilerStart/Stop, after two warm ones (run under ncu)."""
import sys
import cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
A = laplace_2d(1024, 1024) if sys.argv[1] == "2d" else laplace_3d(100, 100, 100)
dA = csp.csr_matrix(A)
for _ in range(2):
    P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
cupy.cuda.Device().synchronize()
cupy.cuda.runtime.profilerStart()
P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
cupy.cuda.Device().synchronize()
cupy.cuda.runtime.profilerStop()
print("SETUP", {k: round(v * 1e3, 2) for k, v in P.precond.setup_times.items()})
