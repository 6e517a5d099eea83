#!/usr/bin/env python3
"""M="chebyshev" over the solve's ELL (vc_cheb_ell) against its CSR kernels, and the floor of the
Chebyshev-smoothed AMG V-cycle (issue 30, session 37, H200 2026-11-29): per tree, Jacobi-CG and
Chebyshev-PCG (degree 3) prepared on graph (x* = ones, rtol 1e-8), iterations, info and a solve
(ms, median of 5); in the tree labelled "new" also the copy bandwidth (a 1 GiB float32 copy, 10
times between events) and each AMG Chebyshev cycle's time (its set-up's vcycle_time), bytes
(vcycle_bytes) and their ratio to the floor.

    python3 benchmarks/chebyshev-precond-ab-2026-11-29.py LABEL PROBLEMS BENCHMARKS_DIR

run as benchmarks/chebyshev-cycle-ab-2026-11-29.py says (each tree from its root, alternating).
Its run: benchmarks/chebyshev-precond-ab-2026-11-29.csv (base: 09b86b6's dpsolve/).
"""
import statistics
import sys
import time

import cupy

import dpsolve
from dpsolve.precond import AMG

sys.path.insert(0, sys.argv[3])
from vcycle_ab import systems  # noqa: E402


def copy_bandwidth() -> float:
    a = cupy.ones(2**28, cupy.float32)
    c = cupy.empty_like(a)
    for _ in range(3):
        c[...] = a
    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
    e0.record()
    for _ in range(10):
        c[...] = a
    e1.record()
    e1.synchronize()
    return 2 * a.nbytes * 10 / (cupy.cuda.get_elapsed_time(e0, e1) * 1e-3)


def main(label: str, problems: str) -> None:
    sync = cupy.cuda.Device().synchronize
    bw = copy_bandwidth() if label == "new" else None
    if bw:
        print(f"copy,GBps,{bw / 1e9:.0f}", flush=True)
    for item, A, b in systems(problems):
        for name, M in (("jacobi", "jacobi"), ("cheb3", "chebyshev")):
            P = dpsolve.prepare(A, "cg", M=M, variant="graph")
            _, info, rep = P.solve(b, rtol=1e-8, full_output=True)
            ts = []
            for _ in range(5):
                sync()
                t = time.perf_counter()
                P.solve(b, rtol=1e-8)
                sync()
                ts.append(time.perf_counter() - t)
            print(f"{label},{item},{name},{rep.iterations},{info},"
                  f"{statistics.median(ts) * 1e3:.3f}", flush=True)
        if bw:
            for deg in (2, 3):
                pc = dpsolve.prepare(A, "cg", M=AMG(smoother="chebyshev", degree=deg),
                                     variant="graph").precond
                ratio = pc.vcycle_time / (pc.vcycle_bytes / bw)
                print(f"floor,{item},amg-cheb{deg},vcycle_time_us,{pc.vcycle_time * 1e6:.1f},"
                      f"bytes,{pc.vcycle_bytes},ratio,{ratio:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
