#!/usr/bin/env python3
"""Why an AMG prepare on variant graph takes longer than on merge (bench-amg of 12-03, H200: 66.3
against 58.2 ms at 3-D 160^3, 29.5 against 28.1 at 2-D 1024^2), issue 30, session 74.

    PYTHONPATH=. python3 benchmarks/graph-vs-merge-prepare-2026-12-03.py 3:160 2:1024

For each problem: prepare(A, "cg", M="amg", variant=v) for v in graph, merge, alternated in 6
rounds (graph first in even rounds) of 3 calls, the last system dropped before each call; the
graph rows also time GraphBackend._build (the WHILE graph's capture and instantiation, between
two device synchronisations) and the whole call without it. Prints medians [min-max]."""
import gc
import sys
import time

import cupy
from amg_setup_ab import problem, spread

import dpsolve
from dpsolve.backends.graph import GraphBackend

build_ms = []
_build = GraphBackend._build


def timed_build(self, st):
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    _build(self, st)
    cupy.cuda.Device().synchronize()
    build_ms.append((time.perf_counter() - t0) * 1e3)


GraphBackend._build = timed_build


for spec in sys.argv[1:] or ["3:160", "2:1024"]:
    A = problem(spec)
    ms = {"graph": [], "merge": []}
    held = [None]
    for v in ms:                                       # compiles, warms the pool
        held[0] = dpsolve.prepare(A, "cg", M="amg", variant=v)
    build_ms.clear()
    for rnd in range(6):
        for v in (("graph", "merge") if rnd % 2 == 0 else ("merge", "graph")):
            for _ in range(3):
                held[0] = None
                gc.collect()
                cupy.cuda.Device().synchronize()
                t0 = time.perf_counter()
                held[0] = dpsolve.prepare(A, "cg", M="amg", variant=v)
                cupy.cuda.Device().synchronize()
                ms[v].append((time.perf_counter() - t0) * 1e3)
    without = [t - b for t, b in zip(ms["graph"], build_ms)]
    print(f"{spec}: prepare graph {spread(ms['graph'])} ms, merge {spread(ms['merge'])} ms; "
          f"graph's _build {spread(build_ms)} ms, graph without it {spread(without)} ms",
          flush=True)
