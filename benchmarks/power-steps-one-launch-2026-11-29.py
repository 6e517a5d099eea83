# ruff: noqa
# power steps per level: launched vs one cooperative launch; lanes; _check_level one pass vs CuPy;
# update() A/B (new vs old: POWER_ONE_LAUNCH_NNZ 0 and the CuPy level check), graph
import time, gc, sys, statistics
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
import dpsolve.precond.amg.device as dev
from dpsolve.cuda import ops
from dpsolve.matrices import laplace_2d, laplace_3d
sync = cupy.cuda.Device().synchronize
def tm(f, reps=7):
    ts = []
    for _ in range(reps):
        sync(); t0 = time.perf_counter(); r = f(); sync(); ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts), r
new_check = dev._check_level
def old_check(A, level):
    d = A.diagonal()
    if not ops.count_true((d == 0) | ~cupy.isfinite(d) | (d.real <= 0)):
        return (1.0 / d).astype(A.dtype)
    raise ValueError("bad")
probs = {"1024^2": lambda: laplace_2d(1024), "100^3": lambda: laplace_3d(100), "160^3": lambda: laplace_3d(160)}
BIG = 10**12
for name in sys.argv[1].split(","):
    A = csp.csr_matrix(probs[name]()); A2 = A * 2.0
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    h = P.precond.hierarchy
    for l, lev in enumerate(h.levels):
        Al, inv = lev.A, lev.inv_diag
        out = []
        for nnz_cap in (0, BIG, 0, BIG):
            dev.POWER_ONE_LAUNCH_NNZ = nnz_cap
            t, r = tm(lambda: dev.spectral_radius(Al, inv))
            out.append((nnz_cap, t, r))
        rr = {c: r for c, _, r in out}
        tl = [t for c, t, _ in out if c == 0]; tc = [t for c, t, _ in out if c == BIG]
        print(f"POWER {name} level {l} n {Al.shape[0]} nnz {Al.nnz} lanes {dev.vector_width(Al.nnz / Al.shape[0])}: launched {min(tl):.3f} one-launch {min(tc):.3f} ms; rel diff {abs(rr[0]-rr[BIG])/rr[0]:.1e}", flush=True)
        if l in (1, 2):
            orig = dev.vector_width
            for cap in (0, BIG):
                dev.POWER_ONE_LAUNCH_NNZ = cap
                res = []
                for lanes in (4, 8, 16, 32):
                    dev.vector_width = lambda m, L=lanes: L
                    res.append(f"{lanes}:{tm(lambda: dev.spectral_radius(Al, inv), 5)[0]:.3f}")
                dev.vector_width = orig
                print(f"LANES {name} level {l} {'one-launch' if cap else 'launched'} " + " ".join(res), flush=True)
        tn, a = tm(lambda: new_check(Al, l)); to, b = tm(lambda: old_check(Al, l))
        print(f"CHECK {name} level {l}: one pass {tn:.3f} CuPy {to:.3f} ms equal {bool(cupy.array_equal(a, b))}", flush=True)
    dev.POWER_ONE_LAUNCH_NNZ = 4_000_000
    P.update(A2); P.update(A)
    res = {"new": [], "old": []}
    for k in range(8):
        which = "new" if k % 2 == 0 else "old"
        dev.POWER_ONE_LAUNCH_NNZ = 4_000_000 if which == "new" else 0
        dev._check_level = new_check if which == "new" else old_check
        gc.collect(); sync(); t0 = time.perf_counter(); P.update(A2 if (k // 2) % 2 == 0 else A); sync()
        res[which].append((time.perf_counter() - t0) * 1e3)
    dev.POWER_ONE_LAUNCH_NNZ = 4_000_000; dev._check_level = new_check
    print(f"UPDATE {name} new {statistics.median(res['new']):.1f} {[round(x,1) for x in res['new']]} old {statistics.median(res['old']):.1f} {[round(x,1) for x in res['old']]}", flush=True)
    P = None; gc.collect()
