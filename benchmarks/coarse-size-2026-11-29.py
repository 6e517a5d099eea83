# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 25). H200 2026-11-29: `python3 <this>`.
"""A larger coarsest level (max_coarse) at 1024^2 and 160^3: levels, V-cycle, iterations, solve, set-up."""
import gc, statistics, time, sys
import cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond import AMG
def vtime(P, reps=7, k=20):
    h = P.precond.hierarchy
    n = h.levels[0].n
    b = cupy.ones(n); z = cupy.empty_like(b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        h.vcycle(b, z, s)
        s.begin_capture()
        for _ in range(k):
            h.vcycle(b, z, s)
        g = s.end_capture()
        g.launch(s); s.synchronize()
        ts = []
        for _ in range(reps):
            e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
            e0.record(s); g.launch(s); e1.record(s); e1.synchronize()
            ts.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / k)
    return statistics.median(ts)

sync = cupy.cuda.Device().synchronize
for name, A in (("1024^2", laplace_2d(1024)), ("160^3", laplace_3d(160))):
    dA = csp.csr_matrix(A); b = dA @ cupy.ones(A.shape[0])
    Ps, info = {}, {}
    for mc in (300, 2500):
        make = lambda: dpsolve.prepare(dA, "cg", M=AMG(max_coarse=mc), variant="graph")
        P = make(); sync(); st = []
        for _ in range(2):
            P = None; gc.collect(); sync(); t0 = time.perf_counter(); P = make(); sync(); st.append((time.perf_counter() - t0) * 1e3)
        Ps[mc] = P
        out = P.solve(b, rtol=1e-8, full_output=True); rep = out[-1]
        info[mc] = (rep.iterations, [lv for lv in rep.preconditioner["levels"]], min(st), rep.preconditioner.get("setup_times"))
    res = {mc: [] for mc in Ps}
    for rnd in range(4):
        for mc in (Ps if rnd % 2 == 0 else list(Ps)[::-1]):
            v = vtime(Ps[mc])
            ts = []
            for _ in range(5):
                sync(); t0 = time.perf_counter(); Ps[mc].solve(b, rtol=1e-8); sync(); ts.append((time.perf_counter() - t0) * 1e3)
            res[mc].append((v, statistics.median(ts)))
    for mc in Ps:
        its, lv, st, split = info[mc]
        v = statistics.median(r[0] for r in res[mc]); s = statistics.median(r[1] for r in res[mc])
        print(f"COARSE {name} max_coarse {mc} its {its} vcycle {v:.1f} us solve {s:.2f} ms setup {st:.1f} ms levels {lv} coarse {split and round(split.get('coarse', 0) * 1e3, 2)} ms", flush=True)
