#!/usr/bin/env python3
"""A/B in one process: a prepared system on the stream a dropped one left (``_setup.RECYCLE``,
A) against a new stream each (B, as before), AMG on graph as bench-amg prepares it (session 69).

    PYTHONPATH=. python3 benchmarks/prepare-recycle-ab-2026-12-02.py 2:1024 3:100 3:160 > out.csv

Rounds ABBA x3 a problem; a round: the pool's free blocks released, one untimed prepare, then
5 timed prepare(A, "cg", M="amg", variant="graph") calls, each replacing the last (as a loop
over systems does), and 3 timed P.update(2 A) / P.update(A). CSV rows: problem, way, round,
the median prepare and update ms, the cudaMalloc calls of the timed prepares (a memory hook),
and the pool's total MiB at the round's end. Then, on stderr, a summary: the medians of
the rounds' medians, A / B."""
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp

from amg_setup_ab import MallocCount, prepare
from dpsolve import _setup
from dpsolve.matrices import laplace_2d, laplace_3d


pool = cupy.get_default_memory_pool()
sync = cupy.cuda.Device().synchronize


def timed(fn):
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t) * 1e3


print("problem,way,round,prepare_ms,update_ms,cudamalloc,pool_total_mib", flush=True)
summary = []
for spec in sys.argv[1:]:
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
    A2 = A * 2
    got = {"A": [], "B": []}
    for rnd, way in enumerate("ABBAABBAABBA"):
        _setup.RECYCLE = way == "A"
        box = {}
        _setup._spare.clear()
        pool.free_all_blocks()
        box["P"] = prepare(A)
        prep, hook = [], MallocCount()
        with hook:
            for _ in range(5):
                prep.append(timed(lambda: box.__setitem__("P", prepare(A))))
        upd = [timed(lambda: box["P"].update(A2 if i % 2 == 0 else A)) for i in range(3)]
        row = (statistics.median(prep), statistics.median(upd))
        got[way].append(row)
        print(f"{spec},{way},{rnd},{row[0]:.2f},{row[1]:.2f},{hook.n},"
              f"{pool.total_bytes() / 2**20:.0f}", flush=True)
        box.clear()
    _setup.RECYCLE = True
    a = [statistics.median(r[i] for r in got["A"]) for i in (0, 1)]
    b = [statistics.median(r[i] for r in got["B"]) for i in (0, 1)]
    summary.append(f"# {spec}: prepare A {a[0]:.2f} ms, B {b[0]:.2f} (A / B {a[0] / b[0]:.3f}); "
                   f"update A {a[1]:.2f}, B {b[1]:.2f}; update / prepare A {a[1] / a[0]:.3f}, "
                   f"B {b[1] / b[0]:.3f}")
print("\n".join(summary), file=sys.stderr)
