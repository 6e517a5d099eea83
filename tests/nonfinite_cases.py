"""Systems on which BiCG / BiCGStab produce a non-finite scalar (dpsolve: info = -10 at a fixed
iteration, x the last finite iterate; SciPy iterates on NaN to maxiter). Shared by the reference
tests (test_reference.py) and the GPU variants' (test_gpu_nonfinite.py).

Every case overflows grossly, so no summation order moves the stop: the exact ones ("trap",
"huge", "t0") in exact arithmetic, the small random integer ones (float32) with at least a factor
2 of b to spare on both sides (b * 2 and b / 2 stop at the same check and iteration) and the
same stop under four summation orders of the reference's inner products.

CASES: name -> (builder(dtype) -> (A, b, x0 or None), {method: (info, iterations, the check that
fires)}, dtypes, preconditioners).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

FLOAT32 = ("float32",)
ALL_DTYPES = ("float32", "float64", "complex64", "complex128")


def _scale(dtype):
    """2^50 (single precision) or 2^500 (double): 2 s^2 is finite, s^2 * 2^44 is not."""
    real = np.finfo(np.dtype(dtype)).dtype
    return 2.0 ** (50 if real == np.float32 else 500)


TRAP_N, TRAP_ROW = 1000, 613


def trap(dtype):
    """n = 1000: tridiag(-1, 4, -1) with rows and columns t, t+1 (t = 613) cut out and replaced by
    the 2x2 block [[1, 1], [-3 + 2^-20, 1]] (unit diagonal, so Jacobi changes nothing). x0 holds
    small integers off the block and b = A x0 there (exact), so r_0 = s (e_t + e_{t+1}) with
    s = 2^50 (2^500 in double precision), and every step is exact:

    * <r~, A r> = s^2 2^-20, alpha = 2^21, x_1 = x0 + 2^21 s (e_t + e_{t+1}), and the new residual
      has entries of about 2^22 s, whose squares overflow.
    * BiCG: ||r_1|| = inf -> -10 at 1 (a scaled NRM2 that does not overflow: rho_1 = -inf at the
      head of iteration 1, the same stop).
    * BiCGStab: s = r - alpha v is that residual: ||s||, <t, s>, <t, t> overflow (omega = NaN) ->
      -10 at 0 with x = x0 + alpha p^ (the same x_1).
    """
    dt = np.dtype(dtype)
    n, t = TRAP_N, TRAP_ROW
    main, off = np.full(n, 4.0), np.full(n - 1, -1.0)
    A = sp.diags_array([off, main, off], offsets=[-1, 0, 1], format="lil")
    for i in (t, t + 1):
        A[i, :] = 0
        A[:, i] = 0
    A[t, t], A[t, t + 1], A[t + 1, t], A[t + 1, t + 1] = 1.0, 1.0, -3.0 + 2.0 ** -20, 1.0
    A = sp.csr_array(A, dtype=dt)
    A.eliminate_zeros()
    x0 = np.random.default_rng(0).integers(-3, 4, n).astype(dt)
    x0[t] = x0[t + 1] = 0
    b = (A @ x0).astype(dt)
    b[t] = b[t + 1] = _scale(dt)
    return A, b, x0


def trap_solution(dtype):
    """The x both methods return on ``trap``: x0 + 2^21 s at rows t, t+1."""
    _, _, x0 = trap(dtype)
    x = x0.copy()
    x[TRAP_ROW] = x[TRAP_ROW + 1] = 2.0 ** 21 * _scale(dtype)
    return x


def huge(dtype):
    """A = 2^126 I_4 (2^1022 in double precision), b = 1: A p is finite, <p~, A p> (BiCG) and
    <r~, v> (BiCGStab) = 2^128 overflow in the first iteration: -10 at 0, x untouched (0).
    (SciPy: alpha = 4 / inf = 0, then 0 * inf = NaN, and on to maxiter.)"""
    dt = np.dtype(dtype)
    real = np.finfo(dt).dtype
    big = 2.0 ** (126 if real == np.float32 else 1022)
    return sp.csr_array(sp.eye_array(4) * big, dtype=dt), np.ones(4, dt), None


def t0(dtype):
    """BiCGStab on A = [[1, 1], [0, 0]], b = (1, 1): alpha = 1, s = (-1, 1), t = A s = 0, so
    omega = <t, s> / <t, t> = 0 / 0: -10 at 0 with x = alpha p^ = (1, 1)."""
    dt = np.dtype(dtype)
    return sp.csr_array(np.array([[1.0, 1.0], [0.0, 0.0]]), dtype=dt), np.ones(2, dt), None


def _integers(A, b, e):
    def build(dtype):
        dt = np.dtype(dtype)
        return (sp.csr_array(np.array(A, float), dtype=dt),
                (np.array(b, float) * 2.0 ** e).astype(dt), None)
    return build


CASES = {
    "trap": (trap, {"bicg": (-10, 1, "tau"), "bicgstab": (-10, 0, "omega")}, ALL_DTYPES,
             (None, "jacobi")),
    "huge": (huge, {"bicg": (-10, 0, "rv"), "bicgstab": (-10, 0, "rv")}, ALL_DTYPES, (None,)),
    "t0": (t0, {"bicgstab": (-10, 0, "omega")}, ("float32", "float64"), (None,)),
    # random small integer systems, b scaled to the edge of float32 (see the module docstring)
    "rand6": (_integers([[-1, 0, -3, -2, 0, 1], [-2, -1, -2, 2, 3, -3], [3, 0, -3, -1, 3, 1],
                         [-1, -3, 0, -1, 3, -1], [-1, 3, -2, -3, -2, -1], [-3, 0, 0, 2, -3, 3]],
                        [-1, 2, 0, -1, 2, 0], 59),
              {"bicg": (-10, 4, "rv")}, FLOAT32, (None, "jacobi")),
    "rand8": (_integers([[-3, -1, 3, -3, 3, 0, -3, -1], [-2, -1, -2, 1, 1, 2, -2, -3],
                         [-3, 3, 0, 3, 2, -3, -1, -1], [1, 1, -1, -2, 2, 2, 0, -1],
                         [-2, -1, 1, -1, 2, -1, 1, -2], [1, -2, -2, 3, -3, -3, -2, -2],
                         [-1, -1, -1, 0, -2, 1, 3, -3], [1, 2, 1, 1, 1, 1, -1, -2]],
                        [2, -2, 1, 2, -1, -1, 1, 1], 58),
              {"bicg": (-10, 2, "tau")}, FLOAT32, (None,)),
    "rand2": (_integers([[3072, -4], [-3072, 4]], [0, 2], 60),
              {"bicg": (-10, 1, "rho")}, FLOAT32, (None,)),
    "rand8s": (_integers([[2, 0, -3, 3, -2, -2, -1, 0], [2, -1, -3, 3, 0, -3, 2, -2],
                          [2, -1, -1, -1, -3, 2, -2, -3], [3, 0, -2, -3, -1, -2, -1, 2],
                          [-3, 2, -2, 3, -1, -1, 2, -2], [3, 2, 3, -3, 1, 1, 3, -2],
                          [0, -1, -3, -1, 0, 0, 1, 1], [-1, 3, -1, -2, -1, -3, 1, -3]],
                         [0, 2, 1, 2, -1, -1, 1, -1], 58),
               {"bicgstab": (-10, 2, "omega")}, FLOAT32, (None,)),
    "rand3s": (_integers([[-1, -1, -1], [0, 2, 0], [-2, 1, 2]], [-1, 1, 2], 55),
               {"bicgstab": (-10, 1, "rv")}, FLOAT32, (None,)),
}


def params():
    """(case, method, dtype, M) for every combination the cases declare."""
    return [(name, method, dtype, M) for name, (_, methods, dtypes, Ms) in CASES.items()
            for method in methods for dtype in dtypes for M in Ms]
