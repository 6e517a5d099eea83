#!/usr/bin/env python3
"""Where an AMG re-set-up's time goes: one P.update(2 A) (the same pattern) on a prepared
prepare(A, "cg", M="amg", variant="graph") traced by torch.profiler (CUPTI: every kernel,
memset and copy of the process) after four untraced updates (issue 30, session 70; H200).

    PYTHONPATH=. python3 benchmarks/amg-resetup-trace-2026-12-02.py 2:1024 OUTDIR

Prints the update's wall time; the GPU operations' count, summed time ("busy") and span; per
stream, its operations, busy time and span (the coarse inverse's side stream apart); the 25
largest kernels by total time; the GPU's idle stretches over 50 us; and the untraced updates'
median wall time. Needs torch (the GPU machines' Python has it)."""
import collections
import json
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
from torch.profiler import ProfilerActivity, profile

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

spec = sys.argv[1] if len(sys.argv) > 1 else "2:1024"
out = sys.argv[2]
d, s = spec.split(":")
A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
A2 = A * 2.0
dev = cupy.cuda.Device()
P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
walls = []
for k in range(6):
    dev.synchronize()
    t0 = time.perf_counter()
    P.update(A2 if k % 2 == 0 else A)
    dev.synchronize()
    walls.append((time.perf_counter() - t0) * 1e3)
print(spec, "untraced updates ms", [round(w, 2) for w in walls], "median %.2f"
      % statistics.median(walls[2:]), "resetup", P.precond.hierarchy.resetup,
      "phases ms", {k: round(v * 1e3, 2) for k, v in P.precond.setup_times.items()})
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    dev.synchronize()
    t0 = time.perf_counter()
    P.update(A2)
    dev.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
prof.export_chrome_trace(out + f"/resetup-trace-{d}-{s}.json")
ev = json.load(open(out + f"/resetup-trace-{d}-{s}.json"))["traceEvents"]
gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
gpu.sort(key=lambda e: e["ts"])
busy = sum(e["dur"] for e in gpu) / 1e3
t_first = gpu[0]["ts"] if gpu else 0
span = (gpu[-1]["ts"] + gpu[-1]["dur"] - t_first) / 1e3 if gpu else 0
print(spec, "traced update wall %.1f ms, gpu ops %d, gpu busy %.2f ms, first-to-last %.2f ms"
      % (wall, len(gpu), busy, span))
streams = collections.defaultdict(list)
for e in gpu:
    streams[e.get("args", {}).get("stream", "?")].append(e)
for sid, es in sorted(streams.items(), key=lambda x: x[1][0]["ts"]):
    b = sum(e["dur"] for e in es) / 1e3
    print("  stream %s: ops %d, busy %.2f ms, from %.2f to %.2f ms"
          % (sid, len(es), b, (es[0]["ts"] - t_first) / 1e3,
             (es[-1]["ts"] + es[-1]["dur"] - t_first) / 1e3))
    top = collections.defaultdict(float)
    for e in es:
        top[e["name"][:60]] += e["dur"] / 1e3
    for k, t in sorted(top.items(), key=lambda x: -x[1])[:6]:
        print("      %6.2f ms  %s" % (t, k))
by = collections.defaultdict(lambda: [0, 0.0])
for e in gpu:
    k = e["name"][:70]
    by[k][0] += 1
    by[k][1] += e["dur"] / 1e3
for k, (c, t) in sorted(by.items(), key=lambda x: -x[1][1])[:25]:
    print("%6.2f ms %4d  %s" % (t, c, k))
gaps = []
ends = 0
for e in gpu:                          # idle: no stream busy
    if ends and e["ts"] - ends > 50:
        gaps.append((e["ts"] - ends, (ends - t_first) / 1e3, e["name"][:40]))
    ends = max(ends, e["ts"] + e["dur"])
print("idle > 50 us: %d, total %.2f ms" % (len(gaps), sum(g for g, *_ in gaps) / 1e3))
for g in sorted(gaps, reverse=True)[:15]:
    print("  %.0f us at %.2f ms before %s" % g)
