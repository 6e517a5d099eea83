# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24). H200 2026-11-29: `python3 <this> 5` on the tree with cooperative-setup-loops-2026-11-29.patch applied (device.COOPERATIVE exists only there).
"""A/B in one process: AMG set-up (prepare, graph, float64) and re-set-up (update) with the
set-up's loops as one cooperative kernel each (device.COOPERATIVE True) or as launched loops."""
import gc, statistics, sys, time
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import device

def probe():
    t = time.perf_counter(); s = 0
    for i in range(2_000_000): s += i & 7
    return (time.perf_counter() - t) * 1e3

probs = [("1024^2", laplace_2d(1024, 1024)), ("100^3", laplace_3d(100, 100, 100)), ("160^3", laplace_3d(160, 160, 160))]
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
print("probe ms", round(probe(), 1), flush=True)
for name, A in probs:
    dA = csp.csr_matrix(A)
    dA2 = csp.csr_matrix(A * 2.0)
    res = {True: [], False: []}; upd = {True: [], False: []}; splits = {}
    hier = {}
    for coop in (True, False):
        device.COOPERATIVE = coop
        P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")   # warm
    for r in range(REPS):
        for coop in ((True, False) if r % 2 == 0 else (False, True)):
            device.COOPERATIVE = coop
            P = None; gc.collect(); cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
            cupy.cuda.Device().synchronize()
            res[coop].append((time.perf_counter() - t0) * 1e3)
            splits[coop] = P.precond.setup_times
            t0 = time.perf_counter()
            P.update(dA2); cupy.cuda.Device().synchronize()
            upd[coop].append((time.perf_counter() - t0) * 1e3)
            P.update(dA); cupy.cuda.Device().synchronize()
            hier[coop] = P.precond.hierarchy
            its = P.solve(dA @ cupy.ones(A.shape[0]), rtol=1e-8)
    same = all(cupy.array_equal(a.aggregates, b.aggregates) for a, b in zip(hier[True].levels[:-1], hier[False].levels[:-1]))
    rhos = [(a.rho, b.rho) for a, b in zip(hier[True].levels, hier[False].levels)]
    rel = max(abs(a - b) / max(abs(b), 1e-300) for a, b in rhos)
    for coop in (True, False):
        m, u = statistics.median(res[coop]), statistics.median(upd[coop])
        print(f"AB {name} coop={int(coop)} setup med {m:.1f} min {min(res[coop]):.1f} max {max(res[coop]):.1f} "
              f"resetup med {u:.1f} ratio {u / m:.2f} | " + " ".join(f"{k}={v*1e3:.1f}" for k, v in splits[coop].items()), flush=True)
    print(f"AB {name} same aggregates {same}, rho max rel diff {rel:.2e}", flush=True)
print("probe ms", round(probe(), 1), flush=True)
