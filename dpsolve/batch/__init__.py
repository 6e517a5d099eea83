"""Batches of small systems with one sparsity pattern: ``dpsolve.batch`` (issue 31, part 2).

    Ab = dpsolve.batch.csr(values, indices, indptr)        # values (nb, nnz): system i's numbers
    Ab = dpsolve.batch.from_matrices([A0, A1, ...])         # SciPy/CuPy matrices, one pattern
    X, info = dpsolve.batch.cg(Ab, B, rtol=1e-8)            # B (nb, n): system i's b is B[i]
    X, info, report = dpsolve.batch.bicgstab(Ab, B, M="jacobi", full_output=True)

Items are rows (Ginkgo's batch vectors): B and X have shape (nb, n). Every system gets its own
tolerance ``max(rtol ||b_i||, atol)``, its own iteration count and its own info code; a bad
system never fails the batch, it gets its code:

    0          converged (its true residual meets its tolerance)
    > 0        not converged after that many iterations (maxiter)
    -10, -11   breakdown (SciPy's codes, and dpsolve's non-finite stop), as the single solvers
    -20        NaN or Inf in the system's values or its b (nothing solved; x = 0)
    -21        M="jacobi" with a zero diagonal entry in this system, or one whose reciprocal is
               past the largest float (nothing solved; x = 0)

Where: ``variant="auto"`` (the default) runs the batch on the GPU when one is usable, else the
host reference (``reference.py``, vectorised over the batch); ``"device"`` asks for the GPU (an
error without one), ``"host"`` for the reference. On the GPU the whole batch is one kernel launch
(dpsolve/cuda/batch.cu: a block per system; ``device.py`` says which kernel takes which systems)
and ``report.path`` says which ran. X and info are CuPy arrays when B is one (the call does not
wait for the GPU unless ``full_output`` asks for the report), NumPy otherwise. A batch built from
CuPy values keeps them on the device. A b_i whose squares under- or overflow is solved as b_i /
2^e_i (``row_exponents``), an A_i far from 1 as A_i / 2^f_i (``matrix_shifts``; on the device
``device.a_checks`` finds f_i; batch_cg_rows, CG's kernel for small systems, takes A_i as it is,
and the launch after it, batch_cg_redo, solves again as A_i / 2^f_i a system it did not solve),
both exactly, and x_i multiplied back (``scaled_back``; on the device, by the kernels).
"""
from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from ..formats.csr import _is_cupy

BAD_INPUT, ZERO_DIAGONAL = -20, -21


@dataclass
class BatchMatrix:
    """nb systems of order n sharing one CSR pattern: ``values`` (nb, nnz; NumPy, or CuPy when
    given on the device), ``indices`` (nnz,) and ``indptr`` (n + 1,) on the host, sorted columns
    without duplicates (checked)."""
    values: object
    indices: np.ndarray
    indptr: np.ndarray
    n: int
    _device_pattern: tuple = None
    _diagonals: dict = field(default_factory=dict, repr=False)
    _diagonal_positions: object = field(default=None, repr=False)
    _device_diagonal_positions: object = field(default=None, repr=False)

    def diagonal_positions(self) -> np.ndarray:
        """(n,) int32: the position of row r's diagonal entry among a system's values, -1 where
        the row has none (Jacobi's D, on the host and in ``device.a_checks``): found once."""
        if self._diagonal_positions is None:
            rows = np.repeat(np.arange(self.n), np.diff(self.indptr))
            on = self.indices == rows
            pos = np.full(self.n, -1, np.int32)
            pos[rows[on]] = np.flatnonzero(on)
            self._diagonal_positions = pos
        return self._diagonal_positions

    def device_diagonal_positions(self):
        """``diagonal_positions`` as a CuPy array: uploaded once."""
        if self._device_diagonal_positions is None:
            import cupy
            self._device_diagonal_positions = cupy.asarray(self.diagonal_positions())
        return self._device_diagonal_positions

    def device_diagonals(self, config):
        """The pattern as batch_cg_rows's DIA form takes it at ``config`` (``device.diagonals``:
        offsets, and slot_pos on the device), or None where it does not: found once a config."""
        if config not in self._diagonals:
            import cupy

            from . import device
            dia = device.diagonals(self.indptr, self.indices, self.n, config)
            self._diagonals[config] = None if dia is None else (dia[0], cupy.asarray(dia[1]))
        return self._diagonals[config]

    def device_pattern(self):
        """(indptr, indices) as int32 CuPy arrays and the longest row: uploaded once."""
        if self._device_pattern is None:
            import cupy
            self._device_pattern = (cupy.asarray(self.indptr.astype(np.int32)),
                                    cupy.asarray(self.indices.astype(np.int32)),
                                    int(np.diff(self.indptr).max()) if self.n else 0)
        return self._device_pattern

    @property
    def nb(self) -> int:
        return int(self.values.shape[0])

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def dtype(self):
        return self.values.dtype


