#!/usr/bin/env python3
"""Where a same-pattern AMG re-set-up's host time goes, phase by phase (issue 30, session 76;
H200 2026-12-03, on cd704f7's tree).

    PYTHONPATH=. python3 benchmarks/update-phases-2026-12-03.py

P = prepare(A, "cg", M="amg", variant="graph"), 8 untimed updates (2 A, A, ...), then 20 timed
ones, each between two device synchronisations. Each phase's function is wrapped with a
wall-clock timer (no synchronisation inside: the host's time in it, its waits included); the
figures nest (setup holds _numeric_levels, ...). Output: the .txt beside this script.
Found: at 100^3 (update 11.7 ms) the levels' launches take ~2.4 ms of host and their one read
~3.5 ms more (the GPU finishing the products and power steps), then lowered 2.2, _prepare_cycle
1.2, the coarse inverse 1.1, the graph's capture 1.0: the host work after the read depends on
it (the float16 scales, rho, the coarse matrix's Hermitian test)."""
import collections
import gc
import statistics
import sys
import time

import cupy

sys.path.insert(0, "benchmarks")
from amg_setup_ab import prepare, problem  # noqa: E402

import dpsolve._frontend as fe  # noqa: E402
import dpsolve._prepared as prep  # noqa: E402
import dpsolve.backends._gpu as gpu  # noqa: E402
import dpsolve.backends.graph as gr  # noqa: E402
import dpsolve.precond.amg as amgpkg  # noqa: E402
import dpsolve.precond.amg.device as dv  # noqa: E402

acc = collections.defaultdict(float)
cnt = collections.defaultdict(int)


def wrap(owner, name, label=None):
    """Replace owner.name by a wrapper that adds its wall time under ``label``."""
    f = getattr(owner, name)
    label = label or name

    def w(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[label] += time.perf_counter() - t0
            cnt[label] += 1
    setattr(owner, name, w)


wrap(prep, "device_system")
wrap(fe, "pick")
wrap(fe, "prepared")
wrap(gr.GraphBackend, "_build", "graph._build")
wrap(gr, "capture_while")
wrap(gr, "_instantiate")
wrap(gpu.GpuState, "__init__", "GpuState.__init__")
for name in ("setup", "_numeric_levels", "lowered", "_prepare_cycle", "spectral_radius",
             "_check_level", "_numeric_level", "sell_of", "is_hermitian",
             "smoothed_restriction", "_halve", "ell_of"):
    if hasattr(dv, name):
        wrap(dv, name)
wrap(dv.CoarseInverse, "__init__", "CoarseInverse.__init__")
wrap(dv.CoarseInverse, "result", "CoarseInverse.result")
for cls in vars(amgpkg).values():
    if isinstance(cls, type) and hasattr(cls, "inherit"):
        wrap(cls, "inherit", cls.__name__ + ".inherit")
dev = cupy.cuda.Device()
N = 20
for spec in ("3:100", "2:1024"):
    A = problem(spec)
    A2 = A * 2.0
    P = prepare(A)
    for _ in range(4):
        P.update(A2)
        P.update(A)
    dev.synchronize()
    acc.clear()
    cnt.clear()
    walls, tails = [], []
    for i in range(N):
        dev.synchronize()
        t0 = time.perf_counter()
        P.update(A2 if i % 2 == 0 else A)
        t1 = time.perf_counter()
        dev.synchronize()
        t2 = time.perf_counter()
        walls.append((t2 - t0) * 1e3)
        tails.append((t2 - t1) * 1e3)
    print(spec, "update median %.2f ms, tail after return %.2f"
          % (statistics.median(walls), statistics.median(tails)))
    for k, v in sorted(acc.items(), key=lambda x: -x[1]):
        print("  %-28s %7.3f ms/update  %5.1f calls" % (k, v / N * 1e3, cnt[k] / N))
    P = None
    gc.collect()
