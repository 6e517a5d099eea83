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
import time

import cupy
import cupyx.scipy.sparse as csp
import numpy as np

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import device

from amg_setup_ab import ab_prepares

rounds = []
_launch = device.launch


def counting(kernel, grid, block, args, stream=None, shared_mem=0):
    """device.launch, noting each mis_settle launch's state slot (read after the call)."""
    _launch(kernel, grid, block, args, stream, shared_mem)
    if kernel is device._mis_one_launch(np.float64)[0]:
        rounds.append(args[-1])


dev = cupy.cuda.Device()
for spec in sys.argv[1:]:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    aggs = {}
    for one in (True, False):
        device.MIS_ONE_LAUNCH = True                  # (counting's kernel to look for)
        device.launch = counting if one else _launch
        device.MIS_ONE_LAUNCH = one
        rounds.clear()
        P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
        aggs[one] = [lev.aggregates.get() for lev in P.precond.hierarchy.levels
                     if lev.aggregates is not None]
        settled = [int(r.get()[0]) for r in rounds]
        device.launch = _launch
        P = None
        if one:
            print(f"{spec}: rounds of each independent set (one launch): {settled}", flush=True)
    # each level's independent sets alone (distance 2, then 1 on the same graph), synchronised
    h = dpsolve.prepare(A, "cg", M="amg", variant="graph").precond.hierarchy
    for level, lev in enumerate(h.levels[:-1]):
        gp, gj = lev.A.indptr, lev.A.indices
        per = {True: [], False: []}
        for rnd in range(10):
            for one in ((True, False) if rnd % 2 == 0 else (False, True)):
                device.MIS_ONE_LAUNCH = one
                dev.synchronize()
                t0 = time.perf_counter()
                device._mis(gp, gj, np.float64, 2)
                device._mis(gp, gj, np.float64, 1)
                dev.synchronize()
                per[one].append((time.perf_counter() - t0) * 1e3)
        print(f"{spec} level {level} ({lev.n:,} rows, {int(gj.size):,} entries): both sets "
              f"launched {statistics.median(per[False]):.2f} ms, one launch "
              f"{statistics.median(per[True]):.2f} ms", flush=True)
    h = None
    same = (len(aggs[True]) == len(aggs[False])
            and all(np.array_equal(a, b) for a, b in zip(aggs[True], aggs[False])))
    t, agg_ms = ab_prepares(A, lambda one: setattr(device, "MIS_ONE_LAUNCH", one), (True, False),
                            rounds=8, figure=lambda P: P.precond.setup_times["aggregation"] * 1e3)
    device.MIS_ONE_LAUNCH = True

    def fmt(v):
        return f"{statistics.median(v):.2f} [{min(v):.1f}-{max(v):.1f}]"
    print(f"{spec}: aggregates equal {same}; prepare ms launched {fmt(t[False])}, one launch "
          f"{fmt(t[True])}, ratio {statistics.median(t[True]) / statistics.median(t[False]):.3f}; "
          f"aggregation ms launched {fmt(agg_ms[False])}, one launch {fmt(agg_ms[True])}",
          flush=True)
