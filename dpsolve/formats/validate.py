"""The raw index arrays of a sparse matrix, checked before anything converts or narrows them.

SciPy's and cupyx's conversions (``tocsr``, ``sum_duplicates``, a CSC's transpose) read index
arrays as they are: a row index past the end, or an ``indptr`` entry past the stored entries,
is a read out of bounds in C++ or CUDA -- a crash, or a matrix that does not exist -- and an int64
or float index narrowed to int32 lands on another column. :func:`check_indices` looks at the
arrays of a SciPy or cupyx sparse matrix *as the user handed them* (in their own dtype, where
they live) and raises :class:`FormatError` naming the format, the array and the first bad entry.

CSR, CSC and BSR: ``indptr`` of the right length, starting at 0, non-decreasing, ending within the
stored entries; indices in range. COO: both coordinates in range. DIA: integer offsets, unique,
each touching the matrix. Every index array must hold integers. LIL and DOK hold Python objects
checked when they are set. Costs one pass over the index arrays (on the GPU for cupyx matrices).
"""
from __future__ import annotations

import numpy as np

from .._errors import FormatError
from .csr import any_true, array_module


def _integers(arr, label: str, what: str) -> None:
    dt = np.dtype(arr.dtype)
    if dt.kind not in "iu":
        raise FormatError(f"{what}: {label} must hold integers, got dtype {dt}")


def _in_range(xp, arr, lo: int, hi: int, label: str, what: str) -> None:
    """Every entry of ``arr`` in [lo, hi), compared in its own dtype (no narrowing first)."""
    if arr.size == 0:
        return
    if xp is np and int(arr.min()) >= lo and int(arr.max()) < hi:   # two reductions, no masks
        return
    if np.dtype(arr.dtype).kind == "u":          # compare unsigned as unsigned: no wrap to < 0
        bad = arr >= np.uint64(hi) if hi > 0 else xp.ones(arr.shape, bool)
    else:
        bad = (arr < lo) | (arr >= hi)
    if any_true(bad):
        k = int(xp.flatnonzero(bad)[0])
        raise FormatError(f"{what}: {label} {int(arr[k])} at entry {k} is out of range "
                          f"[{lo}, {hi})")


def _compressed(xp, indptr, indices, data_len: int, major: int, minor: int, fmt: str,
                index_name: str, what: str, full: bool = True) -> None:
    """CSR / CSC / BSR: indptr (major + 1,), 0 .. nnz non-decreasing, indices[:nnz] in
    [0, minor). ``full=False``: the O(1) checks only (dtypes, shape, and for host arrays the two
    ends; reading a device array's ends would cost a host wait)."""
    _integers(indptr, f"{fmt} indptr", what)
    _integers(indices, f"{fmt} {index_name}", what)
    if not full and xp is not np:
        return
    if indptr.ndim != 1 or indptr.shape[0] != major + 1:
        raise FormatError(f"{what}: {fmt} indptr has shape {tuple(indptr.shape)}, expected "
                          f"({major + 1},)")
    stored = min(int(indices.shape[0]), data_len)
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0 or not 0 <= last <= stored:
        raise FormatError(f"{what}: {fmt} indptr must run from 0 to at most the {stored} stored "
                          f"entries, got {first}..{last}")
    if not full:
        return
    if major and any_true(indptr[1:] < indptr[:-1]):
        k = int(xp.flatnonzero(indptr[1:] < indptr[:-1])[0])
        raise FormatError(f"{what}: {fmt} indptr is not non-decreasing (indptr[{k + 1}] = "
                          f"{int(indptr[k + 1])} < indptr[{k}] = {int(indptr[k])})")
    _in_range(xp, indices[:last], 0, minor, f"{fmt} {index_name}", what)


def check_indices(A, what: str = "A", *, compressed: bool = True) -> None:
    """Raise FormatError unless the index arrays of the SciPy or cupyx sparse matrix ``A`` are
    valid as they are. ``compressed=False`` skips the pass over a CSR's arrays (the GPU set-up's
    csr_check kernel makes it, in the arrays' own dtype), keeping the O(1) checks (dtypes,
    indptr's length and ends)."""
    fmt = getattr(A, "format", None)
    nrow, ncol = (int(s) for s in A.shape)
    xp = array_module(A.data) if hasattr(A, "data") else np
    if fmt in ("csr", "csc"):
        major, minor = (nrow, ncol) if fmt == "csr" else (ncol, nrow)
        index = "column index" if fmt == "csr" else "row index"
        _compressed(xp, A.indptr, A.indices, int(A.data.shape[0]), major, minor, fmt.upper(),
                    index, what, full=compressed or fmt != "csr")
    elif fmt == "bsr":
        r, c = A.blocksize
        _compressed(xp, A.indptr, A.indices, int(A.data.shape[0]), nrow // r, ncol // c, "BSR",
                    "block column index", what)
    elif fmt == "coo":
        coords = getattr(A, "coords", None) or (A.row, A.col)
        for axis, (arr, size) in enumerate(zip(coords, (nrow, ncol))):
            label = f"COO {('row', 'column')[axis]} index"
            _integers(arr, label, what)
            if arr.shape[0] != A.data.shape[0]:
                raise FormatError(f"{what}: COO has {A.data.shape[0]} values but {arr.shape[0]} "
                                  f"{('row', 'column')[axis]} indices")
            _in_range(xp, arr, 0, size, label, what)
    elif fmt == "dia":
        off = A.offsets
        _integers(off, "DIA offsets", what)
        _in_range(xp, off, -nrow + 1, ncol, "DIA offset", what)
        if off.size and int(xp.unique(off).size) != int(off.size):
            raise FormatError(f"{what}: DIA offsets repeat a diagonal "
                              f"({sorted(off.tolist())})")
