"""Host wrappers of the kernels: one function per kernel family, each computing its own grid.

Arguments are CuPy arrays already on the device; nothing here copies to or from the host. The
common ones are also methods of the executor (``dpsolve/cuda/executor.py``), which counts and
records the launches made here.
"""
from __future__ import annotations

import numpy as np

from ..formats import row_stats
from . import _loader, abi
from ._loader import get_kernel
# the matrices, one class per format (device_matrix.py), importable from here as before
from .device_matrix import (UNFUSED_SPMV as UNFUSED_SPMV, DeviceMatrix as DeviceMatrix,
                            OperatorMatrix as OperatorMatrix,
                            adaptive_descriptor as adaptive_descriptor,
                            vector_width as vector_width)
from .executor import host_call, launch

BLOCK = abi.DPS_BLOCK  # threads per block of every kernel dpsolve launches
DOT_MAX_PARTIALS = 1024


# launches are counted on (or recorded into) the executor active on this thread
# (dpsolve/cuda/executor.py): every wrapper here launches through ``launch``


def real_scalar(dtype, value):
    """``value`` as a NumPy scalar of the real type of ``dtype`` (float64 for complex128): the
    kernels' real-valued arguments, such as breakdown tolerances, take this type."""
    return np.finfo(dtype).dtype.type(value)


def _sm_count() -> int:
    from .._device import status
    return status().multiprocessors or 1


