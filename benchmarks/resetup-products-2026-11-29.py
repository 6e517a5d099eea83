# ruff: noqa
"""Issue 30: where a numeric re-set-up's products go at 3-D 100^3 with the aggregates in their
roots' order (reference.ROOT_ORDER True) and in the passes' (False): every spgemm_pattern,
spgemm_counted and spgemm call of one update() timed with a device sync either side (shapes,
nnz of both operands, ms). Usage: python3 benchmarks/resetup-products-2026-11-29.py"""
import time, cupy, cupyx.scipy.sparse as csp, dpsolve
from dpsolve.matrices import laplace_3d
from dpsolve.precond.amg import device, reference
sync = cupy.cuda.Device().synchronize
A = csp.csr_matrix(laplace_3d(100)); A2 = A * 2.0
LOG = []
def wrap(name):
    f = getattr(device, name)
    def g(*a, **k):
        sync(); t0 = time.perf_counter(); r = f(*a, **k); sync()
        LOG.append((name, tuple(a[0].shape), tuple(a[1].shape), int(a[0].nnz), int(a[1].nnz), (time.perf_counter() - t0) * 1e3))
        return r
    setattr(device, name, g)
for n in ("spgemm_pattern", "spgemm_counted", "spgemm"):
    wrap(n)
for ro in (True, False, True, False):
    reference.ROOT_ORDER = ro
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    P.update(A2); LOG.clear(); P.update(A)
    print("ORDER", ro, " | ".join(f"{n} {sa}x{sb} {na}/{nb}: {ms:.2f}" for n, sa, sb, na, nb, ms in LOG), flush=True)
    P = None
