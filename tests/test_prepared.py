"""dpsolve.prepare: the same answers as the one-shot call, a snapshot of A (never stale data),
and SciPy's semantics for each solve. Every test runs on the host variant (CPU, in CI) and, on a
GPU machine, on every GPU variant that takes the system (params marked ``gpu``)."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

import dpsolve
from dpsolve.matrices import convdiff_2d, laplace_2d

GPU_VARIANTS = ("cublas", "cuda", "merge", "dynamic", "graph", "persistent")
VARIANTS = [pytest.param("host")] + [pytest.param(v, marks=pytest.mark.gpu) for v in GPU_VARIANTS]
METHODS = ("cg", "bicg", "bicgstab")


def _system(method, dtype, k=7):
    A = laplace_2d(k) if method == "cg" else convdiff_2d(k, peclet=0.5)
    A = sp.csr_array(A, dtype=dtype)
    rng = np.random.default_rng(3)
    b = rng.standard_normal(A.shape[0]).astype(dtype)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(A.shape[0]).astype(dtype)
    return A, b


def _rtol(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9


def _solved(A, b, result):
    """x of a solve's (x, info), asserting it converged and solves A x = b to 1e-9."""
    x, info = result
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)
    return x


def _skip_if_unavailable(variant):
    info = {v.name: v for v in dpsolve.variants()}[variant]
    if not info.available:
        pytest.skip(f"variant {variant!r} is not available here: {info.reason}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("M", [None, "jacobi"])
def test_prepared_equals_one_shot(variant, method, dtype, M):
    _skip_if_unavailable(variant)
    A, b = _system(method, dtype)
    f = getattr(dpsolve, method)
    rtol = _rtol(dtype)
    x1, info1, r1 = f(A, b, rtol=rtol, M=M, variant=variant, full_output=True)
    P = dpsolve.prepare(A, method, M=M, variant=variant, format=r1.format or "auto")
    assert (P.variant, P.format, P.method, P.n) == (variant, r1.format, method, A.shape[0])
    for _ in range(2):                                  # and again: nothing used up by a solve
        x2, info2, r2 = P.solve(b, rtol=rtol, full_output=True)
        assert info2 == info1 == 0 and r2.iterations == r1.iterations
        np.testing.assert_array_equal(x2, x1)           # the same kernels on the same data
        assert x2.dtype == x1.dtype and type(x2) is type(x1)
    x3, info3 = f(P, b, rtol=rtol)                      # the prepared system as A
    np.testing.assert_array_equal(x3, x1)


@pytest.mark.parametrize("variant", VARIANTS)
def test_changing_A_after_prepare_never_gives_stale_answers(variant):
    """A prepared system keeps a snapshot: changing the caller's A does not reach it (documented),
    the one-shot call sees the change at once, and update() takes it."""
    _skip_if_unavailable(variant)
    A, b = _system("cg", np.float64)
    A0 = A.copy()
    P = dpsolve.prepare(A, "cg", variant=variant)
    A.data *= 3.0                                       # the caller changes A in place
    x_prep = _solved(A0, b, P.solve(b, rtol=1e-10))             # the prepared A
    x_new = _solved(A, b, dpsolve.cg(A, b, rtol=1e-10, variant=variant))
    np.testing.assert_allclose(x_new, x_prep / 3.0, rtol=1e-7)
    P.update(A)
    _solved(A, b, P.solve(b, rtol=1e-10))


def _prepared_cg(variant):
    """(A, b, P): a float64 CG system and its prepared solve on ``variant`` (skips where the
    variant cannot run here)."""
    _skip_if_unavailable(variant)
    A, b = _system("cg", np.float64)
    return A, b, dpsolve.prepare(A, "cg", variant=variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_failed_update_keeps_the_prepared_system(variant):
    A, b, P = _prepared_cg(variant)
    bad = A.copy()
    bad.data[4] = np.nan
    with pytest.raises(ValueError, match="A contains NaN or Inf"):
        P.update(bad)
    with pytest.raises(ValueError, match="update needs a 49 x 49 matrix"):
        P.update(laplace_2d(3))
    _solved(A, b, P.solve(b, rtol=1e-10))


@pytest.mark.parametrize("variant", VARIANTS)
def test_prepared_solve_semantics(variant):
    """SciPy's rules per solve: inputs untouched, zero b, x0, maxiter, tolerance, dtype cast."""
    A, b, P = _prepared_cg(variant)
    b_saved, x0 = b.copy(), np.full(b.shape, 0.5)
    x0_saved = x0.copy()
    x, info, rep = P.solve(b, x0=x0, rtol=1e-8, full_output=True)
    assert info == 0 and np.array_equal(b, b_saved) and np.array_equal(x0, x0_saved)
    assert rep.setup_time >= 0 and rep.solve_time > 0
    assert rep.wall_time >= rep.setup_time + rep.solve_time - 1e-9
    assert rep.gpu_energy is None, "no energy unless asked for"
    x, info = P.solve(np.zeros_like(b))
    assert info == 0 and not x.any()
    x, info = P.solve(b, rtol=1e-12, maxiter=2)
    assert info == 2
    x, info = P.solve(b.reshape(-1, 1), rtol=1e-8)       # (n, 1) as SciPy takes it
    assert info == 0 and x.shape == (A.shape[0],)
    with pytest.raises(TypeError, match="complex128, which does not cast"):
        P.solve(b + 1j)
    with pytest.raises(ValueError, match="b contains NaN or Inf"):
        P.solve(np.full_like(b, np.nan))
    with pytest.raises(ValueError, match="incompatible"):
        P.solve(b[:-1])
    with pytest.raises(ValueError, match="maxiter must be a positive integer"):
        P.solve(b, maxiter=0)
    P32 = dpsolve.prepare(A, "cg", variant=variant, dtype=np.float32)
    x, info = P32.solve(b, rtol=1e-4)                    # float64 b into a float32 system
    assert info == 0 and x.dtype == np.float32


def test_prepared_options_are_checked():
    A, b = _system("cg", np.float64)
    with pytest.raises(ValueError, match="unknown method 'minres'"):
        dpsolve.prepare(A, "minres")
    with pytest.raises(ValueError, match="unknown variant"):
        dpsolve.prepare(A, "cg", variant="fast")
    with pytest.raises(TypeError, match="dtype must be"):
        dpsolve.prepare(A, "cg", dtype=np.int32)
    with pytest.raises(ValueError, match="expected square matrix"):
        dpsolve.prepare(sp.csr_array(np.ones((3, 4))), "cg")
    P = dpsolve.prepare(A, "cg", variant="host")
    with pytest.raises(ValueError, match="prepared for cg, not bicg"):
        dpsolve.bicg(P, b)
    with pytest.raises(ValueError, match="M= is fixed when a system is prepared"):
        dpsolve.cg(P, b, M="jacobi")
    with pytest.raises(ValueError, match="variant= is fixed"):
        dpsolve.cg(P, b, variant="cuda")
    assert "PreparedSystem cg n=49" in repr(P)


def test_prepared_operator_is_called_live():
    """A LinearOperator cannot be copied: it is called as it is at each solve (documented)."""
    A, b = _system("cg", np.float64)
    scale = [1.0]
    L = LinearOperator(A.shape, matvec=lambda v: scale[0] * (A @ v), dtype=np.float64)
    P = dpsolve.prepare(L, "cg", variant="host")
    x1, _ = P.solve(b, rtol=1e-10)
    scale[0] = 2.0
    x2, _ = P.solve(b, rtol=1e-10)
    np.testing.assert_allclose(x2, x1 / 2.0, rtol=1e-7)
