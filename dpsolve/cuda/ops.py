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


class LaunchCounter:
    """Counts kernel launches issued by the host through these wrappers (and cuBLAS calls that
    back ends report with ``add``)."""

    def __init__(self):
        self.count = 0

    def add(self, k=1):
        self.count += k


LAUNCHES = LaunchCounter()


_RECORDING = None


def launch(kernel, grid, block, args, stream=None, shared_mem=0):
    """Every host-side kernel launch of dpsolve goes through here, so launches can be counted
    (and, inside ``record()``, captured into a plan instead of issued)."""
    if _RECORDING is not None:
        _RECORDING.append((kernel, grid, block, args, shared_mem))
        return
    LAUNCHES.count += 1
    kernel(grid, block, args, stream=stream, shared_mem=shared_mem)


class Plan:
    """A recorded sequence of launches with fixed arguments, replayed as it is: the host-driven
    loops record one iteration once and replay it, so no Python wrapper runs per iteration."""

    def __init__(self):
        self.launches = []

    def run(self, stream) -> None:
        for kernel, grid, block, args, shared_mem in self.launches:
            kernel(grid, block, args, stream=stream, shared_mem=shared_mem)
        LAUNCHES.count += len(self.launches)

    def __len__(self):
        return len(self.launches)


class record:
    """``with ops.record() as plan: ...`` captures the launches of the wrapped ops calls."""

    def __enter__(self) -> Plan:
        global _RECORDING
        if _RECORDING is not None:
            raise RuntimeError("ops.record() does not nest")
        self.plan = Plan()
        _RECORDING = self.plan.launches
        return self.plan

    def __exit__(self, *exc):
        global _RECORDING
        _RECORDING = None
        return False


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
        launch(k, (grid_for(n),), (BLOCK,), (np.int32(n), c.indptr, c.indices, c.data, x, y), stream)
    elif A.format == "csr-vector":
        k = get_kernel("spmv", f"spmv_csr_vector<{{T}}, {A.width}>", A.dtype)
        c = A.csr
        launch(k, (grid_for(n * A.width),), (BLOCK,), (np.int32(n), c.indptr, c.indices, c.data, x, y),
               stream)
    else:
        k = get_kernel("spmv", "spmv_ell<{T}>", A.dtype)
        e = A.ell
        launch(k, (grid_for(n),), (BLOCK,), (np.int32(n), np.int32(e.width), e.indices, e.data, x, y),
               stream)


