#!/usr/bin/env python3
"""Graph's prepared fast path against its general path (session 34; H200 2026-11-29).

    python3 benchmarks/graph-fast-path-2026-11-29.py [OUT.csv]

One process. For 2-D Poisson 1024^2 and 128^2 and 3-D Laplace 100^3 and 160^3 (b = A 1), each
prepared with variant="graph" and M="amg", then M="jacobi": ``P.solve(b, rtol=rtol)`` (the fast
path: one graph launch, one wait) and ``P.solve(b, rtol=rtol, full_output=True)`` (the general
path: b's norm read back first, then the graph, then the report) alternated 15 times each after a
warm-up, the device synced around each call; median wall time per call, the iterations, and
whether the two x are equal bit for bit. rtol 1e-8 (the solve) and 1e-1 (one or a few iterations:
the call's fixed cost). Prints a line per case; the CSV has the same columns.
"""
import csv
import statistics
import sys
import time

import cupy as cp
import cupyx.scipy.sparse as csp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

PROBLEMS = [("2-D 1024^2", lambda: laplace_2d(1024, 1024)),
            ("3-D 100^3", lambda: laplace_3d(100, 100, 100)),
            ("3-D 160^3", lambda: laplace_3d(160, 160, 160)),
            ("2-D 128^2", lambda: laplace_2d(128, 128))]
ROUNDS = 15


def main(out=None):
    sync = cp.cuda.Device().synchronize
    rows = []
    for name, make in PROBLEMS:
        dA = csp.csr_matrix(make())
        b = dA @ cp.ones(dA.shape[0])
        for M in ("amg", "jacobi"):
            P = dpsolve.prepare(dA, "cg", M=M, variant="graph")
            for rtol in (1e-8, 1e-1):
                def fast():
                    return P.solve(b, rtol=rtol)

                def general():
                    return P.solve(b, rtol=rtol, full_output=True)[:2]
                for f in (fast, general):
                    f()
                    sync()
                times = {fast: [], general: []}
                for _ in range(ROUNDS):
                    for f in (fast, general):
                        sync()
                        t0 = time.perf_counter()
                        f()
                        sync()
                        times[f].append(time.perf_counter() - t0)
                xf, info_f = fast()
                xg, info_g, rep = P.solve(b, rtol=rtol, full_output=True)
                r = dict(problem=name, M=M, rtol=rtol, iterations=rep.iterations,
                         fast_us=statistics.median(times[fast]) * 1e6,
                         general_us=statistics.median(times[general]) * 1e6,
                         info_fast=info_f, info_general=info_g,
                         same_x=bool((xf == xg).all()), fast_path=P._fast is not None)
                rows.append(r)
                print(f"{name} {M} rtol {rtol:g}: {r['iterations']} iterations, fast "
                      f"{r['fast_us']:.0f} us, general {r['general_us']:.0f} us "
                      f"(x{r['general_us'] / r['fast_us']:.2f}); info {info_f}/{info_g}, "
                      f"same x {r['same_x']}", flush=True)
    if out:
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main(*sys.argv[1:2])
