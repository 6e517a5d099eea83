#!/usr/bin/env python3
"""Why a repeated AMG prepare reaches cudaMalloc (issue 30, session 69): is the last prepared
system freed by reference counting or by the cyclic GC, and does memory freed by the GC come
back to CuPy's pool?

    PYTHONPATH=. python3 benchmarks/pool-pending-free-2026-12-02.py 2:1024

Each way runs 6 calls and prints, per call, its milliseconds, its cudaMallocs (a memory hook) and
the pool's used / total MiB. Ways: prepare (P = prepare(...) replacing the last), prepare with
gc.collect() after each, prepare with the pool's pending frees committed before each, del P then
the used bytes before and after gc.collect(), and default calls dpsolve.cg(A, b) (Jacobi, AMG)."""
import gc
import sys
import time

import cupy
import cupyx.scipy.sparse as csp

import dpsolve
from amg_setup_ab import MallocCount
from dpsolve.matrices import laplace_2d, laplace_3d


pool = cupy.get_default_memory_pool()
MiB = 2 ** 20


def commit():
    """CuPy's pending frees committed, where its pool has the debug call that does it (CuPy
    14.2 has not: this way then runs as the first)."""
    dev = pool.device_pool() if hasattr(pool, "device_pool") else None
    f = getattr(dev, "_debug_arena_get_index", None)
    if f is None:
        return "no _debug_arena_get_index"
    from dpsolve._setup import resources
    f(resources().stream.ptr)
    return "ok"


def run(label, call, after=None, before=None, reps=6):
    print(f"-- {label}", flush=True)
    for i in range(reps):
        if before:
            before()
        h = MallocCount()
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        with h:
            call(i)
            cupy.cuda.Device().synchronize()
        ms = (time.perf_counter() - t) * 1e3
        if after:
            after()
        print(f"   {i}: {ms:6.1f} ms  {h.n:3d} cudaMalloc  used {pool.used_bytes() / MiB:7.1f} "
              f"total {pool.total_bytes() / MiB:8.1f} MiB  free blocks {pool.n_free_blocks()}",
              flush=True)


for spec in sys.argv[1:]:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    b = cupy.ones(A.shape[0])
    box = {}

    def prep(i):
        box["P"] = dpsolve.prepare(A, "cg", M="amg", variant="graph")

    print(f"## {spec}; _debug_arena_get_index: {commit()}")
    run("prepare, replacing the last", prep)
    run("prepare, gc.collect() after each", prep, after=gc.collect)
    run("prepare, pending frees committed before each", prep, before=commit)
    P = box.pop("P")
    u0 = pool.used_bytes()
    del P
    u1 = pool.used_bytes()
    gc.collect()
    u2 = pool.used_bytes()
    print(f"-- del P: used {u0 / MiB:.1f} -> {u1 / MiB:.1f} MiB; after gc.collect() {u2 / MiB:.1f}")
    pool.free_all_blocks()
    run("default call dpsolve.cg(A, b) (Jacobi)", lambda i: dpsolve.cg(A, b, rtol=1e-6))
    run("default call dpsolve.cg(A, b, M='amg')", lambda i: dpsolve.cg(A, b, M="amg", rtol=1e-6))
    run("default call dpsolve.cg(A * c, b, M='amg'), a new matrix each",
        lambda i: dpsolve.cg(A * (1.0 + i), b, M="amg", rtol=1e-6))
    pool.free_all_blocks()