@dataclass
class BatchReport:
    """Per system: ``iterations`` and the true ``residual_norm`` (arrays of nb); ``tolerance``
    per system; the call's ``wall_time`` (the GPU's work included); ``path``: what ran (the host
    reference or which kernel)."""
    iterations: np.ndarray
    residual_norm: np.ndarray
    tolerance: np.ndarray
    wall_time: float
    path: str = "host reference (vectorised NumPy)"


def _host(a):
    return a.get() if _is_cupy(a) else np.asarray(a)


def csr(values, indices, indptr) -> BatchMatrix:
    """A batch from one CSR pattern and the numbers of every system (values: (nb, nnz)). The
    arrays are copied (CuPy values stay on the device); a bad pattern is a ValueError naming the
    problem."""
    on_device = _is_cupy(values)
    indices, indptr = _host(indices), _host(indptr)
    if not on_device:
        values = np.asarray(values)
    if values.ndim != 2:
        raise ValueError(f"values must have shape (nb, nnz), got {values.shape}")
    if indptr.ndim != 1 or indptr.size < 2:
        raise ValueError(f"indptr must be 1-D with n + 1 >= 2 entries, got shape {indptr.shape}")
    if indices.ndim != 1 or indices.shape[0] != values.shape[1]:
        raise ValueError(f"indices {indices.shape} and values {values.shape}: values must have "
                         f"one column per index")
    if indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
        raise TypeError("indptr and indices must be integer arrays")
    n = indptr.size - 1
    if indptr[0] != 0 or indptr[-1] != indices.size or (np.diff(indptr) < 0).any():
        raise ValueError("indptr must start at 0, never decrease and end at nnz")
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"a column index lies outside [0, {n})")
    rows = np.repeat(np.arange(n), np.diff(indptr))
    if indices.size > 1 and (((np.diff(indices) <= 0) & (rows[1:] == rows[:-1])).any()):
        raise ValueError("columns must be sorted and unique within each row")
    if values.dtype.kind not in "fc" or values.dtype.char in "gG":
        values = values.astype(np.float64)
    values = values.copy(order="C")
    return BatchMatrix(values, indices.astype(np.int64), indptr.astype(np.int64), n)


def from_matrices(mats) -> BatchMatrix:
    """A batch from SciPy or CuPy sparse matrices of one sparsity pattern (explicit zeros count
    as pattern); a matrix with another pattern is a ValueError naming the first such one."""
    import scipy.sparse as sp
    mats = list(mats)
    if not mats:
        raise ValueError("from_matrices needs at least one matrix")
    first = None
    vals = []
    for i, M in enumerate(mats):
        M = sp.csr_array(M.get() if _is_cupy(M) else M, copy=True)    # the caller's is kept
        M.sum_duplicates()
        M.sort_indices()
        if first is None:
            first = M
            if M.shape[0] != M.shape[1]:
                raise ValueError(f"matrix 0 is {M.shape[0]} x {M.shape[1]}; systems are square")
        elif (M.shape != first.shape or not np.array_equal(M.indptr, first.indptr)
              or not np.array_equal(M.indices, first.indices)):
            raise ValueError(f"matrix {i} has a sparsity pattern other than matrix 0's; a batch "
                             f"shares one pattern (store explicit zeros to align them)")
        vals.append(M.data)
    values = np.stack(vals)
    if _is_cupy(mats[0]):                           # CuPy matrices: the values stay on the GPU
        import cupy
        values = cupy.asarray(values)
    return csr(values, first.indices, first.indptr)


