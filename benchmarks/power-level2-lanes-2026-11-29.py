# ruff: noqa
# As run on an H200, 2026-11-29 (`python3 <this> 160`); its first lines of output:
#   lanes32: lanes [2, 16, 32, 32, 32], lanes_R [None, 32, 32, 32, 2], V-cycle 0.682 ms
#   lanes16: lanes [2, 4, 16, 32, 32], lanes_R [None, 8, 32, 32, 2], V-cycle 0.688 ms
#   lanes8: lanes [2, 2, 8, 32, 32], lanes_R [None, 4, 32, 32, 2], V-cycle 0.732 ms
"""Issue 30's joules: level 2 of 3-D 160^3 (86k rows of 164, CSR-vector, 32 lanes a row, the
V-cycle's hottest kernels at ~690 W on the H100). AMG-PCG prepared solves (graph, float64 CG,
rtol 1e-8, x* = ones) with level 2's lanes 32 (shipped, LANE_ENTRIES 4), 16 (LANE_ENTRIES 16)
and 8 (32), against Jacobi-CG: 2 s windows J s16 s8 ... reversed, two rounds. CSV lines."""
import sys
import cupy
import cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_3d
from dpsolve.measure import measure_window
from dpsolve.precond.amg import device as dev

n = int(sys.argv[1]) if len(sys.argv) > 1 else 160
A = csp.csr_matrix(laplace_3d(n, n, n))
b = A @ cupy.ones(A.shape[0])
sync = cupy.cuda.Device().synchronize
P = {"jacobi": dpsolve.prepare(A, "cg", M="jacobi", variant="graph")}
for name, le in (("lanes32", 4), ("lanes16", 16), ("lanes8", 32)):
    dev.LANE_ENTRIES = le
    P[name] = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    h = P[name].precond.hierarchy.low
    print(f"# {name}: lanes {[lev.lanes for lev in h.levels]}, lanes_R "
          f"{[lev.lanes_R for lev in h.levels]}, V-cycle "
          f"{P[name].precond.vcycle_time * 1e3:.3f} ms", flush=True)
dev.LANE_ENTRIES = 4
print("round,kind,reps,ms,J,W,iterations", flush=True)
order = ("jacobi", "lanes32", "lanes16", "lanes8")
for rnd in "ab":
    for k in order + order[::-1]:
        m = measure_window(lambda: P[k].solve(b, rtol=1e-8, full_output=True), seconds=2.0,
                           sync=sync)
        print(f"{rnd},{k},{m['reps']},{m['wall'] * 1e3:.3f},{m['gpu_energy']:.4f},"
              f"{m['gpu_power']:.0f},{m['result'][2].iterations}", flush=True)
