# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 26). H200 2026-11-29:
# `python3 <this> 2:1024,3:100,3:160 auto,full` (the setup script: 2:1024,3:160).
import time, gc, sys, collections
import cupy, cupyx.scipy.sparse as csp
import dpsolve
import dpsolve.precond.amg.device as dev
from dpsolve.precond import AMG
from dpsolve.matrices import laplace_2d, laplace_3d
sync = cupy.cuda.Device().synchronize
T = collections.defaultdict(list)
def wrap(name):
    fn = getattr(dev, name)
    def w(*a, **k):
        sync(); t0 = time.perf_counter(); r = fn(*a, **k); sync(); T[name].append((time.perf_counter() - t0) * 1e3); return r
    setattr(dev, name, w)
for n in ("smoothed_restriction", "sell_of", "spgemm", "spgemm_pattern", "_prepare_cycle", "lowered", "_halve"):
    wrap(n)
for pr in sys.argv[1].split(","):
    d, k = pr.split(":"); k = int(k)
    A = laplace_2d(k) if d == "2" else laplace_3d(k)
    dA = csp.csr_matrix(A)
    for fuse in (True, False, True):
        dev.FUSE_RESTRICTION = fuse
        P = dpsolve.prepare(dA, "cg", M=AMG(), variant="graph"); P = None; gc.collect()
        T.clear(); sync(); t0 = time.perf_counter()
        P = dpsolve.prepare(dA, "cg", M=AMG(), variant="graph"); sync()
        tot = (time.perf_counter() - t0) * 1e3
        h = P.precond.hierarchy.low or P.precond.hierarchy
        lv = [(l.n, None if l.RS is None else int(l.RS.nnz), None if l.sell_R is None else "sell", l.lanes_R) for l in h.levels[:-1]]
        print(f"SETUP {pr} fuse={fuse} prepare {tot:.1f} ms; " + "; ".join(f"{n} {sum(v):.1f} ms x{len(v)} [{', '.join(f'{x:.1f}' for x in v)}]" for n, v in T.items()), lv, flush=True)
        P = None; gc.collect()