def _checks(xp, Ab, values, B, M, dtype, rtol, atol, a_codes=None, dinv=None):
    """Every system's checks and constants, with NumPy or CuPy (``xp``: the same code on the
    host and, for the one-launch kernels of ``device.py``, on the device): the values and B in
    ``dtype`` (B copied), info (nb,) int64 with each bad system's code (BAD_INPUT: a NaN or Inf
    in its values or b; ZERO_DIAGONAL: M="jacobi" and a zero diagonal entry, or one whose
    reciprocal is past the largest float), the bad mask, D^-1 (nb, n) or None, each tolerance
    max(rtol ||b_i||, atol) as a pair (the system's as solved, and the caller's), the systems to
    solve (good, b not 0: b = 0 is solved by x = 0 with info 0, as SciPy's) as a mask, and e
    (nb,): a b_i outside the safe range is solved as b_i / 2^e_i (``row_exponents``: B here is
    the scaled system's; ``scaled_back`` and the kernels return the caller's x). Nothing here
    waits for the device but ``row_exponents`` on a float32 batch (one wait). ``a_codes`` (and
    ``dinv`` with Jacobi): A's codes and D^-1 as ``device.a_checks`` found them in one launch,
    in place of their CuPy operations."""
    nb, n = Ab.nb, Ab.n
    values = xp.ascontiguousarray(values.astype(dtype, copy=False))
    Bw = xp.asarray(B).astype(dtype, copy=False)
    if a_codes is not None:                     # A's checked on the device: b's here
        info = xp.where(xp.isfinite(Bw).all(axis=1), a_codes, BAD_INPUT).astype(xp.int64)
        bad = info != 0
    else:
        bad = ~(xp.isfinite(values).all(axis=1) & xp.isfinite(Bw).all(axis=1))
        info = xp.where(bad, BAD_INPUT, 0).astype(xp.int64)
        dinv = None
    if M == "jacobi" and a_codes is None:
        diag = xp.zeros((nb, n), dtype=dtype)
        pos = Ab.diagonal_positions()                            # the pattern: on the host
        has = np.flatnonzero(pos >= 0)
        diag[:, xp.asarray(has)] = values[:, xp.asarray(pos[has])]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # NaN: BAD_INPUT
            dinv = xp.where(diag != 0, 1.0 / xp.where(diag != 0, diag, 1), 0).astype(dtype)
        # Jacobi cannot be formed: a zero diagonal entry, or one whose reciprocal is past the
        # largest float (the single solves' ValueError, precond.diagonal.inverse_diagonal)
        zero = ~bad & ((diag == 0) | ~xp.isfinite(dinv)).any(axis=1)
        info = xp.where(zero, ZERO_DIAGONAL, info)
        bad = bad | zero
    # B copied, C-contiguous, a bad system's b as 0 (it is never solved): one pass for both the
    # exponents and ||b||, which read it so
    Bw = xp.ascontiguousarray(xp.where(bad[:, None], 0, Bw))
    e = row_exponents(xp, Bw, dtype)
    if e is None:                               # no row to scale (float32 on the device)
        e = xp.zeros(nb, np.int32)
    else:
        Bw = times_power_of_two(xp, Bw, -e)
    wide = np.complex128 if Bw.dtype.kind == "c" else np.float64     # as batch_cg_rows: double
    bnorm = xp.linalg.norm(Bw.astype(wide, copy=False), axis=1)
    with np.errstate(over="ignore"):            # atol 2^-e past the largest float: any x meets it
        tol = xp.maximum(rtol * bnorm, xp.ldexp(xp.float64(atol), -e))
        tol_out = xp.maximum(xp.ldexp(rtol * bnorm, e), atol)        # the caller's
    todo = ~bad & (bnorm > 0)
    return values, Bw, info, bad, dinv, (tol, tol_out), todo, e


