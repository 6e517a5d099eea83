#!/usr/bin/env python3
"""A/B in one process (issue 30, session 66; H200 2026-12-02; needs mis-one-launch-2026-12-02.patch
applied): an AMG set-up's independent sets in one cooperative launch (device.MIS_ONE_LAUNCH,
amg.cu's mis_settle) against their rounds launched from Python one by one (main before it).
Prints whether both give the same aggregates, the rounds each set took, each level's two sets
alone (median of 10, AB/BA), and prepare(A, "cg", M="amg", variant="graph") ms over 8 rounds
AB/BA of 5 calls each (median [min-max]), and the same for the aggregation phase alone (the
set-up's own split, CUDA events).

    PYTHONPATH=. python3 benchmarks/mis-one-launch-ab-2026-12-02.py 2:256 2:1024 3:100 3:160
"""
import statistics
import sys

import cupyx.scipy.sparse as csp
import numpy as np

from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import device

from amg_setup_ab import ab_prepares, ab_times, aggregates, prepare, same, spread

rounds = []
_launch = device.launch


def counting(kernel, grid, block, args, stream=None, shared_mem=0):
    """device.launch, noting each mis_settle launch's state slot (read after the call)."""
    _launch(kernel, grid, block, args, stream, shared_mem)
    if kernel is device._mis_one_launch(np.float64)[0]:
        rounds.append(args[-1])


def switch(one):
    device.MIS_ONE_LAUNCH = one


for spec in sys.argv[1:]:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    aggs = {}
    for one in (True, False):
        device.MIS_ONE_LAUNCH = True                  # (counting's kernel to look for)
        device.launch = counting if one else _launch
        device.MIS_ONE_LAUNCH = one
        rounds.clear()
        aggs[one] = aggregates(A)
        settled = [int(r.get()[0]) for r in rounds]
        device.launch = _launch
        if one:
            print(f"{spec}: rounds of each independent set (one launch): {settled}", flush=True)
    # each level's independent sets alone (distance 2, then 1 on the same graph), synchronised
    h = prepare(A).precond.hierarchy
    for level, lev in enumerate(h.levels[:-1]):
        gp, gj = lev.A.indptr, lev.A.indices
        per, _ = ab_times(lambda: (device._mis(gp, gj, np.float64, 2),
                                   device._mis(gp, gj, np.float64, 1)),
                          switch, (True, False), rounds=10, calls=1)
        print(f"{spec} level {level} ({lev.n:,} rows, {int(gj.size):,} entries): both sets "
              f"launched {statistics.median(per[False]):.2f} ms, one launch "
              f"{statistics.median(per[True]):.2f} ms", flush=True)
    h = None
    t, agg_ms = ab_prepares(A, switch, (True, False), rounds=8,
                            figure=lambda P: P.precond.setup_times["aggregation"] * 1e3)
    device.MIS_ONE_LAUNCH = True
    print(f"{spec}: aggregates equal {same(aggs[True], aggs[False])}; prepare ms launched "
          f"{spread(t[False])}, one launch {spread(t[True])}, ratio "
          f"{statistics.median(t[True]) / statistics.median(t[False]):.3f}; aggregation ms "
          f"launched {spread(agg_ms[False])}, one launch {spread(agg_ms[True])}", flush=True)
