#!/usr/bin/env python3
"""dpsolve.batch.cg on batches whose A_i are far from 1: every A_i and b_i (or the first half of
the batch) times 2^-120 in float32, where batch_cg_rows breaks down on A_i as it is. Three paths:
"rows+redo" (the default: batch_cg_rows, then batch_cg_redo solves those again as A_i / 2^f_i),
"batch_cg" (``device.ROWS = False``: A's checks in one launch, b's in CuPy, then batch_cg on the
scaled A_i) and "rows alone" (``device.REDO = False``: main before the redo). Each the median of
15 calls (cupy synchronised; host_ms the process's CPU time up to the call's return), after a
warm-up call whose answers are checked: info counts, and the worst true relative residual of
up to 200 systems in float64 on the host (NaN x shows as 0: max skips it).

Works: 1,000 x 2-D 32^2 and 10,000 x 3-D 10^3 (batch-range-ab-2026-11-30.py's inputs: A_i = A +
s_i I, B standard normal, seed 0), CG, rtol 1e-5, M None, values and B on the device. Session 51
(2026-11-30), H200: the csv beside it.

    python3 benchmarks/batch-redo-far-2026-11-30.py > far.csv
"""
import importlib.util
import statistics
import time
from pathlib import Path

import cupy
import numpy as np
import scipy.sparse as sp

import dpsolve
from dpsolve.batch import device

_spec = importlib.util.spec_from_file_location(
    "batch_range_ab", Path(__file__).with_name("batch-range-ab-2026-11-30.py"))
range_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(range_ab)
MODES = (("rows+redo", True, True), ("batch_cg", False, True), ("rows alone", True, False))


def worst_residual(A, v, b, X, nb):
    worst = 0.0
    for i in range(0, nb, max(1, nb // 200)):
        Ai = sp.csr_array((v[i].astype(np.float64), A.indices, A.indptr), shape=A.shape)
        bi = b[i].astype(np.float64)
        worst = max(worst, np.linalg.norm(bi - Ai @ X[i]) / np.linalg.norm(bi))
    return worst


def main():
    print("work,share,mode,ms,host_ms,info0,info_other,worst_rel_res,path")
    for label, make, nb in reversed(range_ab.WORKS):            # 1,000 x 2-D 32^2 first
        A, values, B = range_ab.inputs(make, nb)
        for share in (1.0, 0.5):
            s = np.ones(nb)
            s[:int(nb * share)] = 2.0 ** -120
            v, b = (values * s[:, None]).astype(np.float32), (B * s[:, None]).astype(np.float32)
            dB = cupy.asarray(b)
            Ab = dpsolve.batch.csr(cupy.asarray(v), A.indices, A.indptr)
            try:
                for mode, rows, redo in MODES:
                    device.ROWS, device.REDO = rows, redo
                    X, info, rep = dpsolve.batch.cg(Ab, dB, rtol=1e-5, full_output=True)
                    walls, hosts = [], []
                    for _ in range(15):
                        cupy.cuda.Device().synchronize()
                        t0, h0 = time.perf_counter(), time.process_time()
                        dpsolve.batch.cg(Ab, dB, rtol=1e-5)
                        h1 = time.process_time()
                        cupy.cuda.Device().synchronize()
                        walls.append(time.perf_counter() - t0)
                        hosts.append(h1 - h0)
                    ih = cupy.asnumpy(info)
                    worst = worst_residual(A, v, b, cupy.asnumpy(X).astype(np.float64), nb)
                    print(f"{label},{share},{mode},{statistics.median(walls) * 1e3:.3f},"
                          f"{statistics.median(hosts) * 1e3:.3f},{(ih == 0).sum()},"
                          f"{(ih != 0).sum()},{worst:.2e},\"{rep.path}\"", flush=True)
            finally:
                device.ROWS, device.REDO = True, True


if __name__ == "__main__":
    main()