def row_exponents(xp, B, dtype):
    """e (nb,) int: system i is solved as b_i / 2^e_i, exactly, where ||b_i||^2 is outside the
    safe range of ``dtype`` (``_system.in_safe_range``, the single solves' rule: its squares
    would under- or overflow), e_i the exponent of max|b_i|; 0 elsewhere (b_i as it is). Then x_i,
    its residual and its tolerance are multiplied back (``scaled_back``): a power of two commutes
    with every operation of the solve that stays in range, so a system in range keeps its bits
    and one outside it gets scale 1's. Before, b_i of 2^-900 in float64 had ||b_i|| = 0 and was
    answered x = 0 with info 0; so was a float32 b_i below 2^-126 on the device (its subnormals
    read as 0: ``_system.flushes``), which is read here through its bits. For a float32 device
    B, None where every row is in range as the device reads it (its squares summed with the
    subnormals read as 0, which they then are to rounding): one wait, and no pass through the
    bits on the usual batch."""
    from .._system import flushes, square_bounds, widened
    lo, hi = square_bounds(np.dtype(dtype))
    if flushes(B):
        a = xp.abs(B).astype(np.float64)
        sq = (a * a).sum(axis=1)
        if bool(((sq >= lo) & (sq <= hi)).all()):
            return None
    a = abs(widened(B))                               # float64 B: no second copy
    bmax = a.max(axis=1) if B.shape[1] else xp.zeros(B.shape[0])
    with np.errstate(over="ignore", under="ignore"):
        sq = (a * a).sum(axis=1)
    inside = (bmax == 0) | ((sq >= lo) & (sq <= hi))
    return xp.where(inside, 0, xp.frexp(xp.where(inside, 1.0, bmax))[1]).astype(np.int32)


def matrix_shifts(values):
    """f (nb,) int: system i is solved with A_i / 2^f_i, exactly, by the single solves' rule
    (``_system.exponent_shifts`` on A_i's largest and smallest exponents: 0 where A_i's largest
    value lies in the window (-W, W], ``matrix_window``; else max|A_i| into [1/2, 1), or, scaling
    down, no value below 2^-W). ``values`` (nb, nnz) in the working dtype, on the host; a NaN or
    Inf is passed over (that system is refused). Before, A_i far from 1 went in as it was: a
    float32 A_i of 2^-120 broke down (info -10) where the single solve converged."""
    from .._system import exponent_shifts
    if not values.size:                         # no system, or no stored value
        return np.zeros(values.shape[0], np.int32)
    values = np.ascontiguousarray(values)
    parts = values.view(values.real.dtype) if values.dtype.kind == "c" else values
    a = np.abs(parts.reshape(values.shape[0], -1))
    live = np.isfinite(a) & (a != 0)
    amax = np.where(live, a, 0).max(axis=1, initial=0)
    amin = np.where(live, a, np.inf).min(axis=1, initial=np.inf)
    none = amax == 0
    hi = np.frexp(np.where(none, 1, amax))[1]
    lo = np.frexp(np.where(none, 1, amin))[1]
    return np.where(none, 0, exponent_shifts(hi, lo, values.dtype)).astype(np.int32)


def times_power_of_two(xp, V, e):
    """V (nb, n) with row i times 2^e_i, exactly, rounded to nearest where a result is below the
    normal range (real and imaginary parts apart: ldexp takes no complex; a float32 device array
    through float64: ``_system.flushes``)."""
    from .._system import flushes, narrowed, widened
    k = e[:, None]
    W = widened(V) if flushes(V) else V
    if W.dtype.kind == "c":
        return narrowed(xp.ldexp(W.real, k) + 1j * xp.ldexp(W.imag, k), V.dtype)
    return narrowed(xp.ldexp(W, k), V.dtype)


def scaled_back(Ab, values, Bw, X, info, res, tol, e, maxiter, f=None):
    """The caller's X, info and res (the host's: NumPy) of systems solved as b_i / 2^e_i
    (``row_exponents``) with A_i / 2^f_i (``matrix_shifts``; None: A as it is; ``values``,
    ``Bw`` and ``tol`` the system's as solved): x_i times 2^(e_i - f_i), exactly, rounded to
    nearest below the normal range, and the residual times 2^e_i. Where that rounds, the true
    residual of the rounded x decides (info maxiter where it misses the tolerance), and an x
    past the largest float is not converged (info maxiter, a NaN residual), as
    ``_frontend._unscaled_check`` has it for the single solves; batch.cu's kernels do the same
    on the device."""
    from . import reference
    d = e if f is None else e - f                   # x's exponent; the residual's is e
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        Xc = times_power_of_two(np, X, d)
        back = times_power_of_two(np, Xc, -d)
        lost = (d != 0) & ~np.isfinite(Xc).all(axis=1)
        rounded = np.flatnonzero((d != 0) & ~lost & (back != X).any(axis=1))
        if rounded.size:
            R = Bw[rounded] - reference.matvec(values[rounded], Ab.indptr, Ab.indices,
                                               back[rounded])
            res[rounded] = np.linalg.norm(R, axis=1)
            missed = rounded[(info[rounded] == 0) & ~(res[rounded] <= tol[rounded])]
            info[missed] = maxiter
        info = np.where(lost & (info == 0), maxiter, info)
        res = np.where(lost, np.nan, np.ldexp(res, e))
    return Xc, info, res


