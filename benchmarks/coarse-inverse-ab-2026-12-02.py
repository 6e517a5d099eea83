#!/usr/bin/env python3
"""The coarse inverse three ways, in one process (issue 30, sessions 70-71; H200): A cuSOLVER's
posv with the identity (as shipped before 12-03), B potrf by cupy.linalg.cholesky, trsm by
cupyx's solve_triangular, then one GEMM (the 12-02 try, slower in situ), C the same three steps
with cuSOLVER and cuBLAS called directly (``device._cholesky_inverse``, landed 12-03). For each
problem, ABC CBA x2 rounds, each of 2 prepares (the previous system dropped first) and 6 updates
alternating 2 A and A (the same pattern: a numeric re-set-up), each timed between two device
synchronisations. Prints the medians and a CSV block; benchmarks/coarse-inverse-ab-2026-12-03.csv
gathers the blocks of 12-03's runs, with the run and its environment (arm) as columns.

    PYTHONPATH=. python3 benchmarks/coarse-inverse-ab-2026-12-02.py 2:1024 3:100 3:160

OVERLAP=0 in the environment: the inverse on the set-up's stream (COARSE_OVERLAP off);
PRIO=1: each system's stream made with the device's greatest priority (the side stream keeps the
default, the least); TIMEWAY=1: each way also timed where it runs, between device syncs (with
OVERLAP=0 these are its own times).
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
        from cuda.bindings import runtime as cudart
        greatest = cudart.cudaDeviceGetStreamPriorityRange()[2]
        self.stream = cupy.cuda.Stream(non_blocking=True, priority=greatest)
    _setup.Resources.__init__ = prioritised


def linalg_cholesky_inverse(H, eye):
    """B: the first try (12-02), potrf by cupy.linalg.cholesky, trsm by cupyx's
    solve_triangular: the same three steps as C."""
    from cupyx.scipy.linalg import solve_triangular
    Li = solve_triangular(cupy.linalg.cholesky(H), eye, lower=True)
    return Li.conj().T @ Li


WAYS = {"A posv": lambda H, eye: lapack.posv(H.copy(), eye.copy()),
        "B linalg potrf+trsm+gemm": linalg_cholesky_inverse, "C raw potrf+trsm+gemm": NEW}
dev = cupy.cuda.Device()
for dt in (cupy.float64, cupy.complex128):                   # C against posv, once
    G = cupy.random.default_rng(0).random((300, 300)).astype(dt)
    if dt == cupy.complex128:
        G = G + 1j * cupy.random.default_rng(1).random((300, 300))
    S = G @ G.conj().T + 300 * cupy.eye(300, dtype=dt)
    I3 = cupy.eye(300, dtype=dt)
    print("C against posv, %s: max diff %.1e" % (cupy.dtype(dt).name, float(cupy.abs(
        NEW(S, I3) - lapack.posv(S.copy(), I3.copy())).max())))
if os.environ.get("TIMEWAY") == "1":         # each way timed where it runs, device-synchronised
    INSITU = {w: [] for w in WAYS}

    def synced(w, f):
        def run(H, eye):
            dev.synchronize()
            t0 = time.perf_counter()
            out = f(H, eye)
            dev.synchronize()
            INSITU[w].append((time.perf_counter() - t0) * 1e3)
            return out
        return run
    WAYS = {w: synced(w, f) for w, f in WAYS.items()}


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
    names = list(WAYS)
    for r, w in enumerate((names + names[::-1]) * 2):
        device._cholesky_inverse = WAYS[w]
        for _ in range(2):
            P = None
            gc.collect()
            t, P = timed(lambda: dpsolve.prepare(A, "cg", M="amg", variant="graph"))
            got[w]["prepare"].append(t)
        for j in range(6):
            got[w]["update"].append(timed(lambda: P.update(mats[j % 2]))[0])
    device._cholesky_inverse = NEW
    if os.environ.get("TIMEWAY") == "1":
        print(spec, "in situ, synced: " + ", ".join(
            "%s %.2f ms (%d)" % (w, statistics.median(v), len(v)) for w, v in INSITU.items()))
    med = {w: {k: statistics.median(v[k][1:] if k == "prepare" else v[k][2:])
               for k in v} for w, v in got.items()}
    a = med["A posv"]
    for w in names[1:]:
        b = med[w]
        print("%s %s: prepare %.2f -> %.2f ms (%.3f), update %.2f -> %.2f ms (%.3f), "
              "update/prepare %.3f -> %.3f" % (
                  spec, w, a["prepare"], b["prepare"], b["prepare"] / a["prepare"], a["update"],
                  b["update"], b["update"] / a["update"], a["update"] / a["prepare"],
                  b["update"] / b["prepare"]))
    for w in WAYS:
        rows.append((spec, w, med[w]["prepare"], med[w]["update"]))
print("problem,way,prepare_median_ms,update_median_ms")
for r in rows:
    print("%s,%s,%.2f,%.2f" % r)
