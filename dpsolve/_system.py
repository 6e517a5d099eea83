"""Input handling, written once for every solver: dpsolve's ``make_system``.

It validates and normalises ``A``, ``b``, ``x0`` and ``M`` with SciPy's rules (and SciPy's messages
where SciPy has one), and never modifies what the caller passed in.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, aslinearoperator

from .formats import CSR, to_csr
from .formats.csr import _is_cupy

# SciPy's coercion table (scipy.sparse.linalg._isolve.utils): the working type of A and b.
_COERCE = {('f', 'f'): 'f', ('f', 'd'): 'd', ('f', 'F'): 'F', ('f', 'D'): 'D',
           ('d', 'f'): 'd', ('d', 'd'): 'd', ('d', 'F'): 'D', ('d', 'D'): 'D',
           ('F', 'f'): 'F', ('F', 'd'): 'D', ('F', 'F'): 'F', ('F', 'D'): 'D',
           ('D', 'f'): 'D', ('D', 'd'): 'D', ('D', 'F'): 'D', ('D', 'D'): 'D'}


def _check_dtype(dt, what):
    """Reject dtypes SciPy would mangle or choke on; integers, bools and float16 upcast as SciPy does."""
    dt = np.dtype(dt)
    if dt.kind in "biuf" and dt.char not in "gG":
        return dt
    if dt.char in "FD":
        return dt
    raise TypeError(f"unsupported dtype {dt} for {what}; dpsolve solves in float32, float64, "
                    f"complex64 or complex128 (integer, bool and float16 inputs are upcast)")


def coerce(a_char: str, b_char: str) -> np.dtype:
    a = a_char if a_char in "fdFD" else "d"
    b = b_char if b_char in "fdFD" else "d"
    return np.dtype(_COERCE[a, b])


def _host(a):
    return a.get() if _is_cupy(a) else np.asarray(a)


def vector_norm(v) -> float:
    """||v||_2 where v lives, without a BLAS call: NumPy's BLAS (OpenBLAS) leaves its worker
    threads spinning for a while after a large dot, which would bill the solve for CPU time."""
    if _is_cupy(v):
        import cupy
        return float(cupy.linalg.norm(v))
    sq = v.real * v.real + v.imag * v.imag if np.iscomplexobj(v) else v * v
    return float(np.sqrt(np.add.reduce(sq, dtype=np.float64)))


def _all_finite(a) -> bool:
    if _is_cupy(a):
        import cupy
        return bool(cupy.isfinite(a).all())
    return bool(np.isfinite(a).all())


@dataclass
class Preconditioner:
    """``kind`` is "none", "jacobi" (``inv_diag`` holds D^-1) or "operator" (``op`` a LinearOperator)."""
    kind: str
    inv_diag: object = None
    op: LinearOperator | None = None


@dataclass
class System:
    method: str
    n: int
    dtype: np.dtype
    csr: CSR | None              # None when A is a general operator
    operator: LinearOperator | None
    b: object                    # 1-D, dtype, in the memory space of the input b
    x0: object | None            # 1-D copy, dtype, or None for a zero guess
    M: Preconditioner
    out_cupy: bool               # return CuPy arrays (b was a CuPy array)

    @property
    def nnz(self):
        return self.csr.nnz if self.csr is not None else None


def _matrix_dtype(A):
    if _is_cupy(A) or sp.issparse(A) or isinstance(A, np.ndarray):
        return np.dtype(A.dtype)
    return None


def make_system(method, A, b, x0, M) -> System:
    # ---- A: shape and type
    is_operator = False
    if _is_cupy(A) or sp.issparse(A) or isinstance(A, np.ndarray):
        if len(A.shape) != 2:
            raise ValueError(f"A must be 2-D, got shape={A.shape}")
    elif isinstance(A, LinearOperator) or hasattr(A, "matvec"):
        is_operator = True
        A = aslinearoperator(A)
    else:
        given = type(A).__name__            # named in errors: not NumPy's conversion of A
        try:
            A = np.asarray(A)
        except Exception:
            raise TypeError(f"A must be a sparse matrix, a 2-D array or a LinearOperator, "
                            f"got {given}") from None
        if A.dtype == object or A.ndim != 2:
            raise TypeError(f"A must be a sparse matrix, a 2-D array or a LinearOperator, "
                            f"got {given}" + (f" with shape {A.shape}" if A.ndim else ""))
    shape = tuple(int(s) for s in A.shape)
    if shape[0] != shape[1]:
        raise ValueError(f"expected square matrix, but got shape={(shape,)}")
    n = shape[0]
    if n == 0:
        raise ValueError("A is empty (shape (0, 0)); there is no system to solve")

    # ---- b
    out_cupy = _is_cupy(b)
    if not out_cupy:
        b = np.asarray(b)
    if b.dtype == object:
        raise TypeError("b has dtype object; expected a numeric array")
    if not (b.shape == (n, 1) or b.shape == (n,)):
        raise ValueError(f"shapes of A {shape} and b {tuple(b.shape)} are incompatible")
    _check_dtype(b.dtype, "b")
    a_dt = _matrix_dtype(A)
    if a_dt is not None:
        _check_dtype(a_dt, "A")
        a_char = a_dt.char
    else:
        # SciPy's rule: a LinearOperator's declared (or inferred) dtype, not what matvec returns
        a_char = np.dtype(A.dtype).char
    dtype = coerce(a_char, b.dtype.char)
    b = b.astype(dtype, copy=True).ravel()      # a copy: the caller's b is never touched
    if not _all_finite(b):
        raise ValueError("b contains NaN or Inf")

    # ---- x0
    if x0 is not None:
        if isinstance(x0, str):
            raise ValueError(f"x0={x0!r} is not supported; pass an array or None")
        x0_in = x0 if _is_cupy(x0) else np.asarray(x0)
        if not (x0_in.shape == (n, 1) or x0_in.shape == (n,)):
            raise ValueError(f"shapes of A {shape} and x0 {tuple(x0_in.shape)} are incompatible")
        _check_dtype(x0_in.dtype, "x0")
        x0 = x0_in.astype(dtype, copy=True).ravel()
        if not _all_finite(x0):
            raise ValueError("x0 contains NaN or Inf")

    # ---- A to CSR (in its own memory space), checked
    csr = op = None
    if is_operator:
        op = A
    else:
        csr = to_csr(A, dtype)
        if not _all_finite(csr.data):
            raise ValueError("A contains NaN or Inf")

    return System(method, n, dtype, csr, op, b, x0, make_preconditioner(M, csr, n, dtype), out_cupy)


def make_preconditioner(M, csr, n, dtype) -> Preconditioner:
    """M may be None, "jacobi", a 1-D array holding D^-1, a diagonal sparse matrix, or any
    matrix / LinearOperator approximating A^-1 (host-driven variants only)."""
    if M is None:
        return Preconditioner("none")
    if isinstance(M, str):
        if M != "jacobi":
            raise ValueError(f"unknown preconditioner M={M!r}; expected 'jacobi', an array or an operator")
        if csr is None:
            raise ValueError("M='jacobi' needs A as a matrix, not a LinearOperator")
        d = _host(csr.to_host().diagonal())
        zero = np.flatnonzero(d == 0)
        if zero.size:
            rows = ", ".join(str(i) for i in zero[:10]) + (", ..." if zero.size > 10 else "")
            raise ValueError(f"Jacobi preconditioner needs a nonzero diagonal, but A has "
                             f"{zero.size} zero diagonal entr{'y' if zero.size == 1 else 'ies'} "
                             f"(row{'s' if zero.size > 1 else ''} {rows})")
        return Preconditioner("jacobi", inv_diag=(1.0 / d).astype(dtype))
    if (isinstance(M, np.ndarray) or _is_cupy(M)) and M.ndim == 1:
        if M.shape != (n,):
            raise ValueError(f"M as a 1-D inverse diagonal must have shape ({n},), got {M.shape}")
        inv = _host(M).astype(dtype, copy=True)
        if not np.isfinite(inv).all():
            raise ValueError("M (inverse diagonal) contains NaN or Inf")
        return Preconditioner("jacobi", inv_diag=inv)
    if sp.issparse(M) or _is_cupy(M):
        if tuple(M.shape) != (n, n):
            raise ValueError("matrix and preconditioner have different shapes")
        Mh = sp.coo_array(M.get() if _is_cupy(M) else M, copy=True)   # M is not touched
        Mh.sum_duplicates()
        Mh.eliminate_zeros()
        if bool((Mh.row == Mh.col).all()):                      # diagonal: a Jacobi application
            return Preconditioner("jacobi", inv_diag=Mh.diagonal().astype(dtype))
        M = Mh
    op = aslinearoperator(M)
    if op.shape != (n, n):
        raise ValueError("matrix and preconditioner have different shapes")
    return Preconditioner("operator", op=op)
