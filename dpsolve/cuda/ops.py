"""Host wrappers of the kernels: one function per kernel family, each computing its own grid.

Arguments are CuPy arrays already on the device; nothing here copies to or from the host.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..formats import CSR, ELL, DEFAULT_MAX_FILL
from ._loader import CSR_VECTOR_WIDTHS, get_kernel

BLOCK = 256            # DPS_BLOCK in common.cuh
DOT_MAX_PARTIALS = 1024


def _sm_count() -> int:
    from .._device import status
    return status().multiprocessors or 1


def grid_for(work_items: int, per_block: int = BLOCK, waves: int = 32) -> int:
    """Blocks for a grid-stride kernel: enough to cover the work, at most `waves` per SM."""
    return max(1, min(-(-work_items // per_block), waves * _sm_count()))


def vector_width(mean_row: float) -> int:
    """Lanes per row for CSR-vector: the power of two nearest the mean row length, in [2, 32]."""
    for w in CSR_VECTOR_WIDTHS:
        if mean_row <= w * 1.5:
            return w
    return CSR_VECTOR_WIDTHS[-1]


@dataclass
class DeviceMatrix:
    """A matrix prepared on the device in one SpMV format."""
    format: str
    n: int
    nnz: int
    dtype: np.dtype
    csr: CSR | None = None
    ell: ELL | None = None
    width: int = 0           # CSR-vector lanes per row

    @classmethod
    def build(cls, csr: CSR, fmt: str, max_fill: float = DEFAULT_MAX_FILL) -> "DeviceMatrix":
        csr = csr.to_device()
        if fmt == "ell":
            return cls(fmt, csr.n, csr.nnz, csr.dtype, ell=ELL.from_csr(csr, max_fill))
        if fmt == "csr-vector":
            return cls(fmt, csr.n, csr.nnz, csr.dtype, csr=csr,
                       width=vector_width(csr.nnz / max(csr.n, 1)))
        if fmt == "csr-scalar":
            return cls(fmt, csr.n, csr.nnz, csr.dtype, csr=csr)
        raise ValueError(f"unknown format {fmt!r}")

    def matrix_bytes(self) -> int:
        s = self.dtype.itemsize
        if self.ell is not None:
            return self.ell.width * self.n * (s + 4)
        return self.nnz * (s + 4) + (self.n + 1) * 4


def spmv(A: DeviceMatrix, x, y, stream=None) -> None:
    """y = A x."""
    n = A.n
    if n == 0:
        return
    if A.format == "csr-scalar":
        k = get_kernel("spmv", "spmv_csr_scalar<{T}>", A.dtype)
        c = A.csr
        k((grid_for(n),), (BLOCK,), (np.int32(n), c.indptr, c.indices, c.data, x, y), stream=stream)
    elif A.format == "csr-vector":
        k = get_kernel("spmv", f"spmv_csr_vector<{{T}}, {A.width}>", A.dtype)
        c = A.csr
        k((grid_for(n * A.width),), (BLOCK,), (np.int32(n), c.indptr, c.indices, c.data, x, y),
          stream=stream)
    else:
        k = get_kernel("spmv", "spmv_ell<{T}>", A.dtype)
        e = A.ell
        k((grid_for(n),), (BLOCK,), (np.int32(n), np.int32(e.width), e.indices, e.data, x, y),
          stream=stream)


def dot_partials(n: int) -> int:
    """Number of stage-1 blocks (= partial sums) of the two-stage DOT for length n."""
    return max(1, min(-(-n // (2 * BLOCK)), 4 * _sm_count(), DOT_MAX_PARTIALS))


def dot(x, y, out, partials, stream=None) -> None:
    """out[0] = <x, y>, in two kernels: per-block partials, then one block finishes."""
    n = x.shape[0]
    nparts = dot_partials(n)
    k1 = get_kernel("blas1", "dot_partial<{T}>", x.dtype)
    k2 = get_kernel("blas1", "dot_final<{T}>", x.dtype)
    k1((nparts,), (BLOCK,), (np.int32(n), x, y, partials), stream=stream)
    k2((1,), (BLOCK,), (np.int32(nparts), partials, out), stream=stream)


def axpy(alpha, x, y, sign=1.0, stream=None) -> None:
    """y += sign * alpha[0] * x (alpha a 1-element device array)."""
    n = x.shape[0]
    k = get_kernel("blas1", "axpy<{T}>", x.dtype)
    k((grid_for(n, 2 * BLOCK),), (BLOCK,), (np.int32(n), alpha, x.dtype.type(sign), x, y),
      stream=stream)


def xpay(x, alpha, y, stream=None) -> None:
    """y = x + alpha[0] * y (alpha a 1-element device array)."""
    n = x.shape[0]
    k = get_kernel("blas1", "xpay<{T}>", x.dtype)
    k((grid_for(n, 2 * BLOCK),), (BLOCK,), (np.int32(n), x, alpha, y), stream=stream)
