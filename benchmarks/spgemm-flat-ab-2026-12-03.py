#!/usr/bin/env python3
"""The AMG set-up's sparse products walked flat, A/B in one process (issue 30, session 73; H200
2026-12-03).

    PYTHONPATH=. python3 benchmarks/spgemm-flat-ab-2026-12-03.py 2:1024 3:100 3:160

A ("stepped"): spgemm.cu's kernels as before, a B row's entries over the lanes, one A entry a
step (walk_row, walk_rows); B ("flat"): the row's products over the lanes, a window of 32 (or 8)
at a time, with the updates that meet on one column ordered by lane (walk_flat, add_in_order).
device.SPGEMM_FLAT switches every product of the set-up and of the re-set-up: it exists at
commit eb0cadc, where this ran; the next commit keeps the flat walk alone. The hierarchies
(every level's A, P, R and smoothed restriction: values, indices, row pointers) are compared bit
for bit; prepare(A, "cg", M="amg", variant="graph") and the re-set-up (update with 2 A and A)
timed in rounds AB, BA, ... (amg_setup_ab). Prints a line a problem, then a CSV block."""
from amg_setup_ab import hierarchy, run_ab

from dpsolve.precond.amg import device


def switch(key):
    device.SPGEMM_FLAT = key == "flat"


if __name__ == "__main__":
    run_ab(("stepped", "flat"), switch, result=hierarchy, resetup=True)
