#!/usr/bin/env python3
"""A same-pattern AMG re-set-up against a set-up in one process, then cProfile of 20 updates
(issue 30, session 76; H200 2026-12-03, on cd704f7's tree).

    PYTHONPATH=. OUT=DIR python3 benchmarks/update-profile-2026-12-03.py

For 3-D 100^3 and 2-D 1024^2: prepare(A, "cg", M="amg", variant="graph"), 20 updates (2 A, A,
...) each between two device synchronisations, and 4 prepares (each after the last is dropped
and Python's garbage collected); prints the medians. Then 20 updates under cProfile, written to
DIR/prof-<problem>.txt (cumulative and internal time). Printed that session: 100^3 update median
12.98 ms (min 12.12), set-up 31.76 (0.41); 1024^2 12.87 (10.64), 28.79 (0.45). The profile: 6,439
Python calls and ~139 launches an update, 8 host reads (2.5 ms of the GPU's time waited for)."""
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time

import cupy

sys.path.insert(0, "benchmarks")
from amg_setup_ab import prepare, problem  # noqa: E402

dev = cupy.cuda.Device()
out = os.environ.get("OUT", ".")
for spec in ("3:100", "2:1024"):
    A = problem(spec)
    A2 = A * 2.0
    P = prepare(A)
    dev.synchronize()
    t = []
    for _ in range(10):
        for M in (A2, A):
            dev.synchronize()
            t0 = time.perf_counter()
            P.update(M)
            dev.synchronize()
            t.append((time.perf_counter() - t0) * 1e3)
    ts = []
    for _ in range(4):
        gc.collect()
        dev.synchronize()
        t0 = time.perf_counter()
        Q = prepare(A)
        dev.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
        Q = None
    print(spec, "update median %.2f min %.2f; setup median %.2f"
          % (statistics.median(t), min(t), statistics.median(ts)), flush=True)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(10):
        for M in (A2, A):
            P.update(M)
            dev.synchronize()
    pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("cumulative").print_stats(90)
    st.sort_stats("tottime").print_stats(50)
    with open(os.path.join(out, "prof-%s.txt" % spec.replace(":", "_")), "w") as f:
        f.write(s.getvalue())
    P = None
    gc.collect()
