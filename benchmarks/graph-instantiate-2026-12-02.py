#!/usr/bin/env python3
"""How long cudaGraphInstantiate takes in a prepared AMG-PCG system's build on graph, and over
how many nodes (session 69: 4.6 ms of a 2-D 1024^2 update's ~12 ms in its trace, 0.5 ms at 3-D
100^3).

    PYTHONPATH=. python3 benchmarks/graph-instantiate-2026-12-02.py 2:1024 2:512 3:100

backends.graph._instantiate is wrapped to time each call; the nodes of the graph and of its
top level (not its WHILE body's) are counted by kind (cudaGraphGetNodes, cudaGraphNodeGetType).
Per problem: three
prepares and three updates, each instantiation's ms."""
import collections
import sys
import time

import cupyx.scipy.sparse as csp
from cuda.bindings import runtime as rt

import dpsolve
from dpsolve.backends import graph as g
from dpsolve.matrices import laplace_2d, laplace_3d

times = []
orig = g._instantiate


def nodes(graph):
    err, _, n = rt.cudaGraphGetNodes(graph, 0)
    err, ns, n = rt.cudaGraphGetNodes(graph, n)
    kinds = collections.Counter()
    for nd in ns:
        err, kind = rt.cudaGraphNodeGetType(nd)
        kinds[kind.name.replace("cudaGraphNodeType", "")] += 1
    return kinds


def timed(st, graph):
    kinds = nodes(graph)
    t = time.perf_counter()
    orig(st, graph)
    times.append(((time.perf_counter() - t) * 1e3, dict(kinds)))


g._instantiate = timed
for spec in sys.argv[1:]:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    for M in ("amg", "jacobi"):
        times.clear()
        for _ in range(3):
            P = dpsolve.prepare(A, "cg", M=M, variant="graph")
        for i in range(3):
            P.update(A * (2.0 if i % 2 == 0 else 1.0))
        ms = ", ".join(f"{t:.2f}" for t, _ in times)
        print(f"{spec} M={M}: instantiate ms {ms}; nodes {times[-1][1]}", flush=True)
