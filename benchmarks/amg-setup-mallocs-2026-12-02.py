#!/usr/bin/env python3
"""Does a repeated AMG prepare / update reach cudaMalloc, and from where (issue 30, session 69)?

    PYTHONPATH=. python3 benchmarks/amg-setup-mallocs-2026-12-02.py 2:1024 3:100

A CuPy memory hook counts the pool's allocations that reach the driver (alloc_preprocess: the
pool had no free block to give) during each of 8 prepare(A, "cg", M="amg", variant="graph")
calls, then 8 P.update(A) calls, with the pool's used and total bytes after each; for the last
call of each it prints the sizes and the dpsolve lines they came from."""
import collections
import sys
import time
import traceback

import cupy
import cupyx.scipy.sparse as csp
from cupy.cuda import memory_hook

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d


class Hook(memory_hook.MemoryHook):
    name = "mallocs"

    def __init__(self):
        self.calls = []

    def alloc_preprocess(self, device_id, mem_size):
        stack = [f"{f.filename.split('/dpsolve/')[-1]}:{f.lineno} {f.name}"
                 for f in traceback.extract_stack()[:-1] if "/dpsolve/" in f.filename]
        self.calls.append((mem_size, " < ".join(reversed(stack[-4:]))))


pool = cupy.get_default_memory_pool()
for spec in sys.argv[1:]:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    for what in ("prepare", "update"):
        for i in range(8):
            hook = Hook()
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            with hook:
                if what == "prepare":
                    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
                else:
                    P.update(A * (2.0 if i % 2 == 0 else 1.0))
                cupy.cuda.Device().synchronize()
            ms = (time.perf_counter() - t) * 1e3
            print(f"{spec} {what} {i}: {ms:6.1f} ms, {len(hook.calls)} cudaMalloc "
                  f"({sum(c[0] for c in hook.calls) / 2**20:.1f} MiB); pool used "
                  f"{pool.used_bytes() / 2**20:.1f} MiB, "
                  f"total {pool.total_bytes() / 2**20:.1f} MiB",
                  flush=True)
        by = collections.Counter()
        for size, where in hook.calls:
            by[where] += 1
        for where, c in by.most_common(20):
            print(f"   {c:3d} x  {where}")
