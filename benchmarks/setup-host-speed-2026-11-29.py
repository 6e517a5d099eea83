# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24). H200 2026-11-29: `python3 <this> prof main`, then `taskset -c C python3 <this> x coreC` for C = 0, 5, 10, 15.
"""Where a set-up's wall time goes: host speed probe, median of 5 set-ups, cProfile of one."""
import cProfile, gc, io, pstats, sys, time
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

def probe():
    t = time.perf_counter(); s = 0
    for i in range(2_000_000): s += i & 7
    return (time.perf_counter() - t) * 1e3

prof = len(sys.argv) > 1 and sys.argv[1] == "prof"
tag = sys.argv[2] if len(sys.argv) > 2 else "-"
for name, A in (("1024^2", laplace_2d(1024, 1024)), ("100^3", laplace_3d(100, 100, 100))):
    dA = csp.csr_matrix(A)
    P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
    P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
    ts = []
    for _ in range(5):
        P = None; gc.collect(); cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
        cupy.cuda.Device().synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    st = P.precond.setup_times
    print(f"SETUP {tag} {name} median {np.median(ts):.1f} min {min(ts):.1f} max {max(ts):.1f} probe {probe():.1f} ms "
          + " ".join(f"{k}={v*1e3:.1f}" for k, v in st.items()), flush=True)
    if prof:
        P = None; gc.collect(); cupy.cuda.Device().synchronize()
        pr = cProfile.Profile(); pr.enable()
        P = dpsolve.prepare(dA, "cg", M="amg", variant="graph"); cupy.cuda.Device().synchronize()
        pr.disable()
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(28)
        print("\n".join(l for l in s.getvalue().splitlines() if l.strip())[:6000])
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(35)
        print("\n".join(l for l in s.getvalue().splitlines() if l.strip())[:7000])