VARIANTS = ("auto", "device", "host")


def _solve(method, Ab, B, *, rtol, atol, maxiter, M, full_output, variant):
    t0 = time.perf_counter()
    if not isinstance(Ab, BatchMatrix):
        raise TypeError(f"the batch matrix must come from dpsolve.batch.csr or from_matrices, "
                        f"got {type(Ab).__name__}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    out_cupy = _is_cupy(B)
    if not out_cupy:
        B = np.asarray(B)
    if B.ndim != 2 or B.shape != (Ab.nb, Ab.n):
        raise ValueError(f"B must have shape (nb, n) = {(Ab.nb, Ab.n)}, got {tuple(B.shape)}")
    if not (M is None or (isinstance(M, str) and M == "jacobi")):
        shown = repr(M) if M is None or isinstance(M, str) else type(M).__name__
        raise ValueError(f"dpsolve.batch takes M=None or 'jacobi', got {shown}")
    for name, v in (("rtol", rtol), ("atol", atol)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v) \
                or v < 0:
            raise ValueError(f"{name} must be a finite real number >= 0, got {v!r}")
    dtype = np.result_type(Ab.dtype, B.dtype if B.dtype.kind in "fc" else np.float64)
    if maxiter is not None and (isinstance(maxiter, bool)
                                or not isinstance(maxiter, numbers.Integral)):
        raise TypeError(f"maxiter must be an integer or None, got {maxiter!r}")
    maxiter = 10 * Ab.n if maxiter is None else int(maxiter)
    if maxiter < 1 or maxiter > np.iinfo(np.int32).max:
        raise ValueError(f"maxiter must be a positive integer below 2**31, got {maxiter}")
    from .._device import status
    if variant == "device" and not status().ok:
        raise RuntimeError(f"dpsolve.batch variant='device': no usable CUDA device "
                           f"({status().reason})")
    run = _on_device if variant != "host" and status().ok else _on_host
    X, info, its, res, tol, path = run(method, Ab, B, rtol, atol, maxiter, M, dtype)
    if out_cupy != _is_cupy(X):
        if out_cupy:
            import cupy
            X, info = cupy.asarray(X), cupy.asarray(info)
        else:
            X, info = X.get(), info.get()
    if not full_output:
        return X, info
    its, res, tol = (_host(a) for a in (its, res, tol))
    return X, info, BatchReport(its.astype(np.int64), res, tol, time.perf_counter() - t0, path)


def _on_host(method, Ab, B, rtol, atol, maxiter, M, dtype):
    """The host reference, with the true-residual restart of the kernels."""
    from . import reference
    nb, n = Ab.nb, Ab.n
    values = _host(Ab.values).astype(dtype, copy=False)
    f = matrix_shifts(values)                   # A_i far from 1: solved as A_i / 2^f_i
    if f.any():
        with np.errstate(invalid="ignore"):
            values = times_power_of_two(np, values, -f)
    values, Bw, info, bad, dinv, (tol, tol_out), todo, e = _checks(
        np, Ab, values, _host(B), M, dtype, rtol, atol)
    its = np.zeros(nb, dtype=np.int64)
    X = np.zeros((nb, n), dtype=dtype)
    solver = getattr(reference, method)
    budget = np.full(nb, maxiter, dtype=np.int64)
    todo = np.flatnonzero(todo)
    while todo.size:
        again = []
        # the systems with the same iterations left run together: none runs past its own
        for left in np.unique(budget[todo]):
            grp = todo[budget[todo] == left]
            Xs, inf, it = solver(values[grp], Ab.indptr, Ab.indices, Bw[grp], X[grp],
                                 atol=tol[grp], maxiter=int(left),
                                 dinv=None if dinv is None else dinv[grp])
            X[grp] = Xs
            info[grp] = inf
            its[grp] += it
            budget[grp] -= it
            # the recurrence said converged: the true residual decides (restart while it does
            # not)
            R = Bw[grp] - reference.matvec(values[grp], Ab.indptr, Ab.indices, X[grp])
            true = np.linalg.norm(R, axis=1)
            more = (inf == 0) & (true > tol[grp]) & (budget[grp] > 0) & (it > 0)
            info[grp[(inf == 0) & (true > tol[grp]) & ~more]] = maxiter
            again.append(grp[more])
        todo = np.concatenate(again)
    # not converged is the caller's maxiter, not a restart's budget (the kernels' rule)
    info[info > 0] = maxiter
    res = np.zeros(nb)
    live = ~bad
    res[live] = np.linalg.norm(Bw[live] - reference.matvec(values[live], Ab.indptr, Ab.indices,
                                                           X[live]), axis=1)
    res[bad] = np.nan
    X, info, res = scaled_back(Ab, values, Bw, X, info, res, tol, e, maxiter, f)
    return X, info, its, res, tol_out, "host reference (vectorised NumPy)"


def _on_device(method, Ab, B, rtol, atol, maxiter, M, dtype):
    """The batch on the GPU (``device.py``): CG by batch_cg_rows, the checks inside it, where
    the pattern fits, then batch_cg_redo (A_i far from 1: see ``device.solve_cg_redo``); else
    A's checks in one launch (``device.a_checks``) and b's as CuPy kernels, then batch_cg /
    batch_bicgstab."""
    import cupy

    from . import device
    indptr, indices, row_max = Ab.device_pattern()
    config = (device.rows_config(Ab.n, row_max, dtype) if method == "cg" and device.ROWS
              else None)
    values = cupy.ascontiguousarray(cupy.asarray(Ab.values).astype(dtype, copy=False))
    if config is not None:                   # the kernel writes every x (from x0 = 0)
        X = cupy.empty((Ab.nb, Ab.n), dtype=dtype)
        Bw = cupy.ascontiguousarray(cupy.asarray(B).astype(dtype, copy=False))
        info, its, res, tol, path = device.solve_cg_rows(values, indptr, indices, Bw, X, rtol,
                                                         atol, maxiter, M == "jacobi", config,
                                                         dia=Ab.device_diagonals(config)
                                                         if device.DIAGONALS else None)
        if device.REDO:                 # it took A_i as it is: A_i / 2^f_i where that failed
            path += device.solve_cg_redo(
                values, indptr, indices, Bw, X, info, its, res, rtol, atol, maxiter,
                Ab.device_diagonal_positions() if M == "jacobi" else None)
        return X, info.astype(cupy.int64), its, res, tol, path
    X = cupy.zeros((Ab.nb, Ab.n), dtype=dtype)
    # A's checks in one launch: its codes, f_i (A_i far from 1 is solved as A_i / 2^f_i, its
    # values scaled by the kernels as they read them) and D^-1 of the scaled A_i; no wait
    a_codes, f, dinv = device.a_checks(
        values, Ab.device_diagonal_positions() if M == "jacobi" else None)
    values, Bw, info, bad, dinv, (tol, tol_out), todo, e = _checks(
        cupy, Ab, values, cupy.asarray(B), M, dtype, rtol, atol, a_codes=a_codes, dinv=dinv)
    # the kernels multiply x back by 2^(e_i - f_i) and its residual by 2^e_i, and decide on x
    # as the caller gets it
    info, its, res, path = device.solve_skipping_zero(method, values, indptr, indices, Bw, X,
                                                      info, tol, maxiter, dinv, ~todo & ~bad,
                                                      exps=e, fexps=f)
    return X, info, its, res, tol_out, path


def cg(Ab, B, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, full_output=False,
       variant="auto"):
    """Solve A_i x_i = b_i for every system of the batch with CG (each A_i Hermitian positive
    definite). Returns X (nb, n) and info (nb,) [and a BatchReport]; see the module's codes.
    ``variant``: "auto" (the GPU when usable), "device" or "host"."""
    return _solve("cg", Ab, B, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  full_output=full_output, variant=variant)


def bicgstab(Ab, B, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, full_output=False,
             variant="auto"):
    """Solve every system of the batch with BiCGStab (any A_i). As :func:`cg`."""
    return _solve("bicgstab", Ab, B, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  full_output=full_output, variant=variant)


__all__ = ["BatchMatrix", "BatchReport", "csr", "from_matrices", "cg", "bicgstab",
           "BAD_INPUT", "ZERO_DIAGONAL"]
