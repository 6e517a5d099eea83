"""A/B in one process: large NumPy results staged (PinnedResults(limit=0)) vs recycled pinned
blocks; ABAB blocks of back-to-back calls ``x = f()``; ms per call, median [min-max] over the
blocks' steady calls (the 4th on), plus a cold sequence (a fresh PinnedResults) call by call."""
import csv
import statistics as st
import sys
import time

import cupy as cp
import numpy as np

import dpsolve
from dpsolve import _setup
from dpsolve.matrices import laplace_3d

sync = cp.cuda.Device().synchronize
warm = _setup.PinnedResults()
modes = {"staged": _setup.PinnedResults(limit=0), "pinned": warm}
rows = []


def block(mode, f, calls=8):
    _setup.pinned_results = modes[mode]
    ts, x = [], None
    for _ in range(calls):
        sync()
        t = time.perf_counter()
        x = f()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts, x


def ab(case, f, rounds=3, calls=8):
    got = {"staged": [], "pinned": []}
    xs = {}
    for _ in range(rounds):
        for mode in ("staged", "pinned"):
            ts, x = block(mode, f, calls)
            got[mode] += ts[3:]
            xs[mode] = x
    x0, x1 = (xs[m][0] if isinstance(xs[m], tuple) else xs[m] for m in ("staged", "pinned"))
    same = bool(np.array_equal(x0, x1))
    s, p = (st.median(got[m]) for m in ("staged", "pinned"))
    print(f"{case:34s} staged {s:8.3f} [{min(got['staged']):.3f}-{max(got['staged']):.3f}]"
          f"  pinned {p:8.3f} [{min(got['pinned']):.3f}-{max(got['pinned']):.3f}]"
          f"  ratio {p / s:.3f}  same bits {same}  pinned owns {warm.owns(x1)}", flush=True)
    for m in got:
        for t in got[m]:
            rows.append((case, m, t))


def cold(case, f, calls=6):
    _setup.pinned_results = _setup.PinnedResults()
    ts = []
    for _ in range(calls):
        sync()
        t = time.perf_counter()
        x = f()
        ts.append((time.perf_counter() - t) * 1e3)
    del x
    _setup.pinned_results = _setup.PinnedResults(limit=0)
    ts2 = []
    for _ in range(calls):
        sync()
        t = time.perf_counter()
        x = f()  # noqa: F841 (held until the next call, as a caller's x)
        ts2.append((time.perf_counter() - t) * 1e3)
    print(f"cold {case:29s} pinned calls " + " ".join(f"{t:.2f}" for t in ts)
          + " | staged " + " ".join(f"{t:.2f}" for t in ts2), flush=True)


for mb in (32, 128):
    d = cp.random.standard_normal(mb << 17)
    ab(f"download {mb} MB", lambda: _setup.download(d))
    cold(f"download {mb} MB", lambda: _setup.download(d))
del d

A = laplace_3d(160).tocsr()
b = A @ np.ones(A.shape[0])
bd = cp.asarray(b)
P = dpsolve.prepare(A, "cg", M="amg")
P.solve(bd, rtol=1e-8)
P.solve(b, rtol=1e-8)
ab("prepared AMG 160^3, NumPy b", lambda: P.solve(b, rtol=1e-8))
ts, _ = block("pinned", lambda: P.solve(bd, rtol=1e-8))
print(f"{'prepared AMG 160^3, CuPy b':34s} {st.median(ts[3:]):8.3f}", flush=True)
cold("prepared AMG 160^3, NumPy b", lambda: P.solve(b, rtol=1e-8))
P.close() if hasattr(P, "close") else None

A = laplace_3d(100).tocsr()
b = A @ np.ones(A.shape[0])
P = dpsolve.prepare(A, "cg", variant="graph")
P.solve(b, rtol=1e-8)
ab("prepared Jacobi graph 100^3 NumPy b", lambda: P.solve(b, rtol=1e-8))
cold("one-shot cg 100^3 NumPy", lambda: dpsolve.cg(A, b, rtol=1e-8))

# the staged path's host threads
_setup.pinned_results = _setup.PinnedResults(limit=0)
d = cp.random.standard_normal(4 << 20)
h = d.get()
res = _setup.resources()
for name, f in (("staged download 32 MB", lambda: _setup.download(d)),
                ("upload 32 MB",
                 lambda: (_setup.upload([h], res.stream), res.stream.synchronize()))):
    got = {}
    for _ in range(3):
        for threads in (1, 2, 4):
            _setup.COPY_THREADS = threads
            ts = []
            for _ in range(6):
                sync()
                t = time.perf_counter()
                f()
                ts.append((time.perf_counter() - t) * 1e3)
            got.setdefault(threads, []).extend(ts[1:])
    print(f"{name:34s} " + "  ".join(f"threads {k}: {st.median(v):.3f} [{min(v):.3f}]"
                                      for k, v in got.items()), flush=True)
_setup.COPY_THREADS = 4
with open(sys.argv[1] if len(sys.argv) > 1 else "/dev/null", "w", newline="") as fh:
    out = csv.writer(fh, lineterminator="\n")
    out.writerow(["case", "mode", "ms"])
    out.writerows([r[0], r[1], f"{r[2]:.4f}"] for r in rows)
