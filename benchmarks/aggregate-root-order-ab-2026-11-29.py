"""Issue 30: the aggregates numbered in their roots' order (reference.ROOT_ORDER) against the
passes' order (first aggregates, then second ones), on the GPU: AMG-PCG prepared on graph, x* =
ones, rtol 1e-8; per problem and numbering, interleaved A B A B in one process: iterations, the
V-cycle's time (the preconditioner's own timing), the prepared solve (median of 15) and the
set-up. Usage: python3 benchmarks/aggregate-root-order-ab-2026-11-29.py [2:1024,3:100,3:160]"""
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import reference

sync = cupy.cuda.Device().synchronize
spec = sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:100,3:160"
print("problem,root_order,round,iterations,vcycle_us,solve_ms,setup_ms", flush=True)
for item in spec.split(","):
    dim, size = item.split(":")
    A = csp.csr_matrix(laplace_2d(int(size)) if dim == "2" else laplace_3d(int(size)))
    b = A @ cupy.ones(A.shape[0])
    for rnd in range(2):
        for order in (False, True):
            reference.ROOT_ORDER = order
            sync()
            t0 = time.perf_counter()
            P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
            sync()
            setup = (time.perf_counter() - t0) * 1e3
            _, info, rep = P.solve(b, rtol=1e-8, full_output=True)
            times = []
            for _ in range(15):
                sync()
                t0 = time.perf_counter()
                P.solve(b, rtol=1e-8)
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
            print(f"{dim}-D {size},{order},{rnd},{rep.iterations},"
                  f"{P.precond.vcycle_time * 1e6:.1f},{statistics.median(times):.3f},"
                  f"{setup:.1f}", flush=True)
            P = None
reference.ROOT_ORDER = True
