#!/usr/bin/env python3
"""How much a re-set-up at 3-D 100^3 moves within one process, and whether bench-amg's
gc.collect() before each update, or other prepared systems alive, moves it (issue 30, session
75; H200 2026-12-03, on the tree of that session's three set-up changes).

    PYTHONPATH=. python3 benchmarks/update-spread-2026-12-03.py

Three rounds of 8 x (update to 2 A, update to A) on one prepare(A, "cg", M="amg",
variant="graph"), without and with gc.collect() before each call (bench-amg's resetup()); the
set-up's median beside them; then the same with five more prepared systems alive (bench-amg's
context). Each line: the calls' median, min and max ms, and the pool's trips to cudaMalloc
(amg_setup_ab.MallocCount). Output: the .txt beside this script. Bench-amg's "re-set-up / set-up"
at 100^3 read 0.50 that session: the update's median moved 13.2-16.4 ms between rounds here
(set-up 30.3), with or without the collection, the pool's trips to cudaMalloc 20 in the
first round and 0-1 after: the host's speed."""
import gc
import statistics
import time

import cupy
from amg_setup_ab import MallocCount, prepare, problem

import dpsolve

dev = cupy.cuda.Device()
A = problem("3:100")
A2 = A * 2.0
P = prepare(A)
dev.synchronize()


def run(collect, n=8):
    """(median, min, max ms, cudaMallocs) of n x (update to 2 A, update to A)."""
    t, m = [], MallocCount()
    with m:
        for _ in range(n):
            for M in (A2, A):
                if collect:
                    gc.collect()
                dev.synchronize()
                t0 = time.perf_counter()
                P.update(M)
                dev.synchronize()
                t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t), min(t), max(t), m.n


LINE = "median %.2f min %.2f max %.2f mallocs %d"
for rnd in range(3):
    for c in (False, True):
        print("gc.collect" if c else "no collect", LINE % run(c), flush=True)
t = []
for _ in range(6):                                  # the set-up beside it
    gc.collect()
    dev.synchronize()
    t0 = time.perf_counter()
    Q = prepare(A)
    dev.synchronize()
    t.append((time.perf_counter() - t0) * 1e3)
    Q = None
print("prepare median %.2f min %.2f" % (statistics.median(t), min(t)))
# bench-amg's context: other prepared systems alive
others = ([dpsolve.prepare(A, "cg", variant=v) for v in ("persistent", "graph", "merge")]
          + [prepare(A) for _ in range(2)])
for c in (False, True):
    print("with 5 others,", "gc.collect" if c else "no collect", LINE % run(c), flush=True)
