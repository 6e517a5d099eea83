"""Input handling, written once for every solver: dpsolve's ``make_system``.

It validates and normalises ``A``, ``b``, ``x0`` and ``M`` with SciPy's rules (and SciPy's messages
where SciPy has one), and never modifies what the caller passed in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, aslinearoperator

from .cuda import abi
from .formats import CSR, to_csr
from .formats.csr import _is_cupy, array_module
from . import precond
from .precond import Preconditioner, check_cast  # noqa: F401  (check_cast: imported from here)

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


def safe_exponent_range(dtype) -> int:
    """T: a right-hand side with ||b|| in [2^-T, 2^T] is solved as it is; outside it, scaled.
    A quarter of the dtype's exponent range (float32: 32, float64: 256), so that every norm and
    inner product of the solve -- squares of b, of the residual down to any sensible rtol, and
    <p, A p> with a moderately scaled A -- stays clear of overflow and of subnormals."""
    return np.finfo(np.dtype(dtype)).maxexp // 4


_SQUARE_BOUNDS = {}


def square_bounds(dtype) -> tuple[float, float]:
    """(lo, hi): the sums of squares ||v||^2 that need no scaling, lo <= ||v||^2 <= hi
    (``in_safe_range``; device checks compare arrays of them with the same bounds)."""
    t = _SQUARE_BOUNDS.get(dtype)
    if t is None:
        t = _SQUARE_BOUNDS[dtype] = 2.0 ** (2 * safe_exponent_range(dtype))
    return 1.0 / t, t


def in_safe_range(sq: float, dtype) -> bool:
    """Whether a sum of squares ||v||^2 needs no scaling (finite, and ||v|| in [2^-T, 2^T])."""
    lo, hi = square_bounds(dtype)
    return lo <= sq <= hi                   # False for NaN and inf


def exponent_of(vmax: float) -> int:
    """e with vmax / 2^e in [0.5, 1): the power of two a vector of max |v| = vmax is divided by."""
    return int(np.frexp(vmax)[1])


def flushes(v) -> bool:
    """Whether ``v`` is a float32 or complex64 device array. CuPy compiles every kernel with
    -ftz=true (cupy/cuda/compiler.py appends it to the caller's options), so on the device any
    float32 operation -- abs, astype, a product, ldexp, a comparison, a sum -- reads a subnormal
    (below 2^-126) as 0 and writes one as 0. Where that would change an answer (a b whose every
    entry is below 2^-126 read as b = 0; x multiplied back below 2^-126), the values go through
    their bits: ``widened``, ``narrowed``."""
    return _is_cupy(v) and v.dtype.char in "fF"


def widened(v):
    """v in float64 (complex128), exactly, subnormals included: a float32 device array's
    subnormal components are read through their bits (``flushes``); else ``astype``."""
    wide = np.complex128 if v.dtype.kind == "c" else np.float64
    if not flushes(v):
        return v.astype(wide, copy=False)
    import cupy
    u = cupy.ascontiguousarray(v).view(cupy.int32)          # complex64: its parts, in pairs
    mag = u & 0x7FFFFFFF
    sub = (mag.astype(cupy.float64) * 2.0 ** -149)          # a subnormal's value, exactly
    w = cupy.where(mag < 0x00800000, cupy.where(u < 0, -sub, sub),
                   u.view(cupy.float32).astype(cupy.float64))
    return w.view(wide)


def narrowed(w, dtype):
    """float64 (complex128) ``w`` in ``dtype``, rounded to nearest: into a float32 device array,
    a result below 2^-126 is written through its bits (``flushes``: the conversion would write
    0), as NumPy's rounds it; else ``astype``."""
    dtype = np.dtype(dtype)
    if not (_is_cupy(w) and dtype.char in "fF"):
        return w.astype(dtype, copy=False)
    import cupy
    r = cupy.ascontiguousarray(w).view(cupy.float64)        # complex128: its parts, in pairs
    a = cupy.abs(r)
    tiny = a < 2.0 ** -126
    m = cupy.rint(cupy.where(tiny, a, 0) * 2.0 ** 149).astype(cupy.int32)    # <= 2^23: exact
    bits = cupy.where(tiny, m | cupy.where(cupy.signbit(r), np.int32(-2 ** 31), np.int32(0)),
                      r.astype(cupy.float32).view(cupy.int32))
    return bits.view(dtype)


def times_power_of_two(v, e: int):
    """v * 2^e, exactly (a new array; NumPy or CuPy, real or complex), in two factors so that
    neither over- nor underflows where the product does not (2^e alone can, for |e| > 1022); a
    float32 device array through float64 (``flushes``), so that its subnormals count."""
    if e == 0:
        return v
    if flushes(v):
        return narrowed(times_power_of_two(widened(v), e), v.dtype)
    half = e // 2
    return (v * v.real.dtype.type(2.0 ** half)) * v.real.dtype.type(2.0 ** (e - half))


def abs_max(v) -> float:
    """max |v| (a nonempty NumPy or CuPy array), exactly: a float32 device array's subnormals
    count (``flushes``)."""
    return float(abs(widened(v) if flushes(v) else v).max())


def scaled_norm(v, xp=np) -> float:
    """||v||_2 of a vector whose squares under- or overflow: max|v| * ||v / 2^e|| with 2^e the
    power of two near max|v| (exact). 0.0 exactly when v is zero."""
    vmax = abs_max(v)
    if vmax == 0 or not np.isfinite(vmax):
        return vmax
    e = exponent_of(vmax)
    with np.errstate(over="ignore"):              # a norm past the float64 range is inf
        return float(np.ldexp(float(xp.linalg.norm(times_power_of_two(v, -e))), e))


def sum_of_squares(v) -> float:
    """||v||^2 of a host vector, squares and sum in float64 (over- and underflow left to the
    caller: ``in_safe_range``), without a BLAS call: NumPy's BLAS (OpenBLAS) leaves its worker
    threads spinning for a while after a large dot, which would bill the solve for CPU time."""
    w = v.astype(np.complex128 if np.iscomplexobj(v) else np.float64, copy=False)
    with np.errstate(over="ignore", under="ignore"):
        return float(np.add.reduce(w.real * w.real + w.imag * w.imag if np.iscomplexobj(w)
                                   else w * w))


def vector_norm(v) -> float:
    """||v||_2 where v lives, without over- or underflow: the plain sum of squares where it is in
    the safe range, else the scaled path. 0.0 exactly when v is zero."""
    xp = array_module(v)
    sq = float(xp.vdot(v, v).real) if xp is not np else sum_of_squares(v)
    return float(np.sqrt(sq)) if in_safe_range(sq, np.float64) else scaled_norm(v, xp)


# Off only in the tests of the non-finite stop (tests/nonfinite_cases.py), which reach the
# overflow of an iteration through b's or A's scale: with scaling on, dpsolve solves those
# systems (``scale_rhs``, ``scale_matrix``).
SCALE_RHS = True
SCALE_MATRIX = True


def scale_rhs(system, sq: float) -> float:
    """Scale ``system.b`` (and ``x0``) by a power of two where ``sq`` = ||b||^2 (as summed) is
    outside the safe range of the working dtype; returns ||b|| of the system as it will be
    solved. ``system.scale`` = e: the solve runs on b / 2^e, exactly (every iterate is the
    unscaled one's times 2^-e, bit for bit), and the front end multiplies x and the residual
    back. A zero ||b|| means b is exactly zero. Device vectors are scaled on the set-up's stream
    (the caller's context)."""
    system.scale = 0
    if not SCALE_RHS or in_safe_range(sq, system.dtype):
        return float(np.sqrt(sq))
    vmax = abs_max(system.b)
    if vmax == 0:
        return 0.0
    divide_rhs(system, exponent_of(vmax))
    return vector_norm(system.b)


def solved_x0(x0, ascale: int, scale: int):
    """The caller's x0 as the solve runs it where A is solved as A / 2^ascale and b as
    b / 2^scale: x0 * 2^(ascale - scale), in one product (either factor alone can leave the
    dtype's range where the product does not); None stays None. An x0 that the product carries
    past the largest float (2^k times the scale that b and A give the solution, k beyond the
    dtype's range) comes back with non-finite entries, without a warning: the caller tests it
    (``x0_in_range``)."""
    e = ascale - scale
    if x0 is None or not e:
        return x0
    with np.errstate(over="ignore", invalid="ignore"):    # (complex: inf * 0j is NaN)
        return times_power_of_two(x0, e)


def x0_in_range(solved, given) -> bool:
    """Whether ``solved = solved_x0(given, ...)`` stayed finite (the caller's x0 is); one pass
    (a kernel on the device), only where the scaling multiplied x0."""
    return solved is given or solved is None or _all_finite(solved)


def divide_rhs(system, e: int) -> None:
    """b and x0 divided by 2^e (exact; new arrays), e added to ``system.scale``: the front end
    multiplies x, the residual and the callback's iterates back (``scale_rhs``,
    ``_frontend.fit_rhs``)."""
    system.b = times_power_of_two(system.b, -e)
    if system.x0 is not None:
        system.x0 = times_power_of_two(system.x0, -e)
    system.scale += e


def in_rhs_window(bnorm: float, window) -> bool:
    """Whether ||b|| = ``bnorm`` has its exponent e (||b|| in [2^(e-1), 2^e)) in a bound
    preconditioner's ``rhs_window`` (lo, hi), lo < e <= hi; True for no window."""
    return window is None or window[0] < math.frexp(bnorm)[1] <= window[1]


def matrix_window(dtype) -> int:
    """W: an A whose largest value has its binary exponent e (max|a| in [2^(e-1), 2^e)) in
    (-W, W] is solved as it is (float32: 32, float64: 256, the half of ``safe_exponent_range``'s
    squares that a moderately scaled b leaves to A; abi.cuh's DPS_MATRIX_WINDOW_*, which the
    default call's lane checks on the device)."""
    real = np.finfo(np.dtype(dtype)).dtype
    return abi.DPS_MATRIX_WINDOW_F32 if real == np.float32 else abi.DPS_MATRIX_WINDOW_F64


def exponent_in_window(hi, dtype) -> bool:
    """Whether A's largest exponent ``hi`` lies in (-W, W] (``matrix_window``), where A is solved
    as it is; None (no nonzero value) is inside. The device's twin: ``dps::in_matrix_window``."""
    w = matrix_window(dtype)
    return hi is None or -w < hi <= w


def value_exponents(data) -> tuple:
    """(largest, smallest) binary exponent of the nonzero components of ``data`` (finite; NumPy
    or, on a rare path, CuPy), as csr_check finds them on the device; ``()`` when all are
    zero."""
    if not isinstance(data, np.ndarray):
        data = data.get()
    parts = [np.abs(p[p != 0]) for p in ((data.real, data.imag) if np.iscomplexobj(data)
                                         else (data,))]
    parts = [p for p in parts if p.size]
    if not parts:
        return ()
    return (int(np.frexp(max(p.max() for p in parts))[1]),
            int(np.frexp(min(p.min() for p in parts))[1]))


def largest_exponent(data, amax=None) -> int | None:
    """The binary exponent of max|component| of a finite ``data`` (None: all zero): ``amax``
    where a pass over the values already found it, else on the host by max and min (no
    temporary array), on the device by one ``max_abs`` kernel over the components (a complex
    array viewed as its real pairs) and one read of its result."""
    if amax is not None:
        m = amax
    elif not data.size:
        return None
    elif not isinstance(data, np.ndarray):
        import cupy

        from .cuda import ops
        if np.iscomplexobj(data):
            data = cupy.ascontiguousarray(data).view(data.real.dtype)
        m = ops.max_abs(data)
    else:
        m = largest_magnitude(data)
    return exponent_of(m) if m else None


def largest_magnitude(data) -> float:
    """max|component| of a host ``data`` by its max and min (no temporary array): 0.0 where it
    is empty or zero, NaN or Inf where it holds one (a finiteness test in the same pass)."""
    m = 0.0
    if data.size:
        for p in ((data.real, data.imag) if np.iscomplexobj(data) else (data,)):
            hi, lo = float(p.max()), float(p.min())
            if not (math.isfinite(hi) and math.isfinite(lo)):
                return math.nan if math.isnan(hi) or math.isnan(lo) else math.inf
            m = max(m, abs(hi), abs(lo))
    return m


def in_matrix_window(csr, dtype) -> bool:
    """Whether a checked device CSR's largest exponent (csr_check's words) lies in the window
    where A is solved as it is: what the default call's lane guard tests on the device (its
    matrix must pass it, scaled or not: ``_frontend.solve`` adopts no other)."""
    exps = csr.exponents
    return exponent_in_window(exps[0] if exps else None, dtype)


def exponent_shift(exps, dtype) -> int:
    """f of ``matrix_shift`` from A's (largest, smallest) exponents (``()``: every value zero):
    0 inside the window (-W, W] (``matrix_window``); else max|A| into [1/2, 1), or, scaling
    down, as near as keeps every nonzero value at 2^-W or more (its reciprocal, D^-1's and
    x's scale, in range; the scaling exact): a matrix whose values spread wider than that is
    scaled less, or not at all. ``dpsolve.distributed`` applies it to global exponents."""
    return int(exponent_shifts(*exps, dtype)) if exps else 0


def exponent_shifts(hi, lo, dtype):
    """``exponent_shift``'s f for arrays of largest and smallest exponents (dpsolve.batch's
    systems, ``matrix_shifts``), or for one pair."""
    w = matrix_window(dtype)
    hi, lo = np.asarray(hi), np.asarray(lo)
    f = np.where(hi < 0, hi,                        # scaled up: max|A| -> [1/2, 1), exactly
                 np.maximum(0, np.minimum(hi, lo + w)))
    return np.where((-w < hi) & (hi <= w), 0, f)    # inside the window: A as it is


def matrix_shift(csr, dtype, amax=None) -> int:
    """f: A is solved as A / 2^f (``exponent_shift``). Read from csr_check's words where the
    device checked A; else the largest exponent from ``amax`` (max|component|, where a pass
    over the values already found it: ``_host_matrix``'s) or by ``largest_exponent`` (no copy
    of the values), and both exponents, read on the host, only where A leaves the window."""
    exps = csr.exponents
    if exps is None:
        if exponent_in_window(largest_exponent(csr.data, amax), dtype):
            return 0
        exps = value_exponents(csr.data)
        if csr.on_device:
            csr.exponents = exps
    return exponent_shift(exps, dtype)


def scale_matrix(csr, M, dtype, amax=None):
    """(csr, f): A as the solve runs it, ``csr / 2^f`` (a new values array; exact), where
    ``matrix_shift`` asks for it and M is dpsolve's own (None, a name, or a preconditioner
    object bound from A, which is then bound from the scaled A); else ``(csr, 0)``. A user's M
    (an operator, a matrix, an inverse diagonal) approximates the unscaled A^-1: A is left as
    it is. Device arrays are scaled on the current stream. ``amax``: ``matrix_shift``'s."""
    own = M is None or isinstance(M, str) or (isinstance(M, Preconditioner) and M.needs_matrix)
    f = matrix_shift(csr, dtype, amax) if SCALE_MATRIX and csr is not None and own else 0
    if not f:
        return csr, 0
    out = CSR(csr.indptr, csr.indices, times_power_of_two(csr.data, -f), csr.n, csr.max_row)
    if csr.exponents:
        out.exponents = (csr.exponents[0] - f, csr.exponents[1] - f)
    return out, f


def _all_finite(a) -> bool:
    if _is_cupy(a):
        from .cuda import ops        # one kernel whatever a's size (CuPy's reductions compile
        return ops.all_finite(a)     # a kernel per size class on first use)
    return bool(np.isfinite(a).all())


@dataclass
class System:
    method: str
    n: int
    dtype: np.dtype
    csr: CSR | None              # None when A is a general operator
    operator: LinearOperator | None
    b: object                    # 1-D, dtype, in the memory space of the input b
    x0: object | None            # 1-D copy, dtype, or None for a zero guess
    M: Preconditioner            # bound (dpsolve.precond)
    out_cupy: bool               # return CuPy arrays (b was a CuPy array)
    options: dict = field(default_factory=dict)   # the method's own (methods.Method.options)
    scale: int = 0               # b and x0 are the caller's / 2^scale (``scale_rhs``)
    ascale: int = 0              # A is the caller's / 2^ascale (``scale_matrix``): x is the
                                 # caller's * 2^(ascale - scale)
    bnorm: float | None = None   # ||b|| as solved (``_frontend.tolerances``)
    x0_past: object | None = None  # the caller's x0 where the scaling carried it past the
                                   # largest float: the call stops at it (``_frontend.at_once``)

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
    elif callable(A):
        raise TypeError(_function_hint(A, "A"))
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
    with np.errstate(over="ignore"):
        w = v.astype(dtype, copy=True).ravel()
    if not _all_finite(w):
        raise ValueError(_not_finite(v, dtype, what))
    return w


def _not_finite(given, dtype, what: str) -> str:
    """The error for an input whose copy in the working ``dtype`` is not finite: a NaN or Inf
    in what the caller passed, or a finite value past the dtype's largest (a float64 b of 1e39
    for a prepared float32 system: before, NumPy's overflow warning escaped and the error said
    NaN or Inf)."""
    if not _all_finite(given):
        return f"{what} contains NaN or Inf"
    return past_the_dtype(what, dtype)


def past_the_dtype(what: str, dtype, rows=None) -> str:
    """The words for ``what`` holding a finite value past the largest float of the working
    ``dtype`` (``_not_finite``'s for b, x0 and A; ``precond._in_dtype``'s, with the ``rows`` of a
    diagonal M named)."""
    from .precond.diagonal import rows_text
    name = np.finfo(dtype).dtype.name
    where = "a value" if rows is None else f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}"
    named = "" if rows is None else f" ({rows_text(rows)})"
    return f"{what} has {where} past the largest {name}, the working dtype{named}: solve in a " \
        f"wider dtype"


