#!/usr/bin/env python3
"""The same AMG set-up, timed problem after problem in one process (issue 30, session 66; H200
2026-12-02): prepare(A, "cg", M="amg", variant="graph") seven times a problem, in the order
given, with the process's CPU time beside the wall time, the memory pool and Python's threads.
"free:" before a problem empties CuPy's pool first, "nogc:" runs it with the collector off.

    PYTHONPATH=. python3 benchmarks/setup-host-noise-2026-12-02.py 3:100 2:1024 3:100 3:160 \\
        3:100 free:3:100 nogc:3:100
"""
import gc
import sys
import threading
import time

import cupy
import cupyx.scipy.sparse as csp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

mats = {}


def mat(spec):
    if spec not in mats:
        d, s = spec.split(":")
        mats[spec] = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    return mats[spec]


dev = cupy.cuda.Device()
pool = cupy.get_default_memory_pool()
t_start = time.perf_counter()
for spec in sys.argv[1:]:
    flag = ""
    if spec.startswith(("nogc:", "free:")):
        flag, spec = spec.split(":", 1)
    if flag == "free":
        pool.free_all_blocks()
    A = mat(spec)
    if flag == "nogc":
        gc.collect()
        gc.disable()
    ts, cpu = [], []
    for _ in range(7):
        dev.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
        dev.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
        P = None
    gc.enable()
    print(f"{time.perf_counter() - t_start:7.1f}s {flag:5s} {spec:7s} prepare ms "
          f"{' '.join('%.1f' % t for t in ts)} | cpu ms {' '.join('%.1f' % t for t in cpu)} | "
          f"pool {pool.total_bytes() / 2**30:.2f} GiB | threads {threading.active_count()}",
          flush=True)
