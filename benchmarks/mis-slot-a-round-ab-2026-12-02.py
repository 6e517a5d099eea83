#!/usr/bin/env python3
"""A/B in one process (issue 30, session 66; H200 2026-12-02): the AMG aggregation's
independent sets with their count of undecided nodes zeroed every round (A: a memset a round, as
main does) against a slot a round zeroed once (B). Needs mis-slot-a-round-2026-12-02.patch
applied (mis2_decide's round argument; A passes slot 0 and zeroes it every round, main's
operations). Prints whether both give the same aggregates and prepare(A, "cg", M="amg",
variant="graph") ms, 6 rounds AB/BA of 5 calls each.

    PYTHONPATH=. python3 benchmarks/mis-slot-a-round-ab-2026-12-02.py 2:1024 3:100 3:160
"""
import statistics
import sys

import cupy
import cupyx.scipy.sparse as csp
import numpy as np

from dpsolve.cuda._loader import get_kernel
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import device

from amg_setup_ab import ab_prepares, aggregates, same, spread

new_mis = device._mis


def old_mis(gp, gj, dtype, distance, agg=None):
    n = gp.size - 1
    grid = (device._grid(n),)

    def k(name):
        return get_kernel("amg", name + "<{T}>", dtype)
    v = cupy.empty(n, cupy.int64)
    m1 = cupy.empty(n, cupy.int64)
    m2 = cupy.empty(n, cupy.int64) if distance == 2 else m1
    count = cupy.zeros(1, cupy.int32)
    k("mis_init")(grid, (device.BLOCK,),
                  (np.int32(n), agg if agg is not None else device.ops._NULL, v))
    for rnd in range(1000):
        k("mis2_max")(grid, (device.BLOCK,), (np.int32(n), gp, gj, v, m1))
        if distance == 2:
            k("mis2_max")(grid, (device.BLOCK,), (np.int32(n), gp, gj, m1, m2))
        count.fill(0)
        k("mis2_decide")(grid, (device.BLOCK,), (np.int32(n), v, m2, count, np.int32(0)))
        if rnd % 2 == 1 and int(count.get()[0]) == 0:
            return v
    raise RuntimeError("the independent set did not settle")


def switch(name):
    device._mis = old_mis if name == "A" else new_mis


for spec in sys.argv[1:]:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    aggs = {}
    for name in ("A", "B"):
        switch(name)
        aggs[name] = aggregates(A)
    t, _ = ab_prepares(A, switch, ("A", "B"))
    ratio = statistics.median(t["B"]) / statistics.median(t["A"])
    print(f"{spec}: aggregates equal {same(aggs['A'], aggs['B'])}; prepare ms A (memset a "
          f"round) {spread(t['A'])}, B (a slot a round) {spread(t['B'])}, B/A {ratio:.3f}",
          flush=True)
device._mis = new_mis
