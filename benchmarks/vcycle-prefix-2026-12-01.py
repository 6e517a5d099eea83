#!/usr/bin/env python3
"""Where a V-cycle's time goes inside a graph (issue 30, session 62; H200 2026-12-01).

    PYTHONPATH=. python3 benchmarks/vcycle-prefix-2026-12-01.py [2:1024,3:160,3:100]

For each problem (vcycle_ab.systems' spec), a prepared AMG system (graph); for k = 1 .. K (the
cycle's launches), the cycle's first k launches alone (device.launch drops the rest), 20
cycles captured into one CUDA graph with PDL as variant graph captures them, the median of 7
launches / 20, the smaller of two rounds. Each line: problem, k, the k-th kernel's mangled
name, the prefix's us and its difference from the prefix before (that kernel's marginal cost
in the chain). The data are not a V-cycle's past k (the later kernels do not run): the bytes
and the launches are."""
import statistics
import sys
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dpsolve  # noqa: E402
from dpsolve.precond.amg import device  # noqa: E402
from vcycle_ab import systems  # noqa: E402

shipped = device.launch


def prefix_us(h, b, z, k, cycles=20, reps=7):
    names = []

    def limited(kernel, grid, block, args, stream=None, shared_mem=0):
        if len(names) < k:
            names.append(getattr(kernel, "raw", kernel).name)
            shipped(kernel, grid, block, args, stream, shared_mem)
        else:
            names.append(None)

    s = cupy.cuda.Stream(non_blocking=True)
    device.launch = limited
    try:
        with s:
            names.clear()
            h.vcycle(b, z, s)
            total = len(names)
            s.begin_capture()
            for _ in range(cycles):
                names.clear()
                h.vcycle(b, z, s)
            g = s.end_capture()
    finally:
        device.launch = shipped
    g.launch(s)
    s.synchronize()
    t = []
    for _ in range(reps):
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
        e0.record(s)
        g.launch(s)
        e1.record(s)
        e1.synchronize()
        t.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / cycles)
    return statistics.median(t), names[:k], total


for item, A, b in systems(sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:160"):
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    h = P.precond.hierarchy
    r = cupy.ones(A.shape[0])
    z = cupy.empty_like(r)
    _, _, total = prefix_us(h, r, z, 0)
    prev = 0.0
    res = []
    for rnd in range(2):
        for k in range(1, total + 1):
            us, names, _ = prefix_us(h, r, z, k)
            res.append((rnd, k, us, names[-1]))
    for k in range(1, total + 1):
        a = [x for x in res if x[1] == k]
        us = min(x[2] for x in a)
        print(f"{item},{k},{a[0][3][:60]},{us:.1f},{us - prev:.1f}", flush=True)
        prev = us
