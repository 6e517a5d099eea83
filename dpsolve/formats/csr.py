"""Compressed sparse rows over NumPy or CuPy arrays.

``to_csr`` accepts any SciPy sparse matrix or array, a cupyx sparse matrix, or a dense 2-D NumPy or
CuPy array, and returns a CSR with sorted, de-duplicated int32 column indices. It never modifies its
input: duplicates are summed in a copy. CuPy inputs are converted on the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._errors import FormatError

INDEX_MAX = np.iinfo(np.int32).max


def _is_cupy(a) -> bool:
    return type(a).__module__.split(".")[0] in ("cupy", "cupyx")


def array_module(a):
    if _is_cupy(a):
        import cupy
        return cupy
    return np


def bin_counts(keys, length: int):
    """``bincount(keys, minlength=length)`` (int64) for keys known to lie in [0, length). On the
    device a scatter of ones: CuPy's bincount first reduces the keys (a negative test and the
    maximum), and CuPy's reductions compile a kernel per size class on first use (issue 30's
    first set-ups spent seconds in them)."""
    xp = array_module(keys)
    if xp is np:
        return np.bincount(keys, minlength=length)
    out = xp.zeros(length, xp.int32)
    if keys.size:
        xp.add.at(out, keys, 1)             # (cupyx.scatter_add is deprecated in CuPy 14)
    return out.astype(xp.int64)


@dataclass
class CSR:
    indptr: object     # (n+1,) int32
    indices: object    # (nnz,) int32, sorted within each row, no duplicates
    data: object       # (nnz,) values
    n: int
    max_row: int | None = None   # the longest row, where a check already found it (else None)
    # (largest, smallest) binary exponent of the values' nonzero components where a check found
    # them (``()``: every value is zero; None: not known): ``dpsolve._system.matrix_shift``
    exponents: tuple | None = None

    @property
    def xp(self):
        return array_module(self.data)

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def on_device(self) -> bool:
        return _is_cupy(self.data)

    def to_device(self) -> "CSR":
        if self.on_device:
            return self
        import cupy
        return CSR(cupy.asarray(self.indptr), cupy.asarray(self.indices), cupy.asarray(self.data),
                   self.n, self.max_row)

    def to_host(self) -> "CSR":
        if not self.on_device:
            return self
        return CSR(self.indptr.get(), self.indices.get(), self.data.get(), self.n, self.max_row)

    def to_scipy(self) -> sp.csr_array:
        h = self.to_host()
        return sp.csr_array((h.data, h.indices, h.indptr), shape=(self.n, self.n))

    def max_column(self) -> int:
        """The most entries any column holds: A^H's longest row (BiCG runs A^H in A's format).
        On the device a scatter of ones and one max kernel (``ops.max_abs``, exact below 2^53),
        one number read back: no transpose (BiCG's state builds A^H itself)."""
        if self.nnz == 0:
            return 0
        counts = bin_counts(self.indices, self.n)
        if self.on_device:
            from ..cuda import ops
            return int(ops.max_abs(counts.astype(np.float64)))
        return int(counts.max())

    def row_ids(self):
        """The row of each stored entry, shape (nnz,), int64."""
        xp = self.xp
        k = xp.arange(self.nnz, dtype=np.int64)
        return xp.searchsorted(self.indptr, k, side="right") - 1

    def conj_transpose(self) -> "CSR":
        """A^H as a CSR, where this one lives (BiCG's second operator)."""
        if self.on_device:
            import cupyx.scipy.sparse as csp
            m = csp.csr_matrix((self.data, self.indices, self.indptr), shape=(self.n, self.n))
            t = m.conj().T.tocsr()     # cuSPARSE's csr2csc: sorted, and no duplicates where
            if not t.has_sorted_indices:   # this (checked) matrix has none; no re-check needed
                t.sort_indices()
            import cupy
            return CSR(cupy.ascontiguousarray(t.indptr, dtype=np.int32),
                       cupy.ascontiguousarray(t.indices, dtype=np.int32),
                       cupy.ascontiguousarray(t.data), self.n)
        t = self.to_scipy().conj().T.tocsr()
        t.sum_duplicates()
        return _checked(t.indptr, t.indices, t.data, self.n, np)

    def diagonal(self):
        """The main diagonal (zeros where a row stores none), where the matrix lives."""
        xp = self.xp
        rows = self.row_ids()
        d = xp.zeros(self.n, dtype=self.dtype)
        on = self.indices == rows
        d[rows[on]] = self.data[on]
        return d

    def matvec(self, x):
        """Host-side reference SpMV, y = A x, written from the CSR arrays (not through SciPy)."""
        xp = self.xp
        rows = self.row_ids()
        prod = self.data * x[self.indices]
        y = xp.zeros(self.n, dtype=np.result_type(self.dtype, x.dtype))
        xp.add.at(y, rows, prod)            # CuPy's too (cupyx.scatter_add is deprecated)
        return y

    def validate(self, canonical: bool = False) -> None:
        """Raise FormatError unless the arrays form a valid sorted, duplicate-free CSR matrix.
        ``canonical``: host arrays a pass has just found sorted and duplicate-free within each
        row (``canonical_host``): that test is not made again."""
        xp = self.xp
        ip, ix = self.indptr, self.indices
        if ip.shape != (self.n + 1,):
            raise FormatError(f"CSR indptr has shape {ip.shape}, expected ({self.n + 1},)")
        if int(ip[0]) != 0 or int(ip[-1]) != self.nnz:
            raise FormatError(f"CSR indptr must run from 0 to nnz={self.nnz}, "
                              f"got {int(ip[0])}..{int(ip[-1])}")
        if self.nnz == 0:
            return
        if any_true(xp.diff(ip) < 0):
            raise FormatError("CSR indptr is not non-decreasing")
        if (int(ix.min()) < 0 or int(ix.max()) >= self.n if xp is np      # no masks on the host
                else any_true((ix < 0) | (ix >= self.n))):
            raise FormatError(f"CSR column index out of range [0, {self.n})")
        if canonical and xp is np:
            return
        # sorted and unique within each row: strictly increasing except across row starts
        inc = ix[1:] > ix[:-1]
        starts = xp.zeros(self.nnz, dtype=bool)
        row_starts = ip[:-1][xp.diff(ip) > 0]
        starts[row_starts] = True
        if any_true(~(inc | starts[1:])):
            raise FormatError("CSR column indices are not sorted and unique within each row")


def any_true(mask) -> bool:
    """Whether a bool array (NumPy or CuPy) holds a True. On the device by dpsolve's one counting
    kernel (``ops.count_true``): CuPy's ``.any()`` compiles a CUB reduction per size class on
    first use (1-3 s each on an empty kernel cache); CuPy's own past 2^31 entries."""
    if isinstance(mask, np.ndarray) or mask.size >= 2**31:
        return bool(mask.any())
    from ..cuda import ops
    return ops.count_true(mask) > 0


def canonical_host(indptr, indices, n: int) -> bool:
    """Whether host CSR arrays are sorted and duplicate-free within each row: SciPy's own C pass
    (one read, no temporaries), run here rather than trusting a matrix's cached flag, once
    ``indptr`` is known to stay within ``indices``. False where it cannot tell (its dtypes
    differ, or SciPy no longer has the pass): the caller then takes the general path."""
    try:
        from scipy.sparse._sparsetools import csr_has_canonical_format
    except ImportError:                     # a private SciPy name: the general path
        return False
    if (indptr.dtype != indices.dtype or indptr.shape != (n + 1,) or int(indptr[0]) != 0
            or not 0 <= int(indptr[-1]) <= indices.shape[0] or (np.diff(indptr) < 0).any()):
        return False
    return bool(csr_has_canonical_format(n, indptr, indices))


def _read_only(a):
    v = a.view()
    v.flags.writeable = False
    return v


def _from_scipy(A, dtype, copy: bool = True) -> CSR:
    """A checked CSR of a SciPy matrix. ``copy=False``: where A is already a sorted,
    duplicate-free CSR of ``dtype`` with int32 indices, its own arrays, as read-only views (a
    caller that only reads and uploads them: a distributed solve's rows, 0.17 s of copies fewer
    at 8M rows on an H200's host); anything else is converted into new arrays."""
    m = sp.csr_array(A, dtype=dtype, copy=copy)
    n = m.shape[0]
    canonical = canonical_host(m.indptr, m.indices, n)
    if not canonical:
        if not copy:
            m = m.copy()                    # sum_duplicates works in place
        m.has_sorted_indices = False        # SciPy's cached flags may be stale (arrays changed
        m.has_canonical_format = False      # in place since): sort and sum regardless
        m.sum_duplicates()
        canonical = canonical_host(m.indptr, m.indices, n)
    arrays = (m.indptr, m.indices, m.data)
    if not copy:
        arrays = tuple(map(_read_only, arrays))
    return _checked(*arrays, n, np, canonical=canonical)


def _from_cupy(A, dtype) -> CSR:
    import cupy
    import cupyx.scipy.sparse as csp
    if csp.issparse(A):
        m = csp.csr_matrix(A, dtype=dtype, copy=True)
    else:
        m = csp.csr_matrix(cupy.asarray(A, dtype=dtype))
    m.sum_duplicates()
    if not m.has_sorted_indices:
        m.sort_indices()
    return _checked(m.indptr, m.indices, m.data, m.shape[0], cupy)


def _checked(indptr, indices, data, n, xp, canonical: bool = False) -> CSR:
    if data.shape[0] > INDEX_MAX or n > INDEX_MAX:
        raise FormatError(f"matrix too large for 32-bit indices (n={n}, nnz={data.shape[0]})")
    csr = CSR(xp.ascontiguousarray(indptr, dtype=np.int32),
              xp.ascontiguousarray(indices, dtype=np.int32),
              xp.ascontiguousarray(data), int(n))
    csr.validate(canonical=canonical)       # (sorted, de-duplicated: narrowing keeps the order)
    return csr


def to_csr(A, dtype, copy: bool = True) -> CSR:
    """CSR of ``A`` in ``dtype``, in the memory space ``A`` lives in (host or device). A sparse
    ``A``'s index arrays are checked as they are before anything converts or narrows them.
    ``copy=False`` (a host SciPy A, for a caller that only reads the result within the call):
    ``_from_scipy``'s read-only views where A is already a canonical CSR."""
    if sp.issparse(A) or (_is_cupy(A) and hasattr(A, "format")):
        from .validate import check_indices
        check_indices(A)
    if _is_cupy(A):
        return _from_cupy(A, dtype)
    if sp.issparse(A):
        return _from_scipy(A, dtype, copy)
    a = np.asarray(A)
    if a.ndim != 2:
        raise ValueError(f"A must be 2-D, got an array of shape {a.shape}")
    return _from_scipy(sp.csr_array(a.astype(dtype, copy=False)), dtype)
