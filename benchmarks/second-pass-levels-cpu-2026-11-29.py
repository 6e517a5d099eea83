# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 25), CPU: `python3 <this> 2d-512,3d-64 jacobi 1,2,0,12,21,112,221`, then 2d-1024,3d-100 and 3d-160 with 1,2,21,221(,211).
"""CPU: per-level second_pass of the aggregation: complexity, iterations, bytes."""
import sys, time
import numpy as np, scipy.sparse as sp
from scipy.sparse.linalg import cg, LinearOperator
import dpsolve.precond.amg.reference as ref

def poisson2d(m):
    T = sp.diags([-1, 2, -1], [-1, 0, 1], shape=(m, m))
    I = sp.identity(m)
    return sp.csr_array(sp.kron(I, T) + sp.kron(T, I))

def laplace3d(m):
    T = sp.diags([-1, 2, -1], [-1, 0, 1], shape=(m, m))
    I = sp.identity(m)
    return sp.csr_array(sp.kron(sp.kron(I, I), T) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(T, I), I))

orig = ref.aggregate
def run(A, pattern, smoother="jacobi"):
    calls = [0]
    def agg(indptr, indices, second_pass=1):
        sp_ = pattern[min(calls[0], len(pattern) - 1)]
        calls[0] += 1
        return orig(indptr, indices, second_pass=sp_)
    ref.aggregate = agg
    t = time.time()
    h = ref.setup(A, smoother=smoother, precision="full")
    ts = time.time() - t
    ref.aggregate = orig
    n = A.shape[0]
    b = A @ np.ones(n)
    M = ref.as_operator(h)
    its = [0]
    def cb(x): its[0] += 1
    x, info = cg(A, b, rtol=1e-8, M=M, callback=cb, maxiter=500)
    vb = ref.vcycle_bytes(h, 4)
    cgb = A.nnz * 12 + n * 8 * 10
    lv = ref.levels_table(h)
    return dict(oc=h.operator_complexity(), its=its[0], info=info, vb=vb, tot=its[0] * (vb + cgb),
                lv=lv, ts=ts)

probs = {"3d-160": lambda: laplace3d(160), "2d-512": lambda: poisson2d(512), "3d-64": lambda: laplace3d(64),
         "2d-1024": lambda: poisson2d(1024), "3d-100": lambda: laplace3d(100)}
pats = [tuple(int(c) for c in s) for s in sys.argv[3].split(",")]
for name in sys.argv[1].split(","):
    A = probs[name]()
    for smoother in sys.argv[2].split(","):
        base = None
        for p in pats:
            r = run(A, p, smoother)
            base = base or r["tot"]
            print(f"{name} {smoother:9s} sp={p!s:10s} oc={r['oc']:.2f} its={r['its']:3d} info={r['info']} "
                  f"vcycleMB={r['vb']/1e6:7.1f} totalMB={r['tot']/1e6:8.1f} ({r['tot']/base:.3f}) "
                  f"lv={[(a, round(b/a,1)) for a,b in r['lv']][:4]} setup={r['ts']:.1f}s", flush=True)
