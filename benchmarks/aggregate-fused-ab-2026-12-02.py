#!/usr/bin/env python3
"""The AMG aggregation's passes in fewer operations, A/B in one process (issue 30, session 67;
H200 2026-12-02).

    PYTHONPATH=. python3 benchmarks/aggregate-fused-ab-2026-12-02.py 2:1024 3:100 3:160

A ("array-ops"): device.aggregate as it was (946daa8), below as old_aggregate: each pass's roots
numbered with CuPy's comparisons, cumsum and where, the second pass's leftover neighbours counted
by an SpMV, the count of new roots by a reduction, the renumbering in the roots' order through a
boolean index (a host wait); B ("fused"): amg.cu's agg_flags, agg_number and agg_root_order.
prepare(A, "cg", M="amg", variant="graph") timed in rounds AB, BA, ... (amg_setup_ab), and the
aggregates of every level compared. Prints a line a problem, then a CSV block."""
import numpy as np
from amg_setup_ab import run_ab

from dpsolve.cuda import ops
from dpsolve.precond.amg import device, reference
from dpsolve.precond.amg.device import BLOCK, _csr, _grid, _mis, _spmv, get_kernel

NEW = device.aggregate


# device.aggregate at 946daa8, as it was
def old_aggregate(gp, gj, dtype, second_pass: int = 1):
    """``reference.aggregate``'s three passes on the device: (node -> aggregate int32, n_agg).
    ``second_pass``: the second pass's distance, as the reference's (0: none)."""
    import cupy
    n = gp.size - 1
    grid = (_grid(n),)
    join = get_kernel("amg", "agg_join<{T}>", dtype)
    count = cupy.zeros(2, cupy.int32)

    def joined(agg, v, roots_only, new_roots=None):
        """(the join's result, the nodes it left out, the number of True in the mask
        ``new_roots`` (counted on the device), both read back in one wait)."""
        out = cupy.empty_like(agg)
        count.fill(0)
        join(grid, (BLOCK,), (np.int32(n), np.int32(roots_only), gp, gj,
                              v if v is not None else ops._NULL, agg, out, count[:1]))
        if new_roots is not None:
            ops.count_true(new_roots, out=count[1:])
        missing, k = (int(c) for c in count.get())
        return out, missing, k

    # pass 1: the MIS-2's roots and their neighbours
    v = _mis(gp, gj, dtype, 2)
    roots = (v >> 60) == 2
    agg = cupy.where(roots, cupy.cumsum(roots.astype(cupy.int32)) - 1, -1).astype(cupy.int32)
    agg, missing, n_agg = joined(agg, v, 1, roots)
    all_roots = roots
    # pass 2: second roots, the MIS-1 of the leftovers that have a leftover neighbour
    if missing and second_pass:
        left = agg < 0
        v2 = _mis(gp, gj, dtype, int(second_pass), agg)
        counts = _spmv(_csr(cupy.ones(gj.size, cupy.float32), gj, gp, (n, n)),
                             left.astype(cupy.float32)) - left
        second = ((v2 >> 60) == 2) & left & (counts > 0)
        agg = cupy.where(second, n_agg + cupy.cumsum(second.astype(cupy.int32)) - 1,
                         agg).astype(cupy.int32)
        agg, missing, k = joined(agg, v2, 1, second)
        n_agg += k
        all_roots = roots | second
    # pass 3: the rest join their aggregated neighbour of largest key
    for _ in range(n + 1):
        if not missing:
            if not reference.ROOT_ORDER:
                return agg, n_agg
            # numbered in the order of their roots (reference.in_root_order)
            new = cupy.empty(n_agg, cupy.int32)
            new[agg[all_roots]] = cupy.arange(n_agg, dtype=cupy.int32)
            return new[agg], n_agg
        agg, missing, _ = joined(agg, v, 0)
    raise RuntimeError("AMG aggregation left nodes unaggregated (internal error)")


def switch(key):
    device.aggregate = old_aggregate if key == "array-ops" else NEW


def main():
    run_ab(("array-ops", "fused"), switch)


if __name__ == "__main__":
    main()
