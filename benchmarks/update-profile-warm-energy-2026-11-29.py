# ruff: noqa
# cProfile of update() at 160^3 (graph and merge); level-1 power-step lanes; warmed energy windows
import time, gc, sys, statistics, cProfile, pstats, io
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
import dpsolve.precond.amg.device as dev
from dpsolve.matrices import laplace_3d
from dpsolve.measure import measure_window
sync = cupy.cuda.Device().synchronize
A = csp.csr_matrix(laplace_3d(160)); A2 = A * 2.0; b = A @ cupy.ones(A.shape[0])
for v in ("graph", "merge"):
    P = dpsolve.prepare(A, "cg", M="amg", variant=v)
    P.update(A2); P.update(A); sync()
    pr = cProfile.Profile()
    ts = []
    for k in range(4):
        gc.collect(); sync(); t0 = time.perf_counter()
        if k == 2: pr.enable()
        P.update(A2 if k % 2 == 0 else A); sync()
        if k == 2: pr.disable()
        ts.append((time.perf_counter() - t0) * 1e3)
    print(f"CPROF {v} update ms {[round(t, 1) for t in ts]}")
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45)
    print("\n".join(l[:150] for l in s.getvalue().splitlines() if l.strip())[:9000])
    if v == "graph":
        h = P.precond.hierarchy
        for l in (1, 2):
            Al, inv = h.levels[l].A, h.levels[l].inv_diag
            orig = dev.vector_width
            for lanes in (0, 2, 4, 8, 16, 32):
                if lanes: dev.vector_width = lambda m, L=lanes: L
                t = []
                for _ in range(5):
                    sync(); t0 = time.perf_counter(); r = dev.spectral_radius(Al, inv); sync(); t.append((time.perf_counter() - t0) * 1e3)
                dev.vector_width = orig
                print(f"LANES level {l} n {Al.shape[0]} nnz {Al.nnz} lanes {lanes or orig(Al.nnz / Al.shape[0])}: {statistics.median(t):.3f} ms rho {r:.12f}")
    P = None; gc.collect()
# energy, warmed: 8 s of Jacobi first, then J A A J J A A J (2 s windows)
Pj = dpsolve.prepare(A, "cg", M="jacobi", variant="graph"); Pa = dpsolve.prepare(A, "cg", M="amg", variant="graph")
measure_window(lambda: Pj.solve(b, rtol=1e-8), seconds=8.0, sync=sync)
for k in "JAAJJAAJ":
    Pk = Pj if k == "J" else Pa
    m = measure_window(lambda: Pk.solve(b, rtol=1e-8), seconds=2.0, sync=sync)
    print(f"WARMED {k} reps {m['reps']} ms {m['wall']*1e3:.3f} J {m['gpu_energy']:.4f} W {m['gpu_power']:.0f}", flush=True)
