#!/usr/bin/env python3
"""What batch_cg_redo (the launch after batch_cg_rows that solves again, as A_i / 2^f_i, a system
it did not solve whose A_i is far from 1) costs a batch with nothing to solve again: the call
with it and without it (``dpsolve.batch.device.REDO``), alternated in one process (off, on, off,
on), each the median of 30 calls (cupy synchronised), and the redo launch alone on the rows
kernel's answers (cupy events around the host call: the host's time is inside them).

Works: scripts/bench-many's batch headline (10,000 x 3-D 10^3 and 1,000 x 2-D 32^2, A_i = A +
s_i I, s_i uniform in [0, 1), B standard normal, seed 0), CG, float64, rtol 1e-8, M None and
"jacobi", values and B on the device. The csv beside it: this script's output on the final form
of the kernel (session 51, 2026-11-30, H200; session 49's, on the first form, is in git history).

    python3 benchmarks/batch-redo-cost-2026-11-30.py
"""
import importlib.util
import statistics
import time
from pathlib import Path

import cupy
import numpy as np

import dpsolve
from dpsolve.batch import device

# the works and their inputs: batch-range-ab-2026-11-30.py's
_spec = importlib.util.spec_from_file_location(
    "batch_range_ab", Path(__file__).with_name("batch-range-ab-2026-11-30.py"))
range_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(range_ab)
WORKS = tuple(reversed(range_ab.WORKS))           # 1,000 x 2-D 32^2 first


def calls(Ab, dB, M, reps=30):
    """Median wall and host ms of a batch.cg call."""
    dpsolve.batch.cg(Ab, dB, rtol=1e-8, M=M)
    walls, hosts = [], []
    for _ in range(reps):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        dpsolve.batch.cg(Ab, dB, rtol=1e-8, M=M)
        t1 = time.perf_counter()
        cupy.cuda.Device().synchronize()
        walls.append(time.perf_counter() - t0)
        hosts.append(t1 - t0)
    return statistics.median(walls) * 1e3, statistics.median(hosts) * 1e3


def main():
    print("work,M,redo,round,call_ms,host_ms,redo_alone_event_us,redo_alone_host_us")
    for label, make, nb in WORKS:
        A, values, B = range_ab.inputs(make, nb)
        dv, dB = cupy.asarray(values), cupy.asarray(B)
        Ab = dpsolve.batch.csr(dv, A.indices, A.indptr)
        for M in (None, "jacobi"):
            for k, redo in enumerate((False, True, False, True)):
                device.REDO = redo
                wall, host = calls(Ab, dB, M)
                print(f"{label},{M or ''},{'on' if redo else 'off'},{k // 2 + 1},{wall:.3f},"
                      f"{host:.3f},,", flush=True)
            device.REDO = True
            indptr, indices, row_max = Ab.device_pattern()
            X = cupy.empty((Ab.nb, Ab.n))
            config = device.rows_config(Ab.n, row_max, np.float64)
            info, its, res, _, _ = device.solve_cg_rows(dv, indptr, indices, dB, X, 1e-8, 0.0,
                                                        10 * Ab.n, M == "jacobi", config)
            diag = Ab.device_diagonal_positions() if M else None
            args = (dv, indptr, indices, dB, X, info, its, res, 1e-8, 0.0, 10 * Ab.n, diag)
            for _ in range(3):
                device.solve_cg_redo(*args)
            cupy.cuda.Device().synchronize()
            e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
            events, hosts = [], []
            for _ in range(30):
                e0.record()
                t0 = time.perf_counter()
                device.solve_cg_redo(*args)
                hosts.append(time.perf_counter() - t0)
                e1.record()
                e1.synchronize()
                events.append(cupy.cuda.get_elapsed_time(e0, e1))
            print(f"{label},{M or ''},alone,,,,{statistics.median(events) * 1e3:.1f},"
                  f"{statistics.median(hosts) * 1e6:.1f}", flush=True)


if __name__ == "__main__":
    main()
