#!/usr/bin/env python3
"""How much of an AMG re-set-up (P.update(2 A), the same pattern) waits for the coarse inverse
(issue 30, session 70; H200): the update's median wall time as shipped (cuSOLVER's posv with the
identity on the side stream) against the same with the inverse's posv replaced by a copy of a
kept inverse (a bound: the check and the rest unchanged), ABAB rounds of 6 updates in one
process; and with COARSE_OVERLAP off (the inverse on the set-up's stream, waited at once).

    PYTHONPATH=. python3 benchmarks/resetup-coarse-bound-2026-12-02.py 2:1024
"""
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
from cupyx import lapack

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import device

spec = sys.argv[1] if len(sys.argv) > 1 else "2:1024"
d, s = spec.split(":")
A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
mats = [A * 2.0, A]
dev = cupy.cuda.Device()
P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
real_posv, kept, which = lapack.posv, {}, [0]


def cached_posv(H, B):              # a copy of the inverse kept from the first real call
    if which[0] not in kept:        # (a matrix's own: the update's, mats[j % 2])
        kept[which[0]] = real_posv(H, B)
    return kept[which[0]].copy()


def round_(k):
    ts = []
    for j in range(6):
        dev.synchronize()
        which[0] = j % 2
        t0 = time.perf_counter()
        P.update(mats[j % 2])
        dev.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


res = {"shipped": [], "inverse free": [], "no overlap": []}
for r in range(4):
    for name in res if r % 2 == 0 else reversed(list(res)):
        lapack.posv = cached_posv if name == "inverse free" else real_posv
        device.COARSE_OVERLAP = name != "no overlap"
        round_(0)
        res[name].append(round_(1))
lapack.posv, device.COARSE_OVERLAP = real_posv, True
print(spec, "update median ms:", {k: round(statistics.median(v), 2) for k, v in res.items()},
      "rounds", {k: [round(x, 2) for x in v] for k, v in res.items()})
