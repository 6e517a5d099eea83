#!/usr/bin/env python3
"""Which of the AMG set-up's functions make its ~1,500 GPU calls, and the host time each spends
(issue 30, session 67; H200 2026-12-02).

    PYTHONPATH=. python3 benchmarks/amg-setup-calls-2026-12-02.py 3:100 2:1024 > out.txt
    PYTHONPATH=. python3 benchmarks/amg-setup-calls-2026-12-02.py --update 3:100   # re-set-up

Every function of dpsolve.precond.amg.device and .sparse, dpsolve.cuda.ops and
dpsolve.precond.smoothers is wrapped in a torch.profiler record_function range (patched in the
modules, so the set-up's calls through module globals go through the wrappers). One
prepare(A, "cg", M="amg", variant="graph") is traced (CUPTI) after three untraced ones. Each CUDA
runtime / driver call of the trace (launches, memsets, copies, synchronisations) is charged to
the innermost range around it; each range's exclusive host time is its time less its children's.
Prints, a problem at a time, the functions by exclusive host time with their calls, count and
API calls by kind. --update traces a re-set-up instead: P.update(2 A) on a prepared system
(after three untraced updates alternating 2 A and A). The wrappers cost a few microseconds a
call: the times read high, the counts are exact (NOWRAP=1: no wrappers, the totals alone).
Needs torch (the GPU machines' Python has it)."""
import collections
import functools
import inspect
import json
import os
import sys
import tempfile
import time

import cupy
import cupyx.scipy.sparse as csp
from torch.profiler import ProfilerActivity, profile, record_function

import dpsolve
from dpsolve.cuda import ops
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond import smoothers
from dpsolve.precond.amg import device, sparse

MODULES = {"device": device, "sps": sparse, "ops": ops, "smoothers": smoothers}


def wrap(label, fn):
    @functools.wraps(fn)
    def inner(*a, **k):
        with record_function("W:" + label):
            return fn(*a, **k)
    return inner


for short, mod in (MODULES.items() if not os.environ.get("NOWRAP") else ()):
    for name, obj in list(vars(mod).items()):
        if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
            setattr(mod, name, wrap(f"{short}.{name}", obj))
# the executor's launch as device.py sees it
if not os.environ.get("NOWRAP"):
    device.launch = wrap("launch", device.launch)


def kind(name: str) -> str:
    n = name.lower()
    if "launch" in n:
        return "launch"
    if "memset" in n:
        return "memset"
    if "memcpy" in n:
        return "copy"
    if "synchron" in n or "query" in n:
        return "sync"
    if "malloc" in n or "free" in n:
        return "alloc"
    return "other"


def run(spec: str, update: bool = False) -> None:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    A2 = A * 2.0
    dev = cupy.cuda.Device()
    for _ in range(3):
        P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    for M in (A2, A, A2, A):
        if update:
            P.update(M)
    dev.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        dev.synchronize()
        t0 = time.perf_counter()
        with record_function("W:update" if update else "W:prepare"):
            if update:
                P.update(A2)
            else:
                dpsolve.prepare(A, "cg", M="amg", variant="graph")
            dev.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    ranges = [e for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("W:")
              and e.get("cat") == "user_annotation"]
    api = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime",
                                                                     "cuda_driver")]
    ranges.sort(key=lambda e: (e["ts"], -e["dur"]))
    stats = collections.defaultdict(lambda: {"calls": 0, "incl": 0.0, "excl": 0.0,
                                             **{k: 0 for k in ("launch", "memset", "copy",
                                                               "sync", "alloc", "other")}})
    # the innermost range around a time: sweep with a stack
    events = sorted([(r["ts"], 0, r) for r in ranges] + [(a["ts"], 1, a) for a in api],
                    key=lambda x: (x[0], x[1]))
    stack = []
    for ts, typ, e in events:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= ts:
            stack.pop()
        if typ == 0:
            st = stats[e["name"][2:]]
            st["calls"] += 1
            st["incl"] += e["dur"] / 1e3
            st["excl"] += e["dur"] / 1e3
            if stack:
                stats[stack[-1]["name"][2:]]["excl"] -= e["dur"] / 1e3
            stack.append(e)
        else:
            owner = stack[-1]["name"][2:] if stack else "(none)"
            stats[owner][kind(e["name"])] += 1
    total = {k: sum(v[k] for v in stats.values()) for k in ("launch", "memset", "copy", "sync",
                                                             "alloc", "other")}
    what = "update" if update else "prepare"
    print(f"\n## {spec}: {what} {wall:.1f} ms traced; API calls {total}")
    dur = collections.Counter()
    names = collections.Counter()
    for a in api:
        dur[kind(a["name"])] += a["dur"] / 1e3
        names[a["name"]] += 1
    print("API time by kind (ms):", {k: round(v, 2) for k, v in dur.items()})
    print("API calls by name:", dict(names.most_common(12)))
    other = collections.Counter()
    for a in api:
        if kind(a["name"]) == "other":
            other[a["name"]] += a["dur"] / 1e3
    print("'other' API time by name (ms):", {k: round(v, 2) for k, v in other.most_common(8)})
    gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy",
                                                                      "gpu_memset")]
    print(f"GPU busy {sum(e['dur'] for e in gpu) / 1e3:.2f} ms over {len(gpu)} operations")
    print("| function | calls | excl ms | incl ms | launch | memset | copy | sync | alloc |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, v in sorted(stats.items(), key=lambda x: -x[1]["excl"])[:45]:
        print(f"| {name} | {v['calls']} | {v['excl']:.2f} | {v['incl']:.2f} | {v['launch']} | "
              f"{v['memset']} | {v['copy']} | {v['sync']} | {v['alloc']} |")
    sys.stdout.flush()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--update"]
    for spec in args or ["3:100"]:
        run(spec, update="--update" in sys.argv[1:])
