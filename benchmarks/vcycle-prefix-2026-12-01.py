#!/usr/bin/env python3
"""Where a V-cycle's time goes inside a graph (issue 30, session 62; H200 2026-12-01).

    PYTHONPATH=. python3 benchmarks/vcycle-prefix-2026-12-01.py [2:1024,3:160,3:100]

For each problem (vcycle_ab.systems' spec), a prepared AMG system (graph); for k = 1 .. K (the
cycle's launches), the cycle's first k launches alone (device.launch drops the rest), 20
cycles captured into one CUDA graph with PDL as variant graph captures them, the median of 7
launches / 20, the smaller of two rounds. Each line: problem, k, the k-th kernel's mangled
name, the prefix's us and its difference from the prefix before (that kernel's marginal cost
in the chain). The data are not a V-cycle's past k (the later kernels do not run): the bytes
and the launches are. Run in its first form (its own copy of vcycle_ab.vcycle_us's loop, the
same 20 cycles and 7 launches); this form times through vcycle_us itself, and ran once more at
1024^2: 79.7 us, each kernel's cost within 0.5 us of the first form's."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dpsolve  # noqa: E402
from dpsolve.precond.amg import device  # noqa: E402
from vcycle_ab import systems, vcycle_us  # noqa: E402

shipped = device.launch


def prefix_us(P, k: int):
    """(us a V-cycle of P's hierarchy cut to its first k launches, their names, the cycle's
    launches): vcycle_ab.vcycle_us (20 cycles a graph, median of 7) with device.launch dropping
    each cycle's launches past the k-th."""
    h = P.precond.hierarchy
    names = []

    def limited(kernel, grid, block, args, stream=None, shared_mem=0):
        names.append(getattr(kernel, "raw", kernel).name)
        if len(names) <= k:
            shipped(kernel, grid, block, args, stream, shared_mem)

    def cycle(b, out, stream):
        names.clear()
        type(h).vcycle(h, b, out, stream)

    device.launch, h.vcycle = limited, cycle
    try:
        us = vcycle_us(P, reps=7, k=20)
    finally:
        device.launch = shipped
        del h.vcycle
    return us, names[:k], len(names)


for item, A, b in systems(sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:160"):
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    _, _, total = prefix_us(P, 0)
    prev = 0.0
    res = []
    for rnd in range(2):
        for k in range(1, total + 1):
            us, names, _ = prefix_us(P, k)
            res.append((rnd, k, us, names[-1]))
    for k in range(1, total + 1):
        a = [x for x in res if x[1] == k]
        us = min(x[2] for x in a)
        print(f"{item},{k},{a[0][3][:60]},{us:.1f},{us - prev:.1f}", flush=True)
        prev = us