def _host_matrix(A, is_operator, dtype):
    """(csr, operator, amax) of a checked A: a LinearOperator as it is, else a checked CSR copy
    in ``dtype`` (in A's own memory space) with finite values. amax: max|component| of a host
    A, found by its finiteness test's pass (``largest_magnitude``) for ``scale_matrix``; None
    for a CuPy A or an operator."""
    if is_operator:
        return None, A, None
    with np.errstate(over="ignore"):            # a value past dtype's largest: the error below
        csr = to_csr(A, dtype)
    amax = None if csr.on_device else largest_magnitude(csr.data)
    if not (_all_finite(csr.data) if amax is None else math.isfinite(amax)):
        raise ValueError(_not_finite(A.data if hasattr(A, "format") else A, dtype, "A"))
    return csr, None, amax


def split_x0(x0):
    """(x0, whether it is SciPy's ``"Mb"``): ``x0="Mb"`` starts from M b (b itself without M),
    made by ``initial_guess_Mb`` once the system is set up; any other string is an error."""
    if isinstance(x0, str):
        if x0 == "Mb":
            return None, True
        raise ValueError(f"x0={x0!r} is not supported; pass an array, None or 'Mb' (x0 = M b)")
    return x0, False


def initial_guess_Mb(system) -> None:
    """``system.x0`` = M b, where b lives (SciPy's ``x0="Mb"``), checked like any x0. Called
    after ``scale_rhs`` (M is linear: M (b / 2^e) is the scaled M b), on the set-up's stream."""
    b, M = system.b, system.M
    xp = array_module(b)
    if not M.active:
        x0 = b.copy()
    elif M.kind == "jacobi":
        x0 = xp.asarray(_host(M.inv_diag) if xp is np else M.inv_diag) * b
    elif M.calls_python and (xp is np or system.out_cupy):   # arrays of the caller's kind
        x0 = xp.asarray(M.op.matvec(b)).ravel()
    else:                                      # the host face, on a host copy of b
        x0 = xp.asarray(np.asarray(M.apply_host(_host(b))).ravel())
    check_cast(x0.dtype, system.dtype, "M b (x0='Mb')", "cast M")
    x0 = x0.astype(system.dtype, copy=False)
    if not _all_finite(x0):
        raise ValueError("x0 = M b (x0='Mb') contains NaN or Inf")
    system.x0 = x0


