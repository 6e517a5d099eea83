# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24). H200 2026-11-29: `python3 <this> prof 160`, and `python3 <this> ncu 160` under setup-kernels-ncu's ncu command.
"""Where a re-set-up (P.update, same pattern) goes at 3-D 160^3: cProfile, or under ncu
(argv[1] == "ncu") one update between profilerStart/Stop."""
import cProfile, io, pstats, sys, time, statistics
import cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_3d
N = int(sys.argv[2]) if len(sys.argv) > 2 else 160
A = laplace_3d(N, N, N)
dA, dA2 = csp.csr_matrix(A), csp.csr_matrix(A * 2.0)
P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
for _ in range(2):
    P.update(dA2); P.update(dA)
cupy.cuda.Device().synchronize()
if sys.argv[1] == "ncu":
    cupy.cuda.runtime.profilerStart()
    P.update(dA2); cupy.cuda.Device().synchronize()
    cupy.cuda.runtime.profilerStop()
    sys.exit()
ts = []
for _ in range(4):
    t0 = time.perf_counter(); P.update(dA2); cupy.cuda.Device().synchronize(); ts.append((time.perf_counter() - t0) * 1e3)
print("UPDATE ms", [round(t, 1) for t in ts], "resetup", P.precond.hierarchy.resetup, {k: round(v * 1e3, 1) for k, v in P.precond.setup_times.items()})
pr = cProfile.Profile(); pr.enable()
P.update(dA); cupy.cuda.Device().synchronize()
pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45)
print("\n".join(l for l in s.getvalue().splitlines() if l.strip())[:9000])
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(20)
print("\n".join(l for l in s.getvalue().splitlines() if l.strip())[:5000])
