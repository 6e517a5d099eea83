# ruff: noqa
"""Watts of prepared solves at 3-D 160^3: Jacobi-CG graph against AMG-PCG in each precision and
on graph and merge: 1.5 s windows in order then reversed. CSV lines."""
import sys, cupy, cupyx.scipy.sparse as csp, dpsolve
from dpsolve.matrices import laplace_3d
from dpsolve.measure import measure_window
n = int(sys.argv[1]) if len(sys.argv) > 1 else 160
A = csp.csr_matrix(laplace_3d(n, n, n)); b = A @ cupy.ones(A.shape[0])
sync = cupy.cuda.Device().synchronize
P = {"jacobi": dpsolve.prepare(A, "cg", M="jacobi", variant="graph")}
for prec in ("auto", "mixed", "full"):
    P[f"amg-{prec}"] = dpsolve.prepare(A, "cg", M=dpsolve.precond.AMG(precision=prec), variant="graph")
P["amg-auto-merge"] = dpsolve.prepare(A, "cg", M="amg", variant="merge")
print("ENERGY round,kind,reps,ms,J,W", flush=True)
order = tuple(P)
for rnd in "ab":
    for k in (order if rnd == "a" else order[::-1]):
        m = measure_window(lambda: P[k].solve(b, rtol=1e-8), seconds=1.5, sync=sync)
        print(f"ENERGY {rnd},{k},{m['reps']},{m['wall'] * 1e3:.3f},{m['gpu_energy']:.4f},{m['gpu_power']:.0f}", flush=True)
