#!/usr/bin/env python3
"""The AMG set-up's independent sets and power steps in fewer launches, A/B in one process
(issue 30, session 74; H200 2026-12-03).

    PYTHONPATH=. python3 benchmarks/setup-launches-ab-2026-12-03.py 2:1024 3:100 3:160

A ("apart"), the set-up as before this change, with the kernels of this tree:
* an independent set's round: mis2_max twice (distance 2), a memset of the count, mis2_decide
  over every node (`mis_apart`: the old device._mis, mis2_max given no count to zero);
* a power step: power_step, then power_norm in one block (`radius_apart`: the old
  device.spectral_radius, power_step given no count of finished blocks).
B ("folded"), as committed: mis2_max zeroes the count and mis2_max_decide takes the second
maximum for the undecided nodes only, deciding them in the same pass; a power step's last block
sums the norm. Every level's A, P, R and RS are compared bit for bit (the power steps set P's
values); prepare(A, "cg", M="amg", variant="graph") timed in rounds AB, BA, ... (amg_setup_ab).
Prints a line a problem, then a CSV block. It ran at c2fc837; the next commit took power_norm
out of the tree, so A runs there only."""
import cupy
import numpy as np
from amg_setup_ab import hierarchy, run_ab

from dpsolve.cuda import ops
from dpsolve.cuda.executor import launch
from dpsolve.precond.amg import device

FOLDED = device._mis, device.spectral_radius
BLOCK = device.BLOCK


def mis_apart(gp, gj, dtype, distance, agg=None):
    n = gp.size - 1
    grid = (device._grid(n),)
    k = lambda name: device.get_kernel("amg", name + "<{T}>", dtype)    # noqa: E731
    v = cupy.empty(n, cupy.int64)
    m1 = cupy.empty(n, cupy.int64)
    m2 = cupy.empty(n, cupy.int64) if distance == 2 else m1
    count = cupy.zeros(1, cupy.int32)
    k("mis_init")(grid, (BLOCK,), (np.int32(n), agg if agg is not None else ops._NULL, v))
    for rnd in range(1000):
        k("mis2_max")(grid, (BLOCK,), (np.int32(n), gp, gj, v, m1, ops._NULL))
        if distance == 2:
            k("mis2_max")(grid, (BLOCK,), (np.int32(n), gp, gj, m1, m2, ops._NULL))
        count.fill(0)
        k("mis2_decide")(grid, (BLOCK,), (np.int32(n), v, m2, count))
        if rnd % 2 == 1 and int(count.get()[0]) == 0:
            return v
    raise RuntimeError("did not settle")


def radius_apart(A, inv_diag, iterations=20, ell=None, out=None):
    n = A.shape[0]
    wide = np.dtype(np.complex128 if A.dtype.kind == "c" else np.float64)
    data = A.data.astype(wide, copy=False)
    d64 = inv_diag.astype(wide, copy=False)
    lanes = min(device.POWER_MAX_LANES, device.vector_width(A.nnz / max(n, 1)))
    (grid,), rows = device.rows_launch(n, lanes, A.nnz)
    if ell is not None and ell[2].dtype == wide:
        grid = device._grid(n)
    else:
        ell = None
    if ell is None and device._one_launch(A.nnz, lanes, wide) is not None:
        return FOLDED[1](A, inv_diag, iterations, None, out)        # unchanged: one launch
    v = cupy.empty(n, wide)
    launch(device.get_kernel("amg", "power_start<{T}>", wide), (device._grid(n),), (BLOCK,),
           (np.int32(n), v), None)
    v /= cupy.linalg.norm(v)
    w = [cupy.empty_like(v), cupy.empty_like(v)]
    norm = cupy.zeros(1, cupy.float64) if out is None else out
    partials = cupy.empty(grid, cupy.float64)
    scale = cupy.ones(1, cupy.float64)
    step = (device.get_kernel("amg", f"power_step<{{T}}, {lanes}>", wide) if ell is None
            else device.get_kernel("amg", "power_step_ell<{T}>", wide))
    finish = device.get_kernel("amg", "power_norm<{T}>", wide)
    src, sc, null = v, ops._NULL, ops._NULL
    for k in range(iterations):
        dst = w[k % 2]
        if ell is None:
            args = (A.indptr, A.indices, data, d64, src, sc, dst, partials, rows)
        else:
            args = (*ell, d64, src, sc, dst, partials)
        launch(step, (grid,), (BLOCK,), (np.int32(n), *args, null, null, null), None)
        launch(finish, (1,), (BLOCK,), (np.int32(grid), partials, norm, scale), None)
        src, sc = dst, scale
    return None if out is not None else device._estimate(norm)


def switch(key):
    device._mis, device.spectral_radius = (FOLDED if key == "folded"
                                           else (mis_apart, radius_apart))


if __name__ == "__main__":
    run_ab(("apart", "folded"), switch, result=hierarchy, resetup=True)
