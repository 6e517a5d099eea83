"""Host (NumPy/SciPy) smoothers and the spectral-radius estimate they are scaled by.

These are the building blocks of the smoothed-aggregation AMG reference
(``dpsolve.precond.amg.reference``) and the specification the GPU smoothers reproduce: every
formula below (the start vector of the power iteration, the order of the Chebyshev recurrence,
where scalars are rounded) is written out so that a CUDA kernel can follow it step for step.

Notation: ``A`` is a square sparse matrix (anything with ``A @ x``, normally a SciPy CSR array),
``inv_diag`` the vector ``1 / diag(A)`` (written D^-1), ``b`` the right-hand side and ``x`` the
current iterate. A smoother never changes its inputs: it returns a new array.

Why D^-1 A: both smoothers are "preconditioned by the diagonal", so that they behave the same on a
matrix and on its diagonally rescaled copy. Both need an upper bound of the spectrum of D^-1 A;
``spectral_radius`` gives the estimate, and the callers multiply it by a safety factor (the
Chebyshev interval's ``upper``) or divide the Jacobi weight by it.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["start_vector", "spectral_radius", "jacobi_sweep", "chebyshev"]

_GOLDEN = 2654435761          # Knuth's multiplicative-hash constant (2^32 / golden ratio)


def start_vector(n: int, xp=np):
    """The start vector of ``spectral_radius``: v_i = 1 + ((i * 2654435761) mod 1000) / 1000.

    ``i`` runs over 0..n-1 and the product is taken exactly in unsigned 64-bit integers; the
    division by 1000 and the addition are done in float64. The entries lie in [1, 2): the vector is
    not orthogonal to the smooth eigenvectors, and its pseudo-random part excites the
    high-frequency ones whose eigenvalue we want. It is deterministic so that the host and the GPU
    (which computes the same formula) start from the same vector and get the same estimate up to
    rounding. ``xp``: the array module (NumPy, or CuPy for the device set-up: the same code).
    """
    i = xp.arange(n, dtype=xp.uint64)
    return 1.0 + ((i * xp.uint64(_GOLDEN)) % xp.uint64(1000)).astype(xp.float64) / 1000.0


def _wide(dtype) -> np.dtype:
    """float64, or complex128 for complex data: the precision of the spectral-radius estimate."""
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def spectral_radius(A, inv_diag, iterations: int = 20) -> float:
    """Estimate rho(D^-1 A), the largest eigenvalue magnitude of the Jacobi-scaled matrix.

    The power iteration, in float64 (complex128 for complex data) whatever A's dtype::

        v = start_vector(n) / ||start_vector(n)||
        repeat `iterations` times:
            w = D^-1 (A v);  est = ||w||       (= ||D^-1 A v|| / ||v||, since ||v|| = 1)
            stop if est is 0 or not finite
            v = w / est
        return est

    The estimate is the norm ratio of the last step, not a Rayleigh quotient: it needs no inner
    product beyond the norm and tends to rho from below for the symmetric-positive-definite
    matrices AMG is for. A fixed number of steps means it never hangs. A zero matrix (or a start
    vector in A's null space) gives 0.0 and a matrix with NaN or Inf gives a non-finite value:
    the callers check (``_positive_rho`` below raises a clear ``ValueError`` there).
    """
    if iterations < 1:
        raise ValueError(f"spectral_radius needs iterations >= 1, got {iterations}")
    n = A.shape[0]
    if n == 0:
        return 0.0
    wide = _wide(np.result_type(A.dtype, np.asarray(inv_diag).dtype))
    A64 = A.astype(wide, copy=False) if hasattr(A, "astype") else A
    d64 = np.asarray(inv_diag).astype(wide, copy=False)
    v = start_vector(n).astype(wide)
    v /= np.linalg.norm(v)
    est = 0.0
    for _ in range(iterations):
        w = d64 * (A64 @ v)
        est = float(np.linalg.norm(w))
        if est == 0.0 or not math.isfinite(est):
            break
        v = w / est
    return est


def _positive_rho(rho, who: str) -> float:
    """``rho`` as a float, or a ValueError saying why a smoother cannot be scaled by it."""
    rho = float(rho)
    if not math.isfinite(rho) or rho <= 0.0:
        raise ValueError(f"{who} needs a positive, finite spectral radius estimate of D^-1 A, "
                         f"got {rho!r} (a zero matrix, or NaN/Inf in A or in 1/diag(A))")
    return rho


def _real_dtype(*arrays) -> np.dtype:
    """The real type of the arrays' common dtype: float32 stays float32, complex128 -> float64."""
    dt = np.result_type(*arrays)
    return np.dtype(np.finfo(dt).dtype) if dt.kind in "fc" else np.dtype(np.float64)


def jacobi_sweep(A, inv_diag, omega, x, b):
    """One damped-Jacobi sweep: ``x + omega * D^-1 (b - A x)``, as a new array.

    ``x=None`` means x = 0: the sweep is then ``omega * D^-1 b`` exactly, with no product by A
    (the V-cycle's pre-smoother starts from zero, and skipping the SpMV saves a pass over A).
    ``omega`` is the weight as applied; the AMG V-cycle passes ``omega / rho`` (the weight divided
    by the spectral-radius estimate of D^-1 A), so that 4/3 means "4/3 of the stable step". It is
    cast once to the real type of the working dtype, so float32 data stays float32.
    """
    inv_diag = np.asarray(inv_diag)
    b = np.asarray(b)
    if x is None:
        w = _real_dtype(A.dtype, inv_diag, b).type(omega)
        return w * (inv_diag * b)
    x = np.asarray(x)
    w = _real_dtype(A.dtype, inv_diag, b, x).type(omega)
    return x + w * (inv_diag * (b - A @ x))


def chebyshev(A, inv_diag, rho, degree, x, b, lower=1.0 / 30.0, upper=1.1):
    """``degree`` steps of the Chebyshev semi-iteration for D^-1 A x = D^-1 b, as a new array.

    The polynomial is the Chebyshev polynomial of the interval [lower * rho, upper * rho]
    (``rho`` is ``spectral_radius(A, inv_diag)``): it damps the error components whose
    eigenvalue of D^-1 A lies in that interval, the upper part of the spectrum that the coarse
    grid does not correct. ``upper = 1.1`` covers an underestimated rho; ``lower = 1/30`` leaves
    the smooth end to the coarse grid. The recurrence is Saad's (Iterative Methods for Sparse
    Linear Systems, 2nd ed., Algorithm 12.1), exactly in this order::

        lmin, lmax = lower * rho, upper * rho
        theta = (lmax + lmin) / 2;  delta = (lmax - lmin) / 2
        sigma = theta / delta;      rho_k = 1 / sigma
        res = D^-1 (b - A x)        # x=None means x = 0: res = D^-1 b, with no SpMV
        d = res / theta
        x = x + d                   # x=None: x = d
        for k in 2..degree:
            rho_next = 1 / (2 sigma - rho_k)
            res = D^-1 (b - A x)
            d = (rho_next rho_k) d + (2 rho_next / delta) res
            x = x + d
            rho_k = rho_next

    The scalars (theta, delta, sigma, rho_k, and the two coefficients of the d update) are
    computed in float64 (Python floats) and cast once to the real type of the working dtype
    where they meet an array. Starting from x, the result is x + p(D^-1 A) D^-1 (b - A x) for a
    fixed polynomial p, so pre- and post-smoothing with it keep a V-cycle symmetric.
    """
    rho = _positive_rho(rho, "the Chebyshev smoother")
    degree = int(degree)
    if degree < 1:
        raise ValueError(f"the Chebyshev smoother needs degree >= 1, got {degree}")
    if not (0.0 <= lower < upper):
        raise ValueError(f"the Chebyshev interval needs 0 <= lower < upper, got lower={lower}, "
                         f"upper={upper}")
    inv_diag = np.asarray(inv_diag)
    b = np.asarray(b)
    arrays = (A.dtype, inv_diag, b) if x is None else (A.dtype, inv_diag, b, np.asarray(x))
    real = _real_dtype(*arrays).type

    lmin, lmax = lower * rho, upper * rho
    theta = (lmax + lmin) / 2.0
    delta = (lmax - lmin) / 2.0
    sigma = theta / delta
    rho_k = 1.0 / sigma

    if x is None:
        res = inv_diag * b
        d = res / real(theta)
        x = d.copy()
    else:
        x = np.asarray(x)
        res = inv_diag * (b - A @ x)
        d = res / real(theta)
        x = x + d
    for _ in range(2, degree + 1):
        rho_next = 1.0 / (2.0 * sigma - rho_k)
        res = inv_diag * (b - A @ x)
        d = real(rho_next * rho_k) * d + real(2.0 * rho_next / delta) * res
        x = x + d
        rho_k = rho_next
    return x
