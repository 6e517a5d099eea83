"""ELLPACK over NumPy or CuPy arrays, stored column-major so that a warp's loads coalesce.

Entry k of row i lives at ``k * n + i``. Rows shorter than ``width`` are padded with value 0 and
column index -1; kernels stop a row at the first -1. ELL refuses a matrix whose padded storage
``n * width`` would exceed ``max_fill`` times its nonzeros (default 2x).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import FormatError
from .csr import CSR, array_module

DEFAULT_MAX_FILL = 2.0


@dataclass
class ELL:
    data: object       # (width * n,) values, column-major
    indices: object    # (width * n,) int32 columns, -1 for padding
    n: int
    width: int
    nnz: int

    @property
    def xp(self):
        return array_module(self.data)

    @property
    def dtype(self):
        return self.data.dtype

    @classmethod
    def from_csr(cls, csr: CSR, max_fill: float = DEFAULT_MAX_FILL) -> "ELL":
        xp = csr.xp
        n, nnz = csr.n, csr.nnz
        width = (csr.max_row if csr.max_row is not None
                 else int(xp.diff(csr.indptr).max()) if n else 0)
        stored = n * width
        if nnz and stored > max_fill * nnz:
            raise FormatError(
                f"ELL would store {stored} entries for {nnz} nonzeros ({stored / nnz:.1f}x, the "
                f"longest row has {width} entries, the mean is {nnz / n:.1f}); the limit is "
                f"{max_fill:g}x. Use format='csr-vector' or 'csr-scalar'.")
        if stored > np.iinfo(np.int32).max:
            raise FormatError(f"ELL storage of {stored} entries exceeds 32-bit indexing")
        fill = _kernel_fill if csr.on_device else _scatter_fill
        data, idx = fill(csr, width)
        return cls(data, idx, n, width, nnz)

    def fill(self) -> float:
        return (self.n * self.width / self.nnz) if self.nnz else 1.0

    def matvec(self, x):
        """Host-side reference SpMV, y = A x, from the padded arrays."""
        xp = self.xp
        y = xp.zeros(self.n, dtype=np.result_type(self.dtype, x.dtype))
        if self.width == 0:
            return y
        idx = self.indices.reshape(self.width, self.n)
        val = self.data.reshape(self.width, self.n)
        safe = xp.where(idx >= 0, idx, 0)
        y += (val * x[safe]).sum(axis=0)       # padding has value 0
        return y


def _scatter_fill(csr: CSR, width: int):
    """(values, columns) of ``csr``'s ELL layout by scatters, where the CSR lives (the host's
    path; on the device, ``_kernel_fill`` gives the same arrays in one launch)."""
    xp, n, nnz = csr.xp, csr.n, csr.nnz
    rows = csr.row_ids()                                              # row of each nonzero
    pos = xp.arange(nnz, dtype=np.int64) - csr.indptr[rows]           # its slot in the row
    slot = pos * n + rows
    data = xp.zeros(n * width, dtype=csr.dtype)
    idx = xp.full(n * width, -1, dtype=np.int32)
    data[slot] = csr.data
    idx[slot] = csr.indices
    return data, idx


def _kernel_fill(csr: CSR, width: int):
    """``_scatter_fill``'s arrays for a CSR on the device: spmv.cu's ell_fill, a thread a row."""
    from ..cuda import ops
    xp = csr.xp
    data = xp.empty(csr.n * width, dtype=csr.dtype)
    idx = xp.empty(csr.n * width, dtype=np.int32)
    ops.ell_fill(csr, width, idx, data)
    return data, idx
