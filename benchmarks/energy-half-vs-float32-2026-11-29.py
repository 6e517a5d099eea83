# ruff: noqa
"""Joules per prepared solve at 3-D 160^3 (float64 CG, rtol 1e-8, x* = ones, graph): Jacobi-CG,
AMG-PCG with float16 matrices ("auto"), with float32 matrices ("mixed"); windows of 2 s in the
order J H M M H J, twice (rounds a, b; argv[2]: how many). Prints one CSV line a window."""
import sys
import cupy
import cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_3d
from dpsolve.measure import measure_window

n = int(sys.argv[1]) if len(sys.argv) > 1 else 160
A = csp.csr_matrix(laplace_3d(n, n, n))
b = A @ cupy.ones(A.shape[0])
sync = cupy.cuda.Device().synchronize
P = {"jacobi": dpsolve.prepare(A, "cg", M="jacobi", variant="graph"),
     "half": dpsolve.prepare(A, "cg", M=dpsolve.precond.AMG(precision="auto"), variant="graph"),
     "mixed": dpsolve.prepare(A, "cg", M=dpsolve.precond.AMG(precision="mixed"), variant="graph")}
print("round,kind,reps,ms,J,W,iterations", flush=True)
for rnd in "abcdefgh"[:int(sys.argv[2]) if len(sys.argv) > 2 else 2]:
    for k in ("jacobi", "half", "mixed", "mixed", "half", "jacobi"):
        m = measure_window(lambda: P[k].solve(b, rtol=1e-8, full_output=True), seconds=2.0,
                           sync=sync)
        its = m["result"][2].iterations
        print(f"{rnd},{k},{m['reps']},{m['wall'] * 1e3:.3f},{m['gpu_energy']:.4f},"
              f"{m['gpu_power']:.0f},{its}", flush=True)
