#!/usr/bin/env python3
# Needs benchmarks/coarse-inverse-cholesky-trsm-2026-12-02.patch applied; not landed.
"""The coarse inverse by potrf + trsm + GEMM (``device._cholesky_inverse``, B) against
cuSOLVER's posv with the identity (A, as shipped before), in one process (issue 30, session 70;
H200 2026-12-02): for each problem, ABBA x2 rounds, each of 2 prepares (the previous system
dropped first) and 6 updates alternating 2 A and A (the same pattern: a numeric re-set-up),
each timed between two device synchronisations. Prints the medians and a CSV block.

    PYTHONPATH=. python3 benchmarks/coarse-inverse-ab-2026-12-02.py 2:1024 3:100 3:160

OVERLAP=0 in the environment: both with the inverse on the set-up's stream (COARSE_OVERLAP off);
PRIO=1: each system's stream made with the device's greatest priority (the side stream keeps the
default, the least).
"""
import gc
import os
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
from cupyx import lapack

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import device

NEW = device._cholesky_inverse
device.COARSE_OVERLAP = os.environ.get("OVERLAP", "1") == "1"
if os.environ.get("PRIO") == "1":
    from dpsolve import _setup
    init = _setup.Resources.__init__

    def prioritised(self):
        init(self)
        greatest = cupy.cuda.runtime.deviceGetStreamPriorityRange()[1]
        self.stream = cupy.cuda.Stream(non_blocking=True, priority=greatest)
    _setup.Resources.__init__ = prioritised
WAYS = {"A posv": lambda H, eye: lapack.posv(H.copy(), eye.copy()), "B potrf+trsm+gemm": NEW}
dev = cupy.cuda.Device()


def timed(call):
    dev.synchronize()
    t0 = time.perf_counter()
    out = call()
    dev.synchronize()
    return (time.perf_counter() - t0) * 1e3, out


rows = []
for spec in sys.argv[1:] or ["2:1024", "3:100", "3:160"]:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    mats = [A * 2.0, A]
    got = {w: {"prepare": [], "update": []} for w in WAYS}
    P = None
    for r, w in enumerate(["A posv", "B potrf+trsm+gemm"] * 2 + ["B potrf+trsm+gemm", "A posv"]
                          * 2):
        device._cholesky_inverse = WAYS[w]
        for _ in range(2):
            P = None
            gc.collect()
            t, P = timed(lambda: dpsolve.prepare(A, "cg", M="amg", variant="graph"))
            got[w]["prepare"].append(t)
        for j in range(6):
            got[w]["update"].append(timed(lambda: P.update(mats[j % 2]))[0])
    device._cholesky_inverse = NEW
    med = {w: {k: statistics.median(v[k][1:] if k == "prepare" else v[k][2:])
               for k in v} for w, v in got.items()}
    a, b = med["A posv"], med["B potrf+trsm+gemm"]
    print("%s prepare %.2f -> %.2f ms (%.3f), update %.2f -> %.2f ms (%.3f), update/prepare "
          "%.3f -> %.3f" % (spec, a["prepare"], b["prepare"], b["prepare"] / a["prepare"],
                            a["update"], b["update"], b["update"] / a["update"],
                            a["update"] / a["prepare"], b["update"] / b["prepare"]))
    for w in WAYS:
        rows.append((spec, w, med[w]["prepare"], med[w]["update"]))
print("problem,way,prepare_median_ms,update_median_ms")
for r in rows:
    print("%s,%s,%.2f,%.2f" % r)