def grid_for(work_items: int, per_block: int = BLOCK, waves: int = 32) -> int:
    """Blocks for a grid-stride kernel: enough to cover the work, at most `waves` per SM."""
    return max(1, min(-(-work_items // per_block), waves * _sm_count()))


def spmv(A: DeviceMatrix, x, y, stream=None, defines: tuple = ()) -> None:
    """y = A x (A a DeviceMatrix, or an OperatorMatrix: the user's function). ``defines``: compile
    options of a spmv.cu variant (scripts/bench-spmv --loads); none in the solvers."""
    if A.n == 0:
        return
    kernel = A.spmv_launch(grid_for, _sm_count)
    if kernel is None:                        # an operator: the user's Python function
        host_call(lambda: A.apply(x, y, stream))
        return
    expression, grid, args = kernel
    launch(get_kernel("spmv", expression, A.dtype, defines=defines), (grid,), (BLOCK,),
           (*args, x, y), stream)


def ell_fill(csr, width: int, indices, data, stream=None) -> None:
    """The ELL layout of ``csr`` (a dpsolve CSR on the device) into ``indices`` and ``data``
    (width * n each, column-major: formats/ell.py), padding -1 and 0 (spmv.cu's ell_fill)."""
    if csr.n and width:
        launch(get_kernel("spmv", "ell_fill<{T}>", csr.dtype), (grid_for(csr.n),), (BLOCK,),
               (np.int32(csr.n), np.int32(width), csr.indptr, csr.indices, csr.data, indices,
                data), stream)


def dot_partials(n: int) -> int:
    """Number of stage-1 blocks (= partial sums) of the two-stage DOT for length n."""
    return max(1, min(-(-n // (2 * BLOCK)), 4 * _sm_count(), DOT_MAX_PARTIALS))


def _two_stage(stage1, stage2, x, y, out, partials, stream) -> None:
    """The two-stage reduction over vectors of x's length: ``stage1`` (source, name) writes one
    partial per block from (n, x, y, partials), then ``stage2`` finishes them in one block into
    out[0]. The DOT, the norm and the true residual's norm are this with their own kernels."""
    n = x.shape[0]
    nparts = dot_partials(n)
    launch(get_kernel(stage1[0], stage1[1], x.dtype), (nparts,), (BLOCK,),
           (np.int32(n), x, y, partials), stream)
    launch(get_kernel(stage2[0], stage2[1], x.dtype), (1,), (BLOCK,),
           (np.int32(nparts), partials, out), stream)


def dot(x, y, out, partials, stream=None) -> None:
    """out[0] = <x, y>, in two kernels: per-block partials, then one block finishes."""
    _two_stage(("blas1", "dot_partial<{T}>"), ("blas1", "dot_final<{T}>"), x, y, out, partials,
               stream)


def resid_norm2(b, v, out, partials, stream=None) -> None:
    """out[0] = ||b - v||^2 (check.cu's resid_partial, then dot_final): the true residual's
    norm once v = A x."""
    _two_stage(("check", "resid_partial<{T}>"), ("blas1", "dot_final<{T}>"), b, v, out,
               partials, stream)


def fingerprint(arrays, stream=None) -> tuple[int, int]:
    """Two 64-bit sums over the words of device ``arrays`` (check.cu's fingerprint), each array
    salted by its position: a key for a cache of prepared systems. One host wait.

    On a ``stream`` other than the current one (dpsolve's own, non-blocking), the sums first wait
    for the work queued on the current stream (the arrays' uploads), and their accumulator is
    zeroed on ``stream`` itself: zeroed on the current stream, it could be cleared after the sums
    had begun -- a wrong key, a cached graph rebuilt (seen under a loaded whole-suite run)."""
    import contextlib

    import cupy
    if stream is not None:
        ready = cupy.cuda.Event(disable_timing=True)
        ready.record(cupy.cuda.get_current_stream())
        stream.wait_event(ready)
    with stream if stream is not None else contextlib.nullcontext():
        out = cupy.zeros(2, np.uint64)
    k = get_kernel("check", "fingerprint", np.float64)
    for salt, a in enumerate(arrays):
        words = a.view(np.uint8).reshape(-1)
        if words.size % 4:
            raise ValueError("fingerprint needs arrays of a whole number of 32-bit words")
        words = words.view(np.uint32)
        launch(k, (grid_for(words.size),), (BLOCK,),
               (np.int64(words.size), words, np.uint64((salt + 1) * 0x51ED27), out), stream)
    h = out.get(stream=stream)
    return int(h[0]), int(h[1])


# --- whole-array reductions of the set-ups (check.cu): one kernel each whatever the size ------
# (CuPy's own compile a kernel per size class on first use: seconds each on a new machine)

def _reduce(name: str, x, out, stream, *extra) -> None:
    n = int(x.size)
    if n:
        import cupy
        x = cupy.ascontiguousarray(x).reshape(-1)
        dtype = np.float64 if name == "count_true" else x.dtype
        launch(get_kernel("check", name, dtype), (grid_for(n),), (BLOCK,),
               (np.int64(n), x, *extra, out), stream)


def _slot(dtype, stream):
    import contextlib

    import cupy
    with stream if stream is not None else contextlib.nullcontext():
        return cupy.zeros(1, dtype)


def count_true(mask, out=None, stream=None):
    """The number of True entries of a CuPy bool array of fewer than 2^31 entries. With ``out``
    (an int32 device slot) it is added there and nothing is read back (None); else returned
    (one host wait)."""
    if mask.dtype != np.bool_:
        raise TypeError(f"count_true takes a bool array, got {mask.dtype}")
    slot = _slot(np.int32, stream) if out is None else out
    _reduce("count_true", mask, slot, stream)
    return None if out is not None else int(slot.get(stream=stream)[0])


def any_zero(x, out=None, stream=None):
    """Whether the CuPy array ``x`` stores a zero. With ``out`` (an int32 device slot, zeroed by
    the caller) 1 is written there if so and nothing is read back (None)."""
    slot = _slot(np.int32, stream) if out is None else out
    _reduce("any_of<{T}>", x, slot, stream, np.int32(0))
    return None if out is not None else bool(slot.get(stream=stream)[0])


def all_finite(x, stream=None) -> bool:
    """Whether every entry of the CuPy array ``x`` is finite (one host wait)."""
    if np.dtype(x.dtype).kind in "biu":
        return True
    slot = _slot(np.int32, stream)
    _reduce("any_of<{T}>", x, slot, stream, np.int32(1))
    return not bool(slot.get(stream=stream)[0])


def max_abs(x, out=None, stream=None):
    """max |x_i| of a CuPy array as a float (0.0 when empty; NaN where x holds one). With ``out``
    (a zeroed uint64 device slot, shared by several arrays) the maximum is folded in there and
    nothing is read back (None): :func:`max_abs_value` reads it."""
    slot = _slot(np.uint64, stream) if out is None else out
    _reduce("max_abs<{T}>", x, slot, stream)
    return None if out is not None else max_abs_value(slot, stream)


def max_abs_value(slot, stream=None) -> float:
    """The float in a :func:`max_abs` slot (one host wait)."""
    return float(slot.get(stream=stream).view(np.float64)[0])


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


def scalar(source: str, name: str, dtype, *ptrs, stream=None, block: bool = False) -> None:
    """A one-thread scalar kernel (cg_alpha, cg_beta, ...) over device scalar slots; with
    ``block``, one block (the rho tests, which may confirm rho with dps::dot_accurate)."""
    launch(get_kernel(source, name + "<{T}>", dtype), (1,), (BLOCK if block else 1,), ptrs, stream)


def dot_accurate(x, y, out, stream=None) -> None:
    """out[0] = <x, y>, accurate (Dot2: as if summed in twice the working precision), by one
    block: the confirmation of a breakdown test that failed on a fast dot (variant cublas)."""
    launch(get_kernel("blas1", "dot_accurate<{T}>", x.dtype), (1,), (BLOCK,),
           (np.int32(x.shape[0]), x, y, out), stream)


def pointwise(pc, r, z, adjoint: bool = False, stream=None) -> None:
    """z = M r (or M^H r) of a pointwise preconditioner, given by its PrecondArgs record ``pc``
    (dpsolve/precond: the stream face of Jacobi)."""
    n = r.shape[0]
    name = "pointwise_apply_adjoint<{T}>" if adjoint else "pointwise_apply<{T}>"
    launch(get_kernel("precond", name, r.dtype), (grid_for(n),), (BLOCK,),
           (np.int32(n), pc, r, z), stream)


def active(pc) -> bool:
    """Whether a PrecondArgs record applies a preconditioner (dps::Pointwise::active)."""
    return int(pc["inv_diag"]) != 0


# --- variant "merge": the fused macro-kernels of cg_merge.cu (the paper's Figure 2) -------------

_NULL = np.uint64(0)     # a null device pointer, passed by value (8 zero bytes)
# UNFUSED_SPMV (device_matrix.py): the formats with no fused SpMV + DOT kernel (fused_kernel None)


def merge_parts(n: int) -> int:
    """Blocks (= partial sums) of the merge kernels: one row/element per thread, enough blocks
    to fill the GPU, at most DOT_MAX_PARTIALS (the grid is fixed; rows are grid-strided)."""
    return max(1, min(-(-n // BLOCK), DOT_MAX_PARTIALS))


def _spmv_dot(source: str, A: DeviceMatrix, x, y, w, partials, stream, args) -> int:
    """y = A x and per-block partials of <w, y> in partials[:nparts]; returns nparts. ``source``'s
    fused ``*_spmv_dot`` kernel for A's row mapping, taking (n, A's merge arguments, *args,
    partials); for the UNFUSED_SPMV formats, spmv() then blas1's dot_partial (two launches)."""
    kernel = A.fused_kernel(source.replace("_merge", "_spmv_dot"))
    if kernel is None:
        spmv(A, x, y, stream)
        return dot_partial(w, y, partials, stream)
    nparts = merge_parts(A.n)
    launch(get_kernel(source, kernel, A.dtype), (nparts,), (BLOCK,),
           (np.int32(A.n), *A.merge_args(), *args, partials), stream)
    return nparts


def merge_spmv_dot(A: DeviceMatrix, p, v, partials, stream=None) -> int:
    """{O1-O2a}: v = A p and per-block partials of <p, v> in partials[:nparts]; returns nparts.

    CSR-scalar and ELL: one fused kernel. CSR-vector: O1 and O2a cannot be merged (a group of
    lanes owns a row), nor can an operator's SpMV: spmv() then blas1's dot_partial."""
    return _spmv_dot("cg_merge", A, p, v, p, partials, stream, (p, v))


def merge_alpha(nparts: int, partials, sigma, pv, alpha, status, stream=None) -> None:
    """{O2b}: pv = sum(partials[:nparts]); alpha = sigma / pv (non-finite: status = 1,
    alpha = 0)."""
    launch(get_kernel("cg_merge", "cg_merge_alpha<{T}>", partials.dtype), (1,), (BLOCK,),
           (np.int32(nparts), partials, sigma, pv, alpha, status), stream)


def merge_update(alpha, p, v, x, r, pc, z, partials, stream=None) -> int:
    """{O3-O4-O5a}: x += alpha p; r -= alpha v; z = M r (if ``pc``, a PrecondArgs record, is
    active); partials of
    <r, z> in partials[:nparts] and, preconditioned, of <r, r> in partials[DOT_MAX_PARTIALS:].
    Returns nparts."""
    n = r.shape[0]
    nparts = merge_parts(n)
    pre = active(pc)
    launch(get_kernel("cg_merge", "cg_update_dot<{T}>", r.dtype), (nparts,), (BLOCK,),
           (np.int32(n), alpha, p, v, x, r, pc, z if pre else _NULL,
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
DYNAMIC_STATUS = abi.DYN_STATUS_WORDS   # doubles: info, iterations, state, launch error, tau
DYNAMIC_DONE, DYNAMIC_LAUNCH_FAILED = abi.DYN_DONE, abi.DYN_LAUNCH_FAILED


def dynamic_code(A: DeviceMatrix) -> int:
    """The W template argument of the dynamic / persistent kernels: 0 ELL, 1 CSR-scalar, 64
    csr-adaptive, else the CSR-vector width (the matrix's ``dynamic_code``)."""
    return A.dynamic_code


def dynamic_grid(A: DeviceMatrix) -> int:
    """Blocks of every kernel of the dynamic chain (= DOT partials): covers the rows (times the
    CSR-vector width), at most 4 per SM and DOT_MAX_PARTIALS."""
    work = A.work
    return max(1, min(-(-work // BLOCK), 4 * _sm_count(), DOT_MAX_PARTIALS))


def _dynamic_launch(source: str, kernel: str, A: DeviceMatrix, args, stream) -> int:
    """Build ``kernel``<T, W> of ``source`` for A's format and launch it once on the dynamic
    chain's grid (args: the kernel's arguments). Returns the grid size."""
    grid = dynamic_grid(A)
    launch(get_kernel(source, f"{kernel}<{{T}}, {dynamic_code(A)}>", A.dtype), (grid,), (BLOCK,),
           args, stream)
    return grid


# --- variant "dynamic", BiCG and BiCGStab (bicg_dynamic.cu, bicgstab_dynamic.cu) ----------------

BICG_DYNAMIC_LAUNCHES_PER_ITER = 2       # bicg_dyn_spmv (A p and A^H p~ together) + bicg_dyn_update
BICGSTAB_DYNAMIC_LAUNCHES_PER_ITER = 3   # bicgstab_dyn_v + bicgstab_dyn_t + bicgstab_dyn_update
DYNAMIC_PARTIAL_SETS = 6                 # DOT partial arrays the dynamic chains need at most


# adaptive_descriptor (csr-adaptive's row bins as dynamic.cuh reads them): device_matrix.py


def _dyn_matrix(A: DeviceMatrix):
    """(ELL width or 0, indptr or null, indices, data, csr-adaptive's bin descriptor or null) of a
    matrix, as the dynamic chains and the persistent kernels take them (the matrix's
    ``dyn_args``)."""
    return A.dyn_args()


_PARTS: dict = {}


def _dyn_parts(partials, k: int):
    """k consecutive partial arrays of DOT_MAX_PARTIALS values each, carved out of ``partials``
    (the views are made once per buffer: a CuPy slice costs microseconds)."""
    key = (id(partials), k)
    hit = _PARTS.get(key)
    if hit is not None and hit[0] is partials:
        return hit[1]
    m = DOT_MAX_PARTIALS
    if partials.size < k * m:
        raise ValueError(f"the dynamic chain needs {k} x {m} partials, got {partials.size}")
    parts = [partials[i * m:(i + 1) * m] for i in range(k)]
    if len(_PARTS) > 64:
        _PARTS.clear()
    _PARTS[key] = (partials, parts)
    return parts


# --- the device-driven solves' one host launch: variant "dynamic" launches the first kernel of a
# CDP2 chain (<method>_dynamic.cu's <method>_dyn_start), variant "persistent" the cooperative
# kernel (<method>_persistent.cu); both take the same arguments, and write the result to
# ``status`` (DYNAMIC_STATUS doubles) and, when ``hist`` is given (maxiter + 1 entries of the real
# dtype), the residual norms. Each returns the grid size.

def _device_launch(method: str, persistent: bool, A: DeviceMatrix, args, stream) -> int:
    if persistent and method == "cg":
        kernel, grid, block, shared = persistent_cg_kernel(A)
        launch(kernel, (grid,), (block,), args, stream, shared_mem=shared)
        return grid
    if persistent:
        return _persistent_launch(f"{method}_persistent", f"{method}_persistent", A, args, stream)
    return _dynamic_launch(f"{method}_dynamic", f"{method}_dyn_start", A, args, stream)


def _maxiter_arg(maxiter: int, persistent: bool):
    """maxiter as the kernels' int (the persistent loops' counter is capped one lower)."""
    return np.int32(min(maxiter, 2**31 - (2 if persistent else 1)))


def cg_args(A: DeviceMatrix, b, pc, x, r, z, p0, p1, v, partials, status, atol: float,
            maxiter: int, hist=None, persistent: bool = False, flags: int = 0,
            rtol: float = 0.0, guard=None):
    """The CgArgs record of a device-driven CG solve (``cg_device``'s arguments; ``flags``,
    ``rtol`` and ``guard``: abi.cuh's DPS_FAST_*, the one-launch calls of dpsolve/_fast.py)."""
    width, indptr, indices, data, bins = _dyn_matrix(A)
    part_pv, part_rz, part_rr = _dyn_parts(partials, 3)
    return abi.pack("CgArgs", n=A.n, width=width, maxiter=_maxiter_arg(maxiter, persistent),
                    flags=flags, atol=atol, rtol=rtol, indptr=indptr, indices=indices,
                    data=data, b=b, pc=pc, x=x, r=r, z=z if active(pc) else r, p0=p0, p1=p1,
                    v=v, part_pv=part_pv, part_rz=part_rz, part_rr=part_rr, status=status,
                    hist=hist, bins=bins, guard=guard)


def cg_device(A: DeviceMatrix, b, pc, x, r, z, p0, p1, v, partials, status, atol: float,
              maxiter: int, hist=None, stream=None, persistent: bool = False) -> int:
    """A device-driven CG solve. ``pc``: the PrecondArgs record of a pointwise preconditioner
    (inactive: none). ``partials`` holds 3 * DOT_MAX_PARTIALS values."""
    args = cg_args(A, b, pc, x, r, z, p0, p1, v, partials, status, atol, maxiter, hist,
                   persistent)
    return _device_launch("cg", persistent, A, (args,), stream)


def bicg_device(A: DeviceMatrix, AH: DeviceMatrix, b, pc, x, r, rt, z, zt, p0, p1, pt0, pt1,
                q, qt, partials, status, atol: float, maxiter: int, hist=None, stream=None,
                persistent: bool = False) -> int:
    """A device-driven BiCG solve (A^H in ``AH``, same format and CSR-vector width as A). ``z``,
    ``zt`` are ignored without a preconditioner. ``partials`` holds 3 * DOT_MAX_PARTIALS values."""
    if AH.format != A.format or AH.n != A.n or dynamic_code(AH) != dynamic_code(A):
        raise ValueError(f"bicg ({'persistent' if persistent else 'dynamic'}) needs A^H in the "
                         "format (and CSR-vector width) of A")
    width, indptr, indices, data, bins = _dyn_matrix(A)
    h_width, h_indptr, h_indices, h_data, h_bins = _dyn_matrix(AH)
    pre = active(pc)
    part_rho, part_rr, part_rv = _dyn_parts(partials, 3)
    args = abi.pack("BicgArgs", n=A.n, width=width, width_h=h_width,
                    maxiter=_maxiter_arg(maxiter, persistent), atol=atol, indptr=indptr,
                    indices=indices, data=data, h_indptr=h_indptr, h_indices=h_indices,
                    h_data=h_data, b=b, pc=pc, x=x, r=r, rt=rt,
                    z=z if pre else r, zt=zt if pre else rt, p0=p0, p1=p1, pt0=pt0, pt1=pt1, q=q,
                    qt=qt, part_rho=part_rho, part_rr=part_rr, part_rv=part_rv, status=status,
                    hist=hist, bins=bins, h_bins=h_bins)
    return _device_launch("bicg", persistent, A, (args,), stream)


def bicgstab_device(A: DeviceMatrix, b, pc, x, r, rt, p0, p1, v0, v1, s, t, partials, status,
                    atol: float, maxiter: int, hist=None, stream=None,
                    persistent: bool = False) -> int:
    """A device-driven BiCGStab solve. ``partials`` holds 6 * DOT_MAX_PARTIALS values."""
    width, indptr, indices, data, bins = _dyn_matrix(A)
    part_rho, part_rr, part_rv, part_ss, part_ts, part_tt = _dyn_parts(partials, 6)
    args = abi.pack("StabArgs", n=A.n, width=width, maxiter=_maxiter_arg(maxiter, persistent),
                    atol=atol, indptr=indptr, indices=indices, data=data, b=b, pc=pc,
                    x=x, r=r, rt=rt, p0=p0, p1=p1, v0=v0, v1=v1, s=s, t=t, part_rho=part_rho,
                    part_rr=part_rr, part_rv=part_rv, part_ss=part_ss, part_ts=part_ts,
                    part_tt=part_tt, status=status, hist=hist, bins=bins)
    return _device_launch("bicgstab", persistent, A, (args,), stream)


# --- BiCG / BiCGStab of the host-driven variants: `cuda` (krylov.cu) and `merge` ----------------
# (bicg_merge.cu, bicgstab_merge.cu). Status-guarded kernels take the status slot and do nothing
# once it is non-zero (a breakdown, or BiCGStab's mid-iteration convergence).

def axpy_guarded(status, alpha, x, y, sign=1.0, conj=False, stream=None) -> None:
    """y += sign * a x with a = alpha[0] (conj(alpha[0]) when ``conj``); nothing once
    status[0] != 0 (``status`` None: never skipped)."""
    n = x.shape[0]
    k = get_kernel("krylov", "bi_axpy<{T}>", x.dtype)
    launch(k, (grid_for(n, 2 * BLOCK),), (BLOCK,),
           (np.int32(n), status if status is not None else _NULL, alpha, x.dtype.type(sign),
            np.int32(bool(conj)), x, y), stream)


def xpay_conj(x, alpha, y, conj=True, stream=None) -> None:
    """y = x + a y with a = conj(alpha[0]) (alpha[0] when not ``conj``): BiCG's p~ update."""
    n = x.shape[0]
    k = get_kernel("krylov", "bi_xpay<{T}>", x.dtype)
    launch(k, (grid_for(n, 2 * BLOCK),), (BLOCK,),
           (np.int32(n), x, alpha, np.int32(bool(conj)), y), stream)


def bicgstab_p(r, beta, omega, v, p, stream=None) -> None:
    """p = r + beta[0] (p - omega[0] v)."""
    n = r.shape[0]
    launch(get_kernel("krylov", "bicgstab_p<{T}>", r.dtype), (grid_for(n),), (BLOCK,),
           (np.int32(n), r, beta, omega, v, p), stream)


def nrm2(x, out, partials, stream=None) -> None:
    """out[0] = ||x||, in two kernels: blas1's dot_partial(x, x), then krylov's nrm2_final."""
    _two_stage(("blas1", "dot_partial<{T}>"), ("krylov", "nrm2_final<{T}>"), x, x, out, partials,
               stream)


def nrm2_final(nparts: int, partials, out, stream=None) -> None:
    """out[0] = sqrt(|sum of partials[:nparts]|): stage 2 of a norm whose partials a fused
    kernel left (the merge variant's CG with a general preconditioner: cg_update_dot's <r, r>)."""
    launch(get_kernel("krylov", "nrm2_final<{T}>", partials.dtype), (1,), (BLOCK,),
           (np.int32(nparts), partials, out), stream)


def dot_partial(x, y, partials, stream=None) -> int:
    """Stage 1 of <x, y> alone: per-block partials in partials[:nparts]; returns nparts (the set-up
    of the merge variant's BiCG / BiCGStab finishes them in a fused one-block kernel)."""
    n = x.shape[0]
    nparts = dot_partials(n)
    launch(get_kernel("blas1", "dot_partial<{T}>", x.dtype), (nparts,), (BLOCK,),
           (np.int32(n), x, y, partials), stream)
    return nparts


def bicg_merge_p(pending, status, beta, z, zt, p, pt, stream=None) -> None:
    """{rho check, p, p~}: status = pending[0] if that is non-zero (and nothing else); else
    p = z + beta p, p~ = z~ + conj(beta) p~."""
    n = p.shape[0]
    launch(get_kernel("bicg_merge", "bicg_merge_p<{T}>", p.dtype), (merge_parts(n),), (BLOCK,),
           (np.int32(n), pending, status, beta, z, zt, p, pt), stream)


def bicg_merge_spmv2_dot(A: DeviceMatrix, AH: DeviceMatrix, p, pt, q, qt, partials,
                         stream=None) -> int:
    """{SpMV x2, DOT_ini}: q = A p, q~ = A^H p~ and per-block partials of <p~, q> in
    partials[:nparts]; returns nparts. CSR-vector: the two SpMVs in one kernel, then blas1's
    dot_partial (two launches)."""
    n = A.n
    kernel = A.fused_kernel("bicg_spmv2_dot")
    if kernel is not None:
        nparts = merge_parts(n)
        launch(get_kernel("bicg_merge", kernel, A.dtype), (nparts,), (BLOCK,),
               (np.int32(n), *A.merge_args(), *AH.merge_args(), p, pt, q, qt, partials), stream)
        return nparts
    pair = A.spmv2_kernel()
    if pair is None:           # A and A^H one after the other, then the DOT
        spmv(A, p, q, stream)
        spmv(AH, pt, qt, stream)
        return dot_partial(pt, q, partials, stream)
    if AH.width != A.width:
        raise ValueError("A and A^H need the same CSR-vector width")
    launch(get_kernel("bicg_merge", pair, A.dtype), (grid_for(A.work),), (BLOCK,),
           (np.int32(n), *A.merge_args(), *AH.merge_args(), p, pt, q, qt), stream)
    nparts = dot_partials(n)
    launch(get_kernel("blas1", "dot_partial<{T}>", A.dtype), (nparts,), (BLOCK,),
           (np.int32(n), pt, q, partials), stream)
    return nparts


def bicg_merge_alpha(nparts: int, partials, a, b, rho, rv, alpha, status, stream=None) -> None:
    """{DOT_fin, alpha}: rv = sum(partials[:nparts]) (<a, b>); rv == 0, confirmed with the
    accurate <a, b> -> status = -11; else alpha = rho / rv. Nothing once status != 0. (BiCG's
    <p~, q> and BiCGStab's <r~, v>.)"""
    launch(get_kernel("bicg_merge", "bicg_merge_alpha<{T}>", partials.dtype), (1,), (BLOCK,),
           (np.int32(nparts), partials, np.int32(a.shape[0]), a, b, rho, rv, alpha, status),
           stream)


def bicg_merge_update(status, alpha, p, q, qt, x, r, rt, pc, z, zt, part_rho, part_rr,
                      stream=None) -> int:
    """{x, r, r~, psolve, DOT_ini x2}: x += alpha p; r -= alpha q; r~ -= conj(alpha) q~;
    z = M r, z~ = M^H r~ when ``pc`` (PrecondArgs) is active; partials of <r~, z> and <r, r>.
    Nothing once status != 0. Returns nparts."""
    n = r.shape[0]
    nparts = merge_parts(n)
    pre = active(pc)
    launch(get_kernel("bicg_merge", "bicg_merge_update<{T}>", r.dtype), (nparts,), (BLOCK,),
           (np.int32(n), status, alpha, p, q, qt, x, r, rt,
            pc, z if pre else _NULL, zt if pre else _NULL,
            part_rho, part_rr), stream)
    return nparts


def bicg_merge_rho(nparts: int, part_rho, part_rr, first: bool, tol, rt, z, rho, beta, tau,
                   pending, status, stream=None) -> None:
    """{DOT_fin x2, tau, beta, rho check}: rho' and rr from the partials; tau = sqrt|rr|;
    pending = -10 if |rho'| < tol, confirmed with the accurate <rt, z>; beta = rho' / rho (0 when
    ``first``); rho = rho'. ``first`` (set-up) also sets status = 0."""
    dt = part_rho.dtype
    launch(get_kernel("bicg_merge", "bicg_merge_rho<{T}>", dt), (1,), (BLOCK,),
           (np.int32(nparts), part_rho, part_rr, np.int32(bool(first)), real_scalar(dt, tol),
            np.int32(rt.shape[0]), rt, z, rho, beta, tau, pending, status), stream)


def bicgstab_merge_p(pending, status, beta, omega, r, v, p, pc, phat, stream=None) -> None:
    """{checks, p, psolve}: status = pending[0] if non-zero (and nothing else); else
    p = r + beta (p - omega v) and, when ``pc`` (PrecondArgs) is active, p^ = M p."""
    n = p.shape[0]
    pre = active(pc)
    launch(get_kernel("bicgstab_merge", "bicgstab_merge_p<{T}>", p.dtype), (merge_parts(n),),
           (BLOCK,), (np.int32(n), pending, status, beta, omega, r, v, p,
                      pc, phat if pre else _NULL), stream)


def bicgstab_merge_spmv_dot(A: DeviceMatrix, x, y, w, partials, stream=None) -> int:
    """{SpMV, DOT_ini}: y = A x and per-block partials of <w, y>; returns nparts. UNFUSED_SPMV
    formats: spmv() then blas1's dot_partial (two launches)."""
    return _spmv_dot("bicgstab_merge", A, x, y, w, partials, stream, (x, y, w))


def bicgstab_merge_s(status, alpha, p, v, x, r, pc, phat, shat, part_ss, stream=None) -> int:
    """{x, s, psolve, DOT_ini}: x += alpha p^ (p^ = p when ``pc`` is inactive); s = r - alpha v,
    written over r; s^ = M s; partials of <s, s>. Nothing once status != 0. Returns nparts."""
    n = r.shape[0]
    nparts = merge_parts(n)
    pre = active(pc)
    launch(get_kernel("bicgstab_merge", "bicgstab_merge_s<{T}>", r.dtype), (nparts,), (BLOCK,),
           (np.int32(n), status, alpha, p, phat if pre else _NULL, v, x, r,
            pc, shat if pre else _NULL, part_ss), stream)
    return nparts


def bicgstab_merge_spmv_dot2(A: DeviceMatrix, x, t, s, part_ts, part_tt, stream=None) -> int:
    """{SpMV, DOT_ini x2}: t = A x and partials of <t, s> and <t, t>; returns nparts.
    UNFUSED_SPMV formats: spmv() then bicgstab_dot2_partial (two launches)."""
    n = A.n
    nparts = merge_parts(n)
    kernel = A.fused_kernel("bicgstab_spmv_dot2")
    if kernel is None:
        spmv(A, x, t, stream)
        merge_dot2_partial(t, s, part_ts, part_tt, stream)
    else:
        launch(get_kernel("bicgstab_merge", kernel, A.dtype), (nparts,), (BLOCK,),
               (np.int32(n), *A.merge_args(), x, t, s, part_ts, part_tt), stream)
    return nparts


def merge_dot2_partial(t, s, part_ts, part_tt, stream=None) -> int:
    """Per-block partials of <t, s> and <t, t> in the merge kernels' layout (merge_parts(n)
    blocks), as one kernel; returns nparts. (BiCGStab's CSR-vector path, and the merge variant's
    DOTs after a general preconditioner.)"""
    n = t.shape[0]
    nparts = merge_parts(n)
    launch(get_kernel("bicgstab_merge", "bicgstab_dot2_partial<{T}>", t.dtype), (nparts,), (BLOCK,),
           (np.int32(n), t, s, part_ts, part_tt), stream)
    return nparts


def bicgstab_merge_omega(nparts_s: int, part_ss, nparts_t: int, part_ts, part_tt, atol, tol, t,
                         s, omega, status, stream=None) -> None:
    """{DOT_fin x3, ||s|| test, omega}: ||s|| < atol[0] -> status = 2; else omega = <t,s> / <t,t>
    (<t, s> confirmed with the accurate sum when |omega| < tol). Nothing once status != 0.
    ``atol`` is a float64 device array (read when the kernel runs, so a captured graph serves any
    tolerance)."""
    dt = part_ss.dtype
    launch(get_kernel("bicgstab_merge", "bicgstab_merge_omega<{T}>", dt), (1,), (BLOCK,),
           (np.int32(nparts_s), part_ss, np.int32(nparts_t), part_ts, part_tt, atol,
            real_scalar(dt, tol), np.int32(t.shape[0]), t, s, omega, status), stream)


def bicgstab_merge_r(status, omega, shat, t, x, r, rt, part_rho, part_rr, stream=None) -> int:
    """{x, r, DOT_ini x2}: x += omega s^ (s^ = s, held in r, when shat is None); r = s - omega t;
    partials of <r~, r> and <r, r>. Nothing once status != 0. Returns nparts."""
    n = r.shape[0]
    nparts = merge_parts(n)
    launch(get_kernel("bicgstab_merge", "bicgstab_merge_r<{T}>", r.dtype), (nparts,), (BLOCK,),
           (np.int32(n), status, omega, shat if shat is not None else _NULL, t, x, r, rt,
            part_rho, part_rr), stream)
    return nparts


def bicgstab_merge_rho(nparts: int, part_rho, part_rr, first: bool, tol, rt, r, rho, alpha, omega,
                       beta, tau, pending, status, stream=None) -> None:
    """{DOT_fin x2, tau, beta, checks}: rho', rr from the partials; tau = sqrt|rr|; pending = -10
    (|rho'| < tol, confirmed with the accurate <rt, r>) or -11 (|omega| < tol, not ``first``);
    beta = (rho'/rho) (alpha/omega); rho = rho'. ``first`` (set-up): status = 0, beta = 0,
    omega = 0, only the rho test."""
    dt = part_rho.dtype
    launch(get_kernel("bicgstab_merge", "bicgstab_merge_rho<{T}>", dt), (1,), (BLOCK,),
           (np.int32(nparts), part_rho, part_rr, np.int32(bool(first)), real_scalar(dt, tol),
            np.int32(rt.shape[0]), rt, r, rho, alpha, omega, beta, tau, pending, status), stream)


# ------------------------------------------------------- persistent (one cooperative kernel)
_ACTIVE_BLOCKS: dict = {}


def _max_active_blocks(kernel) -> int:
    """Blocks of `kernel` (DPS_BLOCK threads, no dynamic shared memory) resident per SM
    (asked of the driver once per kernel)."""
    hit = _ACTIVE_BLOCKS.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    blocks = _ask_active_blocks(kernel)
    _ACTIVE_BLOCKS[id(kernel)] = (kernel, blocks)
    return blocks


def _ask_active_blocks(kernel) -> int:
    try:
        import cupy
        blocks = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            kernel.kernel.ptr, BLOCK, 0)
        if blocks > 0:
            return int(blocks)
    except Exception:          # fall back to the register-file bound below
        pass
    regs = max(1, int(kernel.num_regs))                  # the register-file bound, conservatively
    return max(1, min(2048 // BLOCK, 65536 // (((regs + 7) // 8) * 8 * BLOCK)))


def persistent_grid(kernel, A: DeviceMatrix) -> int:
    """Blocks of a cooperative solve: all resident (occupancy), at most 4 per SM (every block
    finishes each DOT from all blocks' partials, so the grid stays small), no more than the work."""
    work = A.work
    return max(1, min(_max_active_blocks(kernel) * _sm_count(), 4 * _sm_count(),
                      -(-work // BLOCK), DOT_MAX_PARTIALS))


# the persistent variant's availability probe: its cooperative CG kernel for one format
PROBE_SPEC = ("cg_persistent", np.float64, "cg_persistent<{T}, 1>")


def persistent_grid_probe() -> int:
    """Build the cooperative CG kernel for one format and size its grid (the availability probe)."""
    name, dtype, expression = PROBE_SPEC
    return _max_active_blocks(get_kernel(name, expression, dtype))


def persistent_kernel(source: str, kernel: str, A: DeviceMatrix):
    """(``kernel``<T, W> of ``source`` built for A's format, its cooperative grid)."""
    k = get_kernel(source, f"{kernel}<{{T}}, {dynamic_code(A)}>", A.dtype)
    return k, persistent_grid(k, A)


# persistent CG in one block (cg_persistent.cu's cg_persistent_cta) where the system is small
CTA = True                                  # False: always the cooperative kernel (tests, A/B)


def _shared_optin() -> int:
    """The most shared memory a block may have here (opt-in), in bytes."""
    import cupy
    return int(cupy.cuda.Device().attributes.get("MaxSharedMemoryPerBlockOptin", 48 * 1024))


SHARED_STATIC_ROOM = 2048   # the static shared memory a kernel may add to its dynamic bytes


def allow_shared(kernel, nbytes: int) -> None:
    """Let ``kernel`` launch with ``nbytes`` of dynamic shared memory: past what a block gets
    without opting in (48 KiB, less SHARED_STATIC_ROOM for the kernel's static slots), its
    opt-in raised to nbytes, once (the attribute is the kernel's, kept)."""
    if nbytes > (48 << 10) - SHARED_STATIC_ROOM and kernel.max_dynamic_shared_size_bytes < nbytes:
        kernel.max_dynamic_shared_size_bytes = nbytes


def cta_plan(A: DeviceMatrix, fast: bool = False):
    """(kernel, threads, dynamic shared bytes) of cg_persistent_cta for A, or None where the
    cooperative kernel runs: A in a CSR format, rows of at most 7 entries (NZ = 5 or 7), n at
    most R * CTA_THREADS (R = 2, 4, 6 or 8 rows a thread; 4 at most for complex), R (NZ + 1)
    values a thread in the block's shared memory, and the vector's byte offsets below 2^16.
    ``fast``: the prepared call's kernel (dpsolve/_fast.py, DPS_FAST_* flags). Decided once
    per matrix and kept on it (the longest row may cost a device sync then)."""
    if (not CTA or A.n == 0 or getattr(A, "csr", None) is None
            or A.n > max(r for _, r in _loader.CTA_SHAPES) * _loader.CTA_THREADS):
        return None
    plans = A.__dict__.setdefault("_cta_plans", {})
    if fast not in plans:
        plans[fast] = _cta_plan(A, fast)
    return plans[fast]


def persistent_cg_kernel(A: DeviceMatrix, fast: bool = False):
    """(kernel, grid, block, dynamic shared bytes) of persistent CG on A: the one-block kernel
    where ``cta_plan`` takes A, else the cooperative cg_persistent (``fast``: the prepared
    call's cg_persistent_fast, dpsolve/_fast.py) on its grid."""
    plan = cta_plan(A, fast)
    if plan is not None:
        kernel, threads, shared = plan
        return kernel, 1, threads, shared
    name = "cg_persistent_fast" if fast else "cg_persistent"
    kernel, grid = persistent_kernel(name, name, A)
    return kernel, grid, BLOCK, 0


def _cta_plan(A: DeviceMatrix, fast: bool):
    size = A.dtype.itemsize
    shapes = [(nz, r) for nz, r in _loader.CTA_SHAPES
              if A.n <= r * _loader.CTA_THREADS and (r <= 4 or A.dtype.kind != "c")]
    if not shapes or A.n * size > 1 << 16:
        return None
    row_max = row_stats(A.csr)["max"]
    fits = [(nz, r) for nz, r in shapes if row_max <= nz]
    if not fits:
        return None
    nz, r = min(fits)                            # the fewest slots, then the fewest rows a thread
    shared = r * (nz + 1) * _loader.CTA_THREADS * size    # R NZ values and R values a thread
    slots = 3 * (_loader.CTA_THREADS // 32) * size        # the kernel's static slots
    if shared + slots > _shared_optin():
        return None
    k = get_kernel("cg_persistent_cta",
                   f"cg_persistent_cta<{{T}}, {nz}, {r}, {'true' if fast else 'false'}>", A.dtype)
    allow_shared(k, shared)
    return k, _loader.CTA_THREADS, shared          # the kernel's block (cta::THREADS), whole


def _persistent_launch(source: str, kernel: str, A: DeviceMatrix, args, stream) -> int:
    """Build ``kernel``<T, W> of ``source`` for A's format, size its cooperative grid and launch
    it once (args: the kernel's arguments). Returns the grid size."""
    k, grid = persistent_kernel(source, kernel, A)
    launch(k, (grid,), (BLOCK,), args, stream)
    return grid


