# ruff: noqa
# Kept as run for BENCHMARKS.md (H200 2026-12-01): `PYTHONPATH=$PWD python3 <this>`; its csv: jacobi-device-bind-2026-12-01.csv
"""Jacobi's D^-1 made on the device (new) against the host's path (old: _device_inverse -> None),
alternated in one process, 5 rounds ABBA: prepare, update (same pattern) and a one-shot
dpsolve.cg(M="jacobi") with CuPy inputs, float64, rtol 1e-8; D^-1 and x compared bit for bit."""
import sys, time, statistics, gc, csv
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.precond import jacobi
from dpsolve.matrices import laplace_2d, laplace_3d
sync = cupy.cuda.Device().synchronize
new = jacobi._device_inverse
old = lambda csr, dtype: None
probs = [("2-D 1024^2", lambda: laplace_2d(1024)), ("3-D 100^3", lambda: laplace_3d(100)),
         ("3-D 160^3", lambda: laplace_3d(160))]
rows = []
for label, make in probs:
    A = csp.csr_matrix(make()); A2 = A * 2.0
    b = A @ cupy.ones(A.shape[0])
    res = {"new": {"prepare": [], "update": [], "oneshot": [], "solve": []}, "old": {"prepare": [], "update": [], "oneshot": [], "solve": []}}
    ref = {}
    for rnd in range(5):
        for which in (("new", "old") if rnd % 2 == 0 else ("old", "new")):
            jacobi._device_inverse = new if which == "new" else old
            for variant in ("graph",):
                gc.collect(); sync(); t0 = time.perf_counter()
                P = dpsolve.prepare(A, "cg", M="jacobi", variant=variant); sync()
                res[which]["prepare"].append(time.perf_counter() - t0)
                for B in (A2, A):
                    sync(); t0 = time.perf_counter(); P.update(B); sync()
                    res[which]["update"].append(time.perf_counter() - t0)
                sync(); t0 = time.perf_counter(); x, info = P.solve(b, rtol=1e-8); sync()
                res[which]["solve"].append(time.perf_counter() - t0)
                inv = P.precond.inv_diag
                inv = inv.get() if hasattr(inv, "get") else np.asarray(inv)
                ref.setdefault(which, (inv, x.get(), info))
                P = None
            gc.collect(); sync(); t0 = time.perf_counter()
            x1, info1 = dpsolve.cg(A, b, M="jacobi", rtol=1e-8, variant="persistent"); sync()
            res[which]["oneshot"].append(time.perf_counter() - t0)
    same_inv = np.array_equal(ref["new"][0].view(np.uint64), ref["old"][0].view(np.uint64))
    same_x = np.array_equal(ref["new"][1], ref["old"][1])
    for k in ("prepare", "update", "oneshot", "solve"):
        o, nw = statistics.median(res["old"][k]) * 1e3, statistics.median(res["new"][k]) * 1e3
        rows.append([label, k, f"{o:.2f}", f"{nw:.2f}", f"{min(res['old'][k])*1e3:.2f}-{max(res['old'][k])*1e3:.2f}",
                     f"{min(res['new'][k])*1e3:.2f}-{max(res['new'][k])*1e3:.2f}", same_inv, same_x])
        print("RESULT", *rows[-1], flush=True)
w = csv.writer(sys.stdout)
w.writerow(["problem", "what", "old_ms_median", "new_ms_median", "old_range", "new_range", "same_inv_bits", "same_x_bits"])
w.writerows(rows)