def dot_partials(n: int) -> int:
    """Number of stage-1 blocks (= partial sums) of the two-stage DOT for length n."""
    return max(1, min(-(-n // (2 * BLOCK)), 4 * _sm_count(), DOT_MAX_PARTIALS))


def dot(x, y, out, partials, stream=None) -> None:
    """out[0] = <x, y>, in two kernels: per-block partials, then one block finishes."""
    n = x.shape[0]
    nparts = dot_partials(n)
    k1 = get_kernel("blas1", "dot_partial<{T}>", x.dtype)
    k2 = get_kernel("blas1", "dot_final<{T}>", x.dtype)
    launch(k1, (nparts,), (BLOCK,), (np.int32(n), x, y, partials), stream)
    launch(k2, (1,), (BLOCK,), (np.int32(nparts), partials, out), stream)


def axpy(alpha, x, y, sign=1.0, stream=None) -> None:
    """y += sign * alpha[0] * x (alpha a 1-element device array)."""
    n = x.shape[0]
    k = get_kernel("blas1", "axpy<{T}>", x.dtype)
    launch(k, (grid_for(n, 2 * BLOCK),), (BLOCK,), (np.int32(n), alpha, x.dtype.type(sign), x, y),
           stream)


def xpay(x, alpha, y, stream=None) -> None:
    """y = x + alpha[0] * y (alpha a 1-element device array)."""
    n = x.shape[0]
    k = get_kernel("blas1", "xpay<{T}>", x.dtype)
    launch(k, (grid_for(n, 2 * BLOCK),), (BLOCK,), (np.int32(n), x, alpha, y), stream)


def scalar(source: str, name: str, dtype, *ptrs, stream=None) -> None:
    """A one-thread scalar kernel (cg_alpha, cg_beta, ...) over device scalar slots."""
    launch(get_kernel(source, name + "<{T}>", dtype), (1,), (1,), ptrs, stream)


def jacobi(inv_diag, r, z, stream=None) -> None:
    """z = D^-1 r."""
    n = r.shape[0]
    launch(get_kernel("cg", "jacobi<{T}>", r.dtype), (grid_for(n),), (BLOCK,),
           (np.int32(n), inv_diag, r, z), stream)


# --- variant "merge": the fused macro-kernels of cg_merge.cu (the paper's Figure 2) -------------

_NULL = np.uint64(0)     # a null device pointer, passed by value (8 zero bytes)


def merge_parts(n: int) -> int:
    """Blocks (= partial sums) of the merge kernels: one row/element per thread, enough blocks
    to fill the GPU, at most DOT_MAX_PARTIALS (the grid is fixed; rows are grid-strided)."""
    return max(1, min(-(-n // BLOCK), DOT_MAX_PARTIALS))


def merge_spmv_dot(A: DeviceMatrix, p, v, partials, stream=None) -> int:
    """{O1-O2a}: v = A p and per-block partials of <p, v> in partials[:nparts]; returns nparts.

    CSR-scalar and ELL: one fused kernel. CSR-vector: O1 and O2a cannot be merged (a group of
    lanes owns a row), so spmv() then blas1's dot_partial, two launches."""
    n = A.n
    if A.format == "csr-vector":
        spmv(A, p, v, stream)
        nparts = dot_partials(n)
        launch(get_kernel("blas1", "dot_partial<{T}>", A.dtype), (nparts,), (BLOCK,),
               (np.int32(n), p, v, partials), stream)
        return nparts
    nparts = merge_parts(n)
    if A.format == "csr-scalar":
        c = A.csr
        launch(get_kernel("cg_merge", "cg_spmv_dot_csr<{T}>", A.dtype), (nparts,), (BLOCK,),
               (np.int32(n), c.indptr, c.indices, c.data, p, v, partials), stream)
    else:
        e = A.ell
        launch(get_kernel("cg_merge", "cg_spmv_dot_ell<{T}>", A.dtype), (nparts,), (BLOCK,),
               (np.int32(n), np.int32(e.width), e.indices, e.data, p, v, partials), stream)
    return nparts


def merge_alpha(nparts: int, partials, sigma, pv, alpha, status, stream=None) -> None:
    """{O2b}: pv = sum(partials[:nparts]); alpha = sigma / pv (non-finite: status = 1, alpha = 0)."""
    launch(get_kernel("cg_merge", "cg_merge_alpha<{T}>", partials.dtype), (1,), (BLOCK,),
           (np.int32(nparts), partials, sigma, pv, alpha, status), stream)


def merge_update(alpha, p, v, x, r, inv_diag, z, partials, stream=None) -> int:
    """{O3-O4-O5a}: x += alpha p; r -= alpha v; z = D^-1 r (if inv_diag is not None); partials of
    <r, z> in partials[:nparts] and, preconditioned, of <r, r> in partials[DOT_MAX_PARTIALS:].
    Returns nparts."""
    n = r.shape[0]
    nparts = merge_parts(n)
    pre = inv_diag is not None
    launch(get_kernel("cg_merge", "cg_update_dot<{T}>", r.dtype), (nparts,), (BLOCK,),
           (np.int32(n), alpha, p, v, x, r,
            inv_diag if pre else _NULL, z if pre else _NULL,
            partials, partials[DOT_MAX_PARTIALS:] if pre else _NULL), stream)
    return nparts


def merge_beta(nparts: int, partials, preconditioned: bool, sigma, zeta, rr, beta, tau,
               stream=None) -> None:
    """{O5b-O6-O7-O9}: zeta = sum of the <r, z> partials, rr = the <r, r> ones (or zeta);
    beta = zeta / sigma; sigma = zeta; tau = sqrt(|rr|). ``zeta`` and ``rr`` are distinct slots."""
    launch(get_kernel("cg_merge", "cg_merge_beta<{T}>", partials.dtype), (1,), (BLOCK,),
           (np.int32(nparts), partials,
            partials[DOT_MAX_PARTIALS:] if preconditioned else _NULL,
            sigma, zeta, rr, beta, tau), stream)


# --- variant "dynamic" (cg_dynamic.cu): one host launch starts the whole CDP2 tail-launch chain ---

DYNAMIC_LAUNCHES_PER_ITER = 2      # cg_dyn_spmv + cg_dyn_update, tail-launched by the device
DYNAMIC_STATUS = 8                 # doubles: info, iterations, state, launch error, tau
DYNAMIC_DONE, DYNAMIC_LAUNCH_FAILED = 1.0, 2.0
_DYN_NULL = np.uint64(0)           # a null device pointer, passed by value


def dynamic_code(A: DeviceMatrix) -> int:
    """The W template argument of cg_dynamic.cu: 0 ELL, 1 CSR-scalar, else the CSR-vector width."""
    if A.format == "ell":
        return 0
    if A.format == "csr-scalar":
        return 1
    return A.width


def dynamic_grid(A: DeviceMatrix) -> int:
    """Blocks of every kernel of the dynamic chain (= DOT partials): covers the rows (times the
    CSR-vector width), at most 4 per SM and DOT_MAX_PARTIALS."""
    work = A.n * (A.width if A.format == "csr-vector" else 1)
    return max(1, min(-(-work // BLOCK), 4 * _sm_count(), DOT_MAX_PARTIALS))


def cg_dynamic(A: DeviceMatrix, b, inv_diag, x, r, z, p0, p1, v, partials, status, atol: float,
               maxiter: int, hist=None, stream=None) -> int:
    """Launch cg_dyn_start: the host's only launch of a dynamic CG solve; the device chains the
    rest and writes the result to ``status`` (DYNAMIC_STATUS doubles). ``partials`` holds
    3 * DOT_MAX_PARTIALS values. Returns the grid size."""
    n = A.n
    grid = dynamic_grid(A)
    k = get_kernel("cg_dynamic", f"cg_dyn_start<{{T}}, {dynamic_code(A)}>", A.dtype)
    if A.format == "ell":
        width, indptr, indices, data = A.ell.width, _DYN_NULL, A.ell.indices, A.ell.data
    else:
        width, indptr, indices, data = 0, A.csr.indptr, A.csr.indices, A.csr.data
    pre = inv_diag is not None
    m = DOT_MAX_PARTIALS
    launch(k, (grid,), (BLOCK,),
           (np.int32(n), np.int32(width), np.int32(min(maxiter, 2**31 - 1)), np.float64(atol),
            indptr, indices, data, b, inv_diag if pre else _DYN_NULL, x, r, z if pre else r, p0, p1,
            v, partials[:m], partials[m:2 * m], partials[2 * m:], status,
            hist if hist is not None else _DYN_NULL), stream)
    return grid
