"""Input handling, written once for every solver: dpsolve's ``make_system``.

It validates and normalises ``A``, ``b``, ``x0`` and ``M`` with SciPy's rules (and SciPy's messages
where SciPy has one), and never modifies what the caller passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field

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
    """Reject dtypes SciPy would mangle or choke on; integers, bools and float16 upcast as SciPy
    does."""
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
    """``kind`` is "none", "jacobi" (``inv_diag`` holds D^-1) or "operator" (``op`` a
    LinearOperator)."""
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
    options: dict = field(default_factory=dict)   # the method's own (methods.Method.options)

    @property
    def nnz(self):
        return self.csr.nnz if self.csr is not None else None


def _matrix_dtype(A):
    if _is_cupy(A) or sp.issparse(A) or isinstance(A, np.ndarray):
        return np.dtype(A.dtype)
    return None


def check_matrix(A):
    """A's type and shape, before any pass over its data: (A, is_operator, shape). A duck-typed
    operator comes back as a LinearOperator."""
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
    if shape[0] == 0:
        raise ValueError("A is empty (shape (0, 0)); there is no system to solve")
    return A, is_operator, shape


def check_vector(v, shape, what: str):
    """b or x0 (an array of shape (n,) or (n, 1)) checked for type and shape, not yet cast."""
    v = v if _is_cupy(v) else np.asarray(v)
    if v.dtype == object:
        raise TypeError(f"{what} has dtype object; expected a numeric array")
    n = shape[0]
    if not (v.shape == (n, 1) or v.shape == (n,)):
        raise ValueError(f"shapes of A {shape} and {what} {tuple(v.shape)} are incompatible")
    _check_dtype(v.dtype, what)
    return v


def matrix_char(A) -> str:
    """The dtype character SciPy's coercion reads for A (a LinearOperator's declared dtype)."""
    a_dt = _matrix_dtype(A)
    if a_dt is not None:
        _check_dtype(a_dt, "A")
        return a_dt.char
    return np.dtype(A.dtype).char


def host_vector(v, dtype, what: str):
    """A checked b or x0 as a private 1-D copy in ``dtype`` (where it lives), finite: the
    caller's array is never touched."""
    v = v.astype(dtype, copy=True).ravel()
    if not _all_finite(v):
        raise ValueError(f"{what} contains NaN or Inf")
    return v


def _host_matrix(A, is_operator, dtype):
    """(csr, operator) of a checked A: a LinearOperator as it is, else a checked CSR copy in
    ``dtype`` (in A's own memory space) with finite values."""
    if is_operator:
        return None, A
    csr = to_csr(A, dtype)
    if not _all_finite(csr.data):
        raise ValueError("A contains NaN or Inf")
    return csr, None


def make_system(method, A, b, x0, M) -> System:
    """The System of a host-side solve: every check with NumPy (or CuPy, where the input lives)."""
    A, is_operator, shape = check_matrix(A)
    n = shape[0]

    # ---- b
    out_cupy = _is_cupy(b)
    b = check_vector(b, shape, "b")
    dtype = coerce(matrix_char(A), b.dtype.char)
    b = host_vector(b, dtype, "b")

    # ---- x0
    if x0 is not None:
        if isinstance(x0, str):
            raise ValueError(f"x0={x0!r} is not supported; pass an array or None")
        x0 = host_vector(check_vector(x0, shape, "x0"), dtype, "x0")

    csr, op = _host_matrix(A, is_operator, dtype)
    return System(method, n, dtype, csr, op, b, x0, make_preconditioner(M, csr, n, dtype), out_cupy)


def host_system(method, A, M, dtype=None) -> System:
    """The System of A alone (b=None) for a prepared host solve: a checked copy of A."""
    A, is_operator, shape = check_matrix(A)
    ch = matrix_char(A)
    dtype = coerce(ch, ch) if dtype is None else np.dtype(dtype)
    csr, op = _host_matrix(A, is_operator, dtype)
    n = shape[0]
    return System(method, n, dtype, csr, op, None, None, make_preconditioner(M, csr, n, dtype),
                  False)


def device_system(method, A, b, x0, M, *, dtype=None, copy=False, sync="polling"):
    """(System, ||b||) of a GPU solve, every input on the device, at the cost of one host wait.

    The same checks and messages as ``make_system``, in the same order, but every pass over the
    data is a kernel (``dpsolve._setup``): host arrays (SciPy's CSR arrays as they are, NumPy b,
    x0) are copied through pinned staging, the matrix is checked in one pass, ``||b||`` and
    ``||x0||`` summed on the device, and all of it read back at once. ``b=None`` prepares the
    matrix alone (``dpsolve.prepare``; ``dtype`` then defaults to A's own). ``copy``: the device
    arrays never share memory with the caller's (a prepared system keeps a snapshot of A).
    """
    from . import _setup
    A, is_operator, shape = check_matrix(A)
    n = shape[0]
    out_cupy = _is_cupy(b)
    if b is not None:
        b = check_vector(b, shape, "b")
    if dtype is None:
        ch = matrix_char(A)
        dtype = coerce(ch, b.dtype.char if b is not None else ch)
    if x0 is not None:
        if isinstance(x0, str):
            raise ValueError(f"x0={x0!r} is not supported; pass an array or None")
        x0 = check_vector(x0, shape, "x0")
    res = _setup.resources()
    stream = res.stream
    _setup.follow_caller(stream, res)         # the caller's arrays may still be in flight
    arrays = _setup.matrix_arrays(A) if not is_operator else None
    mat_host = arrays is not None and not _is_cupy(arrays[2])
    uploads = ((list(arrays[:3]) if mat_host else [])
               + [_setup.host_part(b), _setup.host_part(x0)])
    up = _setup.upload(uploads, stream, res)
    if mat_host:
        arrays = (*up[:3], arrays[3])
    rb = _setup.Readback(stream, res)
    vectors = _setup.PendingVectors(b, x0, up[-2], up[-1], dtype, rb)
    pending = (_setup.PendingCSR(*arrays, dtype, rb, copy=copy and not mat_host)
               if arrays is not None else None)
    rb.fetch(sync)                           # the host waits as the call's sync mode says
    bnorm = vectors.finish()
    csr = pending.finish() if pending is not None else None
    system = System(method, n, np.dtype(dtype), csr, A if is_operator else None, vectors.b,
                    vectors.x0, make_preconditioner(M, csr, n, dtype), out_cupy)
    return system, bnorm


def make_preconditioner(M, csr, n, dtype) -> Preconditioner:
    """M may be None, "jacobi", a 1-D array holding D^-1, a diagonal sparse matrix, or any
    matrix / LinearOperator approximating A^-1 (host-driven variants only)."""
    if M is None:
        return Preconditioner("none")
    if isinstance(M, str):
        if M != "jacobi":
            raise ValueError(f"unknown preconditioner M={M!r}; "
                             "expected 'jacobi', an array or an operator")
        if csr is None:
            raise ValueError("M='jacobi' needs A as a matrix, not a LinearOperator")
        d = _host(csr.diagonal())
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
