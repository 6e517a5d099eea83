# ruff: noqa
# one process: update() and set-up timings of one tree (argv[1]: a folder holding dpsolve) at one problem
import sys, time, gc, statistics
sys.path.insert(0, sys.argv[1])
import cupy, cupyx.scipy.sparse as csp, dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
assert dpsolve.__file__.startswith(sys.argv[1]) or sys.argv[1] in dpsolve.__file__, dpsolve.__file__
sync = cupy.cuda.Device().synchronize
probs = {"1024^2": lambda: laplace_2d(1024), "100^3": lambda: laplace_3d(100), "160^3": lambda: laplace_3d(160)}
A = csp.csr_matrix(probs[sys.argv[2]]()); A2 = A * 2.0
P = dpsolve.prepare(A, "cg", M="amg", variant=sys.argv[3] if len(sys.argv) > 3 else "graph")
P.update(A2); P.update(A); sync()
up = []
for k in range(6):
    gc.collect(); sync(); t0 = time.perf_counter(); P.update(A2 if k % 2 == 0 else A); sync(); up.append((time.perf_counter() - t0) * 1e3)
st = []
for k in range(3):
    P = None; gc.collect(); sync(); t0 = time.perf_counter(); P = dpsolve.prepare(A, "cg", M="amg", variant=sys.argv[3] if len(sys.argv) > 3 else "graph"); sync(); st.append((time.perf_counter() - t0) * 1e3)
b = A @ cupy.ones(A.shape[0]); x, info, rep = P.solve(b, rtol=1e-8, full_output=True)
print(f"AB {sys.argv[1].split('/')[-1] or sys.argv[1]} {sys.argv[2]} update {statistics.median(up):.1f} setup {statistics.median(st):.1f} ratio {statistics.median(up)/statistics.median(st):.3f} its {rep.iterations} info {info} rho {[round(l.rho, 12) for l in P.precond.hierarchy.levels]}", flush=True)
