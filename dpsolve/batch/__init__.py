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
    -21        M="jacobi" with a zero diagonal entry in this system (nothing solved; x = 0)

The solve runs the host reference (``reference.py``, vectorised over the batch) on every
machine, and ``report.path`` says so. CuPy inputs are copied to the host and the result back.
The one-launch GPU kernels for CG and BiCGStab (a block per system, ``device.py`` and
dpsolve/cuda/batch.cu) exist and are held to the reference by tests/test_gpu_batch.py; they
become what ``cg`` and ``bicgstab`` run on CuPy inputs once those tests have run on a GPU and
these checks run on the device as well.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..formats.csr import _is_cupy

BAD_INPUT, ZERO_DIAGONAL = -20, -21


@dataclass
class BatchMatrix:
    """nb systems of order n sharing one CSR pattern: ``values`` (nb, nnz), ``indices`` (nnz,),
    ``indptr`` (n + 1,), sorted columns without duplicates (checked)."""
    values: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    n: int

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
    per system; the call's ``wall_time``; ``path``: what ran ("host reference")."""
    iterations: np.ndarray
    residual_norm: np.ndarray
    tolerance: np.ndarray
    wall_time: float
    path: str = "host reference (vectorised NumPy)"


def _host(a):
    return a.get() if _is_cupy(a) else np.asarray(a)


def csr(values, indices, indptr) -> BatchMatrix:
    """A batch from one CSR pattern and the numbers of every system (values: (nb, nnz)). The
    arrays are copied; a bad pattern is a ValueError naming the problem."""
    values, indices, indptr = _host(values), _host(indices), _host(indptr)
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
    return BatchMatrix(values.copy(), indices.astype(np.int64), indptr.astype(np.int64), n)


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
    return csr(np.stack(vals), first.indices, first.indptr)


def _checks(xp, Ab, values, B, M, dtype, rtol, atol):
    """Every system's checks and constants, with NumPy or CuPy (``xp``: the same code on the
    host and, for the one-launch kernels of ``device.py``, on the device): the values and B in
    ``dtype`` (B copied), info (nb,) int64 with each bad system's code (BAD_INPUT: a NaN or Inf
    in its values or b; ZERO_DIAGONAL: M="jacobi" and a zero diagonal entry), the bad mask, D^-1
    (nb, n) or None, each tolerance max(rtol ||b_i||, atol) and the systems to solve (good, b
    not 0: b = 0 is solved by x = 0 with info 0, as SciPy's)."""
    nb, n = Ab.nb, Ab.n
    values = values.astype(dtype, copy=False)
    Bw = B.astype(dtype, copy=True)
    info = xp.zeros(nb, dtype=xp.int64)
    bad = ~(xp.isfinite(values).all(axis=1) & xp.isfinite(Bw).all(axis=1))
    info[bad] = BAD_INPUT
    dinv = None
    if M == "jacobi":
        diag = xp.zeros((nb, n), dtype=dtype)
        rows = np.repeat(np.arange(n), np.diff(Ab.indptr))       # the pattern: on the host
        on = Ab.indices == rows
        diag[:, xp.asarray(rows[on])] = values[:, xp.asarray(on)]
        zero = ~bad & (diag == 0).any(axis=1)
        info[zero] = ZERO_DIAGONAL
        bad |= zero
        with np.errstate(divide="ignore"):
            dinv = xp.where(diag != 0, 1.0 / xp.where(diag != 0, diag, 1), 0).astype(dtype)
    bnorm = xp.linalg.norm(xp.where(bad[:, None], 0, Bw), axis=1)
    tol = xp.maximum(rtol * bnorm, atol)
    ok = xp.flatnonzero(~bad & (bnorm > 0))
    return values, Bw, info, bad, dinv, tol, ok


def _solve(method, Ab, B, *, rtol, atol, maxiter, M, full_output):
    from . import reference
    t0 = time.perf_counter()
    if not isinstance(Ab, BatchMatrix):
        raise TypeError(f"the batch matrix must come from dpsolve.batch.csr or from_matrices, "
                        f"got {type(Ab).__name__}")
    out_cupy = _is_cupy(B)
    B = _host(B)
    if B.ndim != 2 or B.shape != (Ab.nb, Ab.n):
        raise ValueError(f"B must have shape (nb, n) = {(Ab.nb, Ab.n)}, got {tuple(B.shape)}")
    if M not in (None, "jacobi"):
        raise ValueError(f"dpsolve.batch takes M=None or 'jacobi', got {M!r}")
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    dtype = np.result_type(Ab.dtype, B.dtype if B.dtype.kind in "fc" else np.float64)
    nb, n = Ab.nb, Ab.n
    maxiter = 10 * n if maxiter is None else int(maxiter)
    if maxiter < 1:
        raise ValueError(f"maxiter must be a positive integer, got {maxiter}")
    values, Bw, info, bad, dinv, tol, ok = _checks(np, Ab, Ab.values, B, M, dtype, rtol, atol)
    its = np.zeros(nb, dtype=np.int64)
    X = np.zeros((nb, n), dtype=dtype)
    solver = getattr(reference, method)
    budget = np.full(nb, maxiter, dtype=np.int64)
    todo = ok
    while todo.size:
        sub = solver(values[todo], Ab.indptr, Ab.indices, Bw[todo], X[todo], atol=tol[todo],
                     maxiter=int(budget[todo].max()), dinv=None if dinv is None else dinv[todo])
        Xs, inf, it = sub
        X[todo] = Xs
        info[todo] = inf
        its[todo] += it
        budget[todo] -= it
        # the recurrence said converged: the true residual decides (restart while it does not)
        R = Bw[todo] - reference.matvec(values[todo], Ab.indptr, Ab.indices, X[todo])
        true = np.linalg.norm(R, axis=1)
        again = (inf == 0) & (true > tol[todo]) & (budget[todo] > 0) & (it > 0)
        info[todo[(inf == 0) & (true > tol[todo]) & ~again]] = maxiter
        todo = todo[again]
    res = np.zeros(nb)
    live = ~bad
    res[live] = np.linalg.norm(Bw[live] - reference.matvec(values[live], Ab.indptr, Ab.indices,
                                                           X[live]), axis=1)
    res[bad] = np.nan
    if out_cupy:
        import cupy
        X = cupy.asarray(X)
    if not full_output:
        return X, info
    return X, info, BatchReport(its, res, tol, time.perf_counter() - t0)


def cg(Ab, B, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, full_output=False):
    """Solve A_i x_i = b_i for every system of the batch with CG (each A_i Hermitian positive
    definite). Returns X (nb, n) and info (nb,) [and a BatchReport]; see the module's codes."""
    return _solve("cg", Ab, B, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  full_output=full_output)


def bicgstab(Ab, B, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, full_output=False):
    """Solve every system of the batch with BiCGStab (any A_i). As :func:`cg`."""
    return _solve("bicgstab", Ab, B, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  full_output=full_output)


__all__ = ["BatchMatrix", "BatchReport", "csr", "from_matrices", "cg", "bicgstab",
           "BAD_INPUT", "ZERO_DIAGONAL"]
