# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 25). H200 2026-11-29: `python3 <this>`.
"""max_dense (default 2,500) against 0 at 1024^2 and 160^3: its, V-cycle, solve, set-up and its coarse part."""
import gc, statistics, time
import cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond import AMG
sync = cupy.cuda.Device().synchronize
for name, A in (("1024^2", laplace_2d(1024)), ("160^3", laplace_3d(160))):
    dA = csp.csr_matrix(A); b = dA @ cupy.ones(A.shape[0])
    Ps, info = {}, {}
    for md in (2500, 0):
        make = lambda: dpsolve.prepare(dA, "cg", M=AMG(max_dense=md), variant="graph")
        P = make(); sync(); st = []
        for _ in range(2):
            P = None; gc.collect(); sync(); t0 = time.perf_counter(); P = make(); sync(); st.append((time.perf_counter() - t0) * 1e3)
        rep = P.solve(b, rtol=1e-8, full_output=True)[-1]
        x = P.solve(b, rtol=1e-8)[0]; err = float(cupy.abs(x - 1).max())
        Ps[md] = P
        info[md] = (rep.iterations, rep.preconditioner["vcycle_time"] * 1e6, min(st), rep.preconditioner["setup_times"]["coarse"] * 1e3, [lv[0] for lv in rep.preconditioner["levels"]], err)
    res = {md: [] for md in Ps}
    for rnd in range(4):
        for md in (Ps if rnd % 2 == 0 else list(Ps)[::-1]):
            for _ in range(5):
                sync(); t0 = time.perf_counter(); Ps[md].solve(b, rtol=1e-8); sync(); res[md].append((time.perf_counter() - t0) * 1e3)
    for md in Ps:
        its, vc, st, co, lv, err = info[md]
        print(f"DENSE {name} max_dense {md} its {its} vcycle {vc:.1f} us solve {statistics.median(res[md]):.2f} ms setup {st:.1f} ms coarse {co:.2f} ms levels {lv} max|x-1| {err:.1e}", flush=True)
