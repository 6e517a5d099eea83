"""The sparse bookkeeping of the GPU set-up with array operations only (NumPy or CuPy, the same
code): row ids, transposes, dense copies. cuSPARSE's csr2csc, csr2dense and csrgeam (through
cupyx) are avoided: compute-sanitizer's racecheck reported hazards inside them on the H100 (issue
30), and these are cheap next to the products. The tests run this very code on NumPy against
SciPy (tests/test_amg_sparse.py)."""
from __future__ import annotations

import numpy as np

from ...formats.csr import bin_counts


def xp_of(a):
    """numpy, or cupy for a CuPy array."""
    if type(a).__module__.startswith("cupy"):
        import cupy
        return cupy
    return np


def max_abs(a) -> float:
    """max |a_ij| of a NumPy or CuPy array (0.0 when empty); on the device one kernel whatever
    the size (``dpsolve.cuda.ops.max_abs``)."""
    if xp_of(a) is np:
        return float(np.abs(a).max()) if a.size else 0.0
    from ...cuda import ops
    return ops.max_abs(a)


def row_ids(indptr, nnz: int):
    """The row of every stored entry (int64), empty rows allowed: the number of row ends at or
    before the entry's position (``repeat`` with array counts is avoided: CuPy documents it for
    an int or a list only)."""
    xp = xp_of(indptr)
    return xp.searchsorted(indptr[1:], xp.arange(nnz, dtype=indptr.dtype), side="right").astype(
        xp.int64)


def transpose(indptr, indices, data, shape, conj=False, with_order=False):
    """(indptr, indices, data) of the transpose (conjugate transpose with ``conj``) of the CSR
    matrix, rows sorted by column, no duplicates if the input had none. The entries, in row
    order, are sorted by column with a stable sort (CuPy's radix sort on the 32-bit indices:
    half the passes of a sort of 64-bit (column, row) keys), so each column lists its rows in
    order. ``with_order``: also the permutation, data_T = data[order] (conjugated with
    ``conj``), which a re-set-up over the same pattern applies to new values. The GPU set-up
    runs ``device.transpose`` (no sort, these arrays bit for bit), which falls back on this."""
    xp = xp_of(indices)
    m, k = shape
    nnz = int(indices.shape[0])
    rows = row_ids(indptr, nnz)
    cols = indices.astype(xp.int64)
    order = xp.argsort(indices, kind="stable")
    t_ptr = xp.zeros(k + 1, dtype=indptr.dtype)
    if nnz:
        t_ptr[1:] = xp.cumsum(bin_counts(cols, k)).astype(indptr.dtype)
    t_data = data[order]
    out = (t_ptr, rows[order].astype(indices.dtype), (t_data.conj() if conj else t_data))
    return out + (order,) if with_order else out


def dense(indptr, indices, data, shape):
    """The matrix as a dense array (each (row, column) stored once: a plain scatter)."""
    xp = xp_of(indices)
    out = xp.zeros(shape, dtype=data.dtype)
    out[row_ids(indptr, int(indices.shape[0])), indices.astype(xp.int64)] = data
    return out


def is_hermitian_dense(D) -> bool:
    """D == D^H to sqrt(eps) of D's largest entry (the reference's ``_is_hermitian``)."""
    top = max_abs(D)
    if top == 0:
        return True
    return max_abs(D - D.conj().T) <= np.sqrt(np.finfo(D.dtype).eps) * top


def add(a, b, shape):
    """(indptr, indices, data) of the sum of two CSR matrices given as (indptr, indices, data)
    each with sorted rows and no duplicates: the entries of both sorted by (row, column) and
    each pair of equal positions summed (at most two: one from each; a + b is exact whatever
    their order). Zeros that cancel stay (the caller drops them)."""
    xp = xp_of(a[1])
    m, k = shape
    rows = xp.concatenate([row_ids(a[0], int(a[1].shape[0])), row_ids(b[0], int(b[1].shape[0]))])
    cols = xp.concatenate([a[1], b[1]]).astype(xp.int64)
    vals = xp.concatenate([a[2], b[2]])
    key = rows * k + cols
    order = xp.argsort(key)
    key, vals = key[order], vals[order]
    if key.size > 1:
        pair = key[1:] == key[:-1]                      # the second of an equal pair
        vals[:-1] = xp.where(pair, vals[:-1] + vals[1:], vals[:-1])
        keep = xp.concatenate([xp.ones(1, dtype=bool), ~pair])
        key, vals = key[keep], vals[keep]
    out_rows = key // k
    ptr = xp.zeros(m + 1, dtype=a[0].dtype)
    if key.size:
        ptr[1:] = xp.cumsum(bin_counts(out_rows, m)).astype(a[0].dtype)
    return ptr, (key % k).astype(a[1].dtype), vals


def strength(indptr, indices, data, diag, theta: float):
    """(indptr, indices) int64 of the undirected strength graph with self loops (the reference's
    rule (a)): a_ij (i != j, a_ij != 0) is strong when |a_ij| >= theta sqrt(|a_ii| |a_jj|)
    (float64); row i lists i and every j with (i, j) or (j, i) strong, sorted, once. ``diag``:
    A's diagonal. The device set-up's implementation; the host reference keeps SciPy's
    conversion (reference.strength_graph: 2-3x faster on NumPy than this sort), and
    tests/test_amg_sparse.py holds the two equal."""
    xp = xp_of(indices)
    n = int(indptr.shape[0]) - 1
    rows = row_ids(indptr, int(indices.shape[0]))
    cols = indices.astype(xp.int64)
    strong = (rows != cols) & (data != 0)
    if theta != 0:
        mag = xp.abs(data).astype(xp.float64)
        d = xp.abs(diag).astype(xp.float64)
        strong &= mag >= theta * xp.sqrt(d[rows] * d[cols])
    r, c = rows[strong], cols[strong]
    self_loops = xp.arange(n, dtype=xp.int64)
    keys = xp.sort(xp.concatenate([r * n + c, c * n + r, self_loops * (n + 1)]))
    keys = keys[xp.concatenate([xp.ones(1, dtype=bool), keys[1:] != keys[:-1]])]   # unique
    # (a sort and a mask: NumPy 2's unique took 1.4 s on 2.4 M keys where this takes ~0.1 s)
    ptr = xp.zeros(n + 1, dtype=xp.int64)
    ptr[1:] = xp.cumsum(bin_counts(keys // n, n))
    return ptr, keys % n
