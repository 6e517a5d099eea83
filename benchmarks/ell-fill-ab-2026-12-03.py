#!/usr/bin/env python3
"""The ELL layout of a CSR on the device in one kernel, A/B in one process (issue 30, session
75; H200 2026-12-03).

    PYTHONPATH=. python3 benchmarks/ell-fill-ab-2026-12-03.py 2:1024 3:100 3:160

A ("scatter"): formats/ell.py's scatter path on the device, as before this change (row ids by
a binary search a nonzero, the slots' int64 arithmetic, two scatters: ~15 launches).
B ("kernel"): spmv.cu's ell_fill, a thread a row, as committed.
For each problem: ELL.from_csr alone (both layouts compared bit for bit, then timed between
synchronisations in rounds AB, BA, ...), prepared Jacobi-CG (prepare(A, "cg",
variant="graph"), whose ELL it builds) the same way, then the AMG set-up and re-set-up
(amg_setup_ab.run_ab: every level's A, P, R and RS compared, prepare and update alternated).
Prints a line a problem and part, then the CSV blocks."""
import sys

import cupy
import numpy as np
from amg_setup_ab import ab_times, hierarchy, problem, run_ab, same, spread

import dpsolve
from dpsolve.formats import ell, to_csr

KERNEL = ell._kernel_fill
KEYS = ("scatter", "kernel")


def switch(key):
    ell._kernel_fill = KERNEL if key == "kernel" else ell._scatter_fill


def layout(csr):
    E = ell.ELL.from_csr(csr, max_fill=np.inf)
    return [E.indices.get(), E.data.get()]


def main():
    rows = []
    for spec in sys.argv[1:] or ["2:1024", "3:100", "3:160"]:
        A = problem(spec)
        csr = to_csr(A, np.float64)
        got = []
        for key in KEYS:
            switch(key)
            got.append(layout(csr))
        ok = same(*got)
        parts = {"ELL.from_csr": lambda: ell.ELL.from_csr(csr, max_fill=np.inf),
                 "prepare Jacobi-CG": lambda: dpsolve.prepare(A, "cg", variant="graph")}
        for name, call in parts.items():
            ms, _ = ab_times(call, switch, KEYS, rounds=6, calls=5)
            a, b = (float(np.median(ms[k])) for k in KEYS)
            print(f"{spec}: {name} scatter {spread(ms['scatter'])} ms, kernel "
                  f"{spread(ms['kernel'])} ms, B/A {b / a:.3f}; the same layout: {ok}",
                  flush=True)
            rows.append((spec, name, a, b, b / a, ok))
    print("problem,part,scatter_median_ms,kernel_median_ms,ratio,same_layout")
    for r in rows:
        print(f"{r[0]},{r[1]},{r[2]:.3f},{r[3]:.3f},{r[4]:.3f},{r[5]}")
    print("== AMG set-up and re-set-up", flush=True)
    run_ab(KEYS, switch, result=hierarchy, resetup=True)


if __name__ == "__main__":
    cupy.cuda.Device().synchronize()
    main()