def make_system(method, A, b, x0, M) -> System:
    """The System of a host-side solve: every check with NumPy (or CuPy, where the input lives)."""
    A, is_operator, shape = check_matrix(A)
    n = shape[0]

    # ---- b
    out_cupy = _is_cupy(b)
    b = check_vector(b, shape, "b")
    dtype = coerce(matrix_char(A), b.dtype.char)
    b = host_vector(b, dtype, "b")

    # ---- x0 (SciPy's "Mb" is made later: M b once b is scaled, ``initial_guess_Mb``)
    if x0 is not None:
        x0 = host_vector(check_vector(x0, shape, "x0"), dtype, "x0")

    csr, op, amax = _host_matrix(A, is_operator, dtype)
    csr, f = scale_matrix(csr, M, dtype, amax)
    return System(method, n, dtype, csr, op, b, x0,
                  make_preconditioner(M, csr, n, dtype, method=method), out_cupy, ascale=f)


def host_system(method, A, M, dtype=None) -> System:
    """The System of A alone (b=None) for a prepared host solve: a checked copy of A."""
    A, is_operator, shape = check_matrix(A)
    dtype = working_dtype(A, dtype)
    csr, op, amax = _host_matrix(A, is_operator, dtype)
    csr, f = scale_matrix(csr, M, dtype, amax)
    n = shape[0]
    return System(method, n, dtype, csr, op, None, None,
                  make_preconditioner(M, csr, n, dtype, snapshot=True, method=method), False,
                  ascale=f)


