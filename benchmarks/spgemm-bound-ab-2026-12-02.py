#!/usr/bin/env python3
"""The sparse products' overflow flags made by spgemm_bound, A/B in one process (issue 30,
session 67; H200 2026-12-02).

    PYTHONPATH=. python3 benchmarks/spgemm-bound-ab-2026-12-02.py 2:1024 3:100 3:160

A ("cupy-flags"): each product's first overflow flags (a narrow C's rows that are dense rows at
once) made after spgemm_bound by CuPy's two comparisons, an and, a cast and a copy, as before
this change (emulated: spgemm_bound launched with dense_cols 0, then those operations); B
("bound-flags"): spgemm_bound writes them. Both with this change's cumsum into C's row pointers.
prepare(A, "cg", M="amg", variant="graph") timed in rounds AB, BA, ... (amg_setup_ab), and the
aggregates compared. Prints a line a problem, then a CSV block."""
import numpy as np
from amg_setup_ab import run_ab

from dpsolve.precond.amg import device

NEW_LAUNCH = device.launch
state = {"old": False, "emulated": 0}
BOUND = []                                  # spgemm_bound at the dtypes the set-ups use


def launch(kernel, grid, block, args, stream=None, **k):
    if not state["old"] or not any(kernel is b for b in BOUND):
        return NEW_LAUNCH(kernel, grid, block, args, stream, **k)
    state["emulated"] += 1
    tsize, overflow, slots, dense_cols = args[4], args[5], int(args[6]), int(args[7])
    NEW_LAUNCH(kernel, grid, block, args[:7] + (np.int32(0),), stream, **k)
    if dense_cols:
        overflow[...] = ((tsize > slots) & (tsize >= dense_cols)).astype(np.int32)


def switch(key):
    state["old"] = key == "cupy-flags"


def main():
    BOUND.extend(device.get_kernel("spgemm", "spgemm_bound<{T}>", dt)
                 for dt in (np.dtype(np.float32), np.dtype(np.float64)))
    device.launch = launch
    run_ab(("cupy-flags", "bound-flags"), switch,
           note=lambda: f"products emulated so far {state['emulated']}")


if __name__ == "__main__":
    main()
