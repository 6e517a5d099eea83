"""Issue 30: the watts of prepared solves at 3-D 160^3 with the aggregates in their roots' order
(reference.ROOT_ORDER = True) against the passes' order, beside Jacobi-CG, all on graph, x* = ones,
rtol 1e-8. The card is warmed 8 s first; then 1.5 s windows J O N J J N O J (O: old numbering, N:
new). CSV lines: round, kind, reps, ms a solve, J a solve, W.
Usage: python3 benchmarks/aggregate-root-order-watts-2026-11-29.py [160]"""
import sys

import cupy
import cupyx.scipy.sparse as csp

import dpsolve
from dpsolve.matrices import laplace_3d
from dpsolve.measure import measure_window
from dpsolve.precond.amg import reference

n = int(sys.argv[1]) if len(sys.argv) > 1 else 160
A = csp.csr_matrix(laplace_3d(n, n, n))
b = A @ cupy.ones(A.shape[0])
sync = cupy.cuda.Device().synchronize
P = {"jacobi": dpsolve.prepare(A, "cg", M="jacobi", variant="graph")}
for key, order in (("amg-old", False), ("amg-new", True)):
    reference.ROOT_ORDER = order
    P[key] = dpsolve.prepare(A, "cg", M="amg", variant="graph")
reference.ROOT_ORDER = True
measure_window(lambda: P["amg-new"].solve(b, rtol=1e-8), seconds=8.0, sync=sync)
print("round,kind,reps,ms,J,W", flush=True)
for rnd, k in enumerate(("jacobi", "amg-old", "amg-new", "jacobi",
                         "jacobi", "amg-new", "amg-old", "jacobi")):
    m = measure_window(lambda: P[k].solve(b, rtol=1e-8), seconds=1.5, sync=sync)
    print(f"{rnd},{k},{m['reps']},{m['wall'] * 1e3:.3f},{m['gpu_energy']:.4f},"
          f"{m['gpu_power']:.0f}", flush=True)