def working_dtype(A, dtype=None) -> np.dtype:
    """A prepared system's working dtype: A's own (integers as float64), or ``dtype``, to which
    A's must cast by ``same_kind``."""
    ch = matrix_char(A)
    if dtype is None:
        return coerce(ch, ch)
    check_cast(np.dtype(ch), dtype, "A", f"prepare with dtype={np.dtype(ch).name} (or a "
               f"complex dtype)")
    return np.dtype(dtype)


def device_system(method, A, b, x0, M, *, dtype=None, copy=False, sync="polling"):
    """(System, ||b||^2 as summed) of a GPU solve, every input on the device, at the cost of one
    host wait.

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
        dtype = coerce(matrix_char(A), b.dtype.char)
    else:
        dtype = working_dtype(A, dtype)
    if x0 is not None:
        x0 = check_vector(x0, shape, "x0")
    res = _setup.resources()
    stream = res.stream
    # a COO / CSC / dense A is converted to CSR on the caller's current stream; then the
    # solve's stream is ordered after it all (the caller's arrays may still be in flight, and
    # the conversion's kernels were: csr_check once read a converted indptr before it was
    # written, a valid COO refused as malformed)
    arrays = _setup.matrix_arrays(A) if not is_operator else None
    _setup.follow_caller(stream, res)
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
    sq = vectors.finish()
    csr = pending.finish() if pending is not None else None
    with stream:
        csr, f = scale_matrix(csr, M, dtype)
    system = System(method, n, np.dtype(dtype), csr, A if is_operator else None, vectors.b,
                    vectors.x0, make_preconditioner(M, csr, n, dtype, snapshot=copy,
                                                    method=method), out_cupy, ascale=f)
    return system, sq


def _function_hint(obj, what: str) -> str:
    """The advice for a plain Python function passed where a matrix or an operator belongs."""
    name = getattr(obj, "__name__", type(obj).__name__)
    return (f"{what} is a plain function ({name}); wrap it as "
            f"scipy.sparse.linalg.LinearOperator((n, n), matvec={name}, dtype=...) (with "
            f"rmatvec=, {what}^H x, for BiCG)")


def make_preconditioner(M, csr, n, dtype, *, snapshot=False, method=None) -> Preconditioner:
    """M bound to the system: ``dpsolve.precond.make`` (the registry, the checks, the messages)."""
    return precond.make(M, csr, n, dtype, snapshot=snapshot, method=method)
