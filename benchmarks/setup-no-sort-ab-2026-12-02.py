#!/usr/bin/env python3
"""The AMG set-up without CuPy's sorts, A/B in one process (issue 30, session 67; H200 2026-12-02).

    PYTHONPATH=. python3 benchmarks/setup-no-sort-ab-2026-12-02.py 2:1024 3:100 3:160

A ("sorts"): the transposes through sparse.transpose (CuPy's stable argsort and some 20
operations) and the SELL copies' row order through CuPy's argsort of a (window, length) key, as
before this change; B ("no-sort"): device.transpose (amg.cu's transpose_count / _fill / _rank)
and amg.cu's sell_order. prepare(A, "cg", M="amg", variant="graph") timed in rounds AB, BA, ...
(amg_setup_ab.ab_prepares); the hierarchies' aggregates, R, RS, their orders and the SELL copies'
row orders compared between the two. Prints a line a problem, then a CSV block."""
import cupy
from amg_setup_ab import prepare, run_ab

from dpsolve.precond.amg import device
from dpsolve.precond.amg import sparse as sps

NEW_TRANSPOSE, NEW_GET_KERNEL, NEW_LAUNCH = device.transpose, device.get_kernel, device.launch
OLD_ORDER = object()                       # sell_order's launch, done the old way


def old_get_kernel(source, expression, dtype, *a, **k):
    if expression == "sell_order<{T}>":
        return OLD_ORDER
    return NEW_GET_KERNEL(source, expression, dtype, *a, **k)


def old_launch(kernel, grid, block, args, stream=None, **k):
    if kernel is not OLD_ORDER:
        return NEW_LAUNCH(kernel, grid, block, args, stream, **k)
    n, sigma, indptr, perm = int(args[0]), int(args[1]), args[2], args[3]
    lengths = cupy.diff(indptr).astype(cupy.int64)        # device.py before this change
    key = ((cupy.arange(n, dtype=cupy.int64) // sigma) << 32) | (0x7FFFFFFF - lengths)
    perm[...] = cupy.argsort(key).astype(cupy.int32)


def old_transpose(*a, **k):
    """sparse.transpose, its order cast to int32 as device.transpose gives it (the callers cast
    it before this change)."""
    out = sps.transpose(*a, **k)
    return out[:3] + (out[3].astype(cupy.int32),) if k.get("with_order") else out


def switch(key):
    old = key == "sorts"
    device.transpose = old_transpose if old else NEW_TRANSPOSE
    device.get_kernel = old_get_kernel if old else NEW_GET_KERNEL
    device.launch = old_launch if old else NEW_LAUNCH


def arrays(P):
    """Every level's aggregates, R, RS, their orders and the SELL copies' slice pointers and row
    orders (host copies) of a prepared system."""
    h = P.precond.hierarchy
    out = []
    for hh in (h, h.low):
        if hh is None:
            continue
        for lev in hh.levels:
            for name in ("aggregates", "R_order", "RS_order"):
                a = getattr(lev, name, None)
                if a is not None:
                    out.append(a.get())
            for M in (lev.R, getattr(lev, "RS", None)):
                if M is not None:
                    out += [M.indptr.get(), M.indices.get(), M.data.get()]
            for S in (getattr(lev, "sell_A", None), getattr(lev, "sell_R", None),
                      getattr(lev, "sell_P", None)):
                if S is not None:            # (idx and val: slots past n are unset)
                    out += [a.get() for a in (S.sptr, S.perm) if a is not None]
    return out


def main():
    run_ab(("sorts", "no-sort"), switch, result=lambda A: arrays(prepare(A)))


if __name__ == "__main__":
    main()
