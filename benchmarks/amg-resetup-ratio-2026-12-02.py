#!/usr/bin/env python3
"""The AMG re-set-up against the set-up, as bench-amg times them, in one process (issue 30's
"re-set-up <= 0.5 of a set-up"; session 68, H200 2026-12-02).

    PYTHONPATH=. python3 benchmarks/amg-resetup-ratio-2026-12-02.py 2:1024 3:100 3:160

For each problem ("2:1024": 2-D Poisson 1024^2, "3:100": 3-D Laplace 100^3): one untimed prepare
and two untimed updates, then 6 rounds of: a prepare(A, "cg", M="amg", variant="graph") timed
between two device synchronisations (the previous prepared system dropped and Python's garbage
collected first, untimed), then P.update(2 A) and P.update(A), each timed likewise. Prints the
medians, the ratio, the re-set-up's kind and its phases (setup_times), then a CSV block."""
import gc
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d


def timed(call):
    dev = cupy.cuda.Device()
    dev.synchronize()
    t0 = time.perf_counter()
    out = call()
    dev.synchronize()
    return (time.perf_counter() - t0) * 1e3, out


def main():
    rows = []
    for spec in sys.argv[1:] or ["2:1024", "3:100", "3:160"]:
        d, s = spec.split(":")
        A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
        A2 = A * 2.0
        P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
        P.update(A2)
        P.update(A)
        setups, updates = [], []
        for _ in range(6):
            P = None
            gc.collect()
            ms, P = timed(lambda: dpsolve.prepare(A, "cg", M="amg", variant="graph"))
            setups.append(ms)
            for M in (A2, A):
                gc.collect()
                updates.append(timed(lambda: P.update(M))[0])
        a, b = statistics.median(setups), statistics.median(updates)
        h = P.precond.hierarchy
        times = {k: round(v * 1e3, 1) for k, v in (h.setup_times or {}).items()}
        print(f"{spec}: set-up {a:.1f} [{min(setups):.1f}-{max(setups):.1f}] ms, re-set-up "
              f"{b:.1f} [{min(updates):.1f}-{max(updates):.1f}] ms, ratio {b / a:.3f} "
              f"({h.resetup}; its phases ms {times})", flush=True)
        rows.append((spec, a, min(setups), b, min(updates), b / a, h.resetup))
    print("problem,setup_median_ms,setup_min_ms,resetup_median_ms,resetup_min_ms,ratio,kind")
    for r in rows:
        print(f"{r[0]},{r[1]:.2f},{r[2]:.2f},{r[3]:.2f},{r[4]:.2f},{r[5]:.3f},{r[6]}")


if __name__ == "__main__":
    main()
