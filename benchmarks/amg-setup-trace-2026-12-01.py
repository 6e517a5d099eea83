#!/usr/bin/env python3
"""Where an AMG set-up's time goes: one prepare(A, "cg", M="amg", variant="graph") traced by
torch.profiler (CUPTI: every kernel, memset and copy of the process, CuPy's included) after
three untraced ones (issue 30, session 62; H200 2026-12-01).

    PYTHONPATH=. python3 benchmarks/amg-setup-trace-2026-12-01.py 3:100 OUTDIR [update]

With `update` (session 74, 2026-12-03), the traced call is the re-set-up instead: P.update(A2)
of a prepared system, A2 = 2 A (the same pattern: bench-amg's re-set-up), after three untraced
updates alternating A2 and A.

Prints the call's wall time, the GPU operations' count, their summed time ("busy") and the span
from the first to the last, the 25 largest kernels by total time, and the GPU's idle stretches
longer than 50 us (the 15 longest, with the operations on either side); writes the Chrome trace
into OUTDIR; last, the aggregation's independent sets (their wall and GPU time: that line was
computed from the run's traces after it, by this code). Needs torch (the GPU machines' Python
has it)."""
import collections
import json
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
from torch.profiler import ProfilerActivity, profile

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

spec = sys.argv[1] if len(sys.argv) > 1 else "3:100"
out = sys.argv[2]
d, s = spec.split(":")
A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
dev = cupy.cuda.Device()
UPDATE = len(sys.argv) > 3 and sys.argv[3] == "update"
for _ in range(3):
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    if not UPDATE:
        P = None
if UPDATE:
    for M in (A * 2.0, A, A * 2.0, A):
        P.update(M)
    A2 = A * 2.0
    call = lambda: P.update(A2)     # noqa: E731
else:
    call = lambda: dpsolve.prepare(A, "cg", M="amg", variant="graph")    # noqa: E731
dev.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    dev.synchronize()
    t0 = time.perf_counter()
    out_ = call()
    dev.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
trace = out + f"/trace-{d}-{s}{'-update' if UPDATE else ''}.json"
prof.export_chrome_trace(trace)
ev = json.load(open(trace))["traceEvents"]
gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
gpu.sort(key=lambda e: e["ts"])
busy = sum(e["dur"] for e in gpu) / 1e3
span = (gpu[-1]["ts"] + gpu[-1]["dur"] - gpu[0]["ts"]) / 1e3 if gpu else 0
print(spec + (" update" if UPDATE else ""),
      "wall %.1f ms, gpu ops %d, gpu busy %.1f ms, first-to-last %.1f ms"
      % (wall, len(gpu), busy, span))
by = collections.defaultdict(lambda: [0, 0.0])
for e in gpu:
    k = e["name"][:70]
    by[k][0] += 1
    by[k][1] += e["dur"] / 1e3
for k, (c, t) in sorted(by.items(), key=lambda x: -x[1][1])[:25]:
    print("%6.2f ms %4d  %s" % (t, c, k))
# gaps: idle stretches on the GPU longer than 50 us
gaps = []
for a, b in zip(gpu, gpu[1:]):
    g = b["ts"] - (a["ts"] + a["dur"])
    if g > 50:
        gaps.append((g, a["name"][:40], b["name"][:40]))
print("idle > 50 us: %d, total %.1f ms" % (len(gaps), sum(g for g, *_ in gaps) / 1e3))
for g in sorted(gaps, reverse=True)[:15]:
    print("  %.0f us after %s before %s" % g)
# the aggregation's independent sets: runs of mis_* kernels (with the memsets and copies among
# them), their wall time against their GPU time
segs, cur = [], None
for e in gpu:
    mis = "mis2_" in e["name"] or "mis_init" in e["name"]
    if mis and cur is None:
        cur = [e["ts"], 0, 0.0, 0]
    if cur is not None:
        if mis or e["name"].startswith(("Memset", "Memcpy")):
            cur[1] = max(cur[1], e["ts"] + e["dur"]) if mis else cur[1]
            cur[2] += e["dur"]
            cur[3] += 1
        else:
            segs.append(cur)
            cur = None
if cur is not None:
    segs.append(cur)
print("MIS runs %d: wall %.2f ms, GPU %.2f ms, operations %d"
      % (len(segs), sum(s[1] - s[0] for s in segs) / 1e3, sum(s[2] for s in segs) / 1e3,
         sum(s[3] for s in segs)))
