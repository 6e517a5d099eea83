# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24): H200 2026-11-29, by setup-events-ab-2026-11-29.sh
# (.before: `git archive 4a8dbce dpsolve | tar -x -C .before`; the .sh named this file scratch/abset24.py).
"""One process of a tree A/B (run with PYTHONPATH at the tree, pinned to one core): AMG set-up
(prepare, graph, float64) medians of 5 after 2 warm ones at 1024^2 and 100^3, and at 160^3 the
set-up and the re-set-up (update, same pattern) medians of 3 and their ratio."""
import gc, statistics, sys, time
import cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
tag = sys.argv[1]

def probe():
    t = time.perf_counter(); s = 0
    for i in range(2_000_000): s += i & 7
    return (time.perf_counter() - t) * 1e3

out = [tag, f"probe {probe():.0f}"]
for name, A, reps in (("1024^2", laplace_2d(1024), 5), ("100^3", laplace_3d(100), 5), ("160^3", laplace_3d(160), 3)):
    dA = csp.csr_matrix(A); dA2 = csp.csr_matrix(A * 2.0)
    for _ in range(2):
        P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
    ts, us = [], []
    for _ in range(reps):
        P = None; gc.collect(); cupy.cuda.Device().synchronize()
        t0 = time.perf_counter(); P = dpsolve.prepare(dA, "cg", M="amg", variant="graph"); cupy.cuda.Device().synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
        if name == "160^3":
            t0 = time.perf_counter(); P.update(dA2); cupy.cuda.Device().synchronize(); us.append((time.perf_counter() - t0) * 1e3)
    st = P.precond.setup_times
    m = statistics.median(ts)
    out.append(f"{name} {m:.1f}" + (f" re {statistics.median(us):.1f} ratio {statistics.median(us) / m:.2f}" if us else "")
               + " [" + " ".join(f"{k[:3]}={v * 1e3:.1f}" for k, v in st.items()) + "]")
print("ABSET " + " | ".join(out), flush=True)
