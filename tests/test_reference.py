"""The pure-NumPy reference solvers (dpsolve.reference), called directly with callables.

    solver(matvec, b, x, *, atol, maxiter, psolve=None, callback=None) -> (x, info, iterations)
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from scipy.sparse.linalg import LinearOperator

from dpsolve import methods, reference
from dpsolve.matrices import laplace_1d, laplace_2d
import nonfinite_cases
from scipy_cases import sym_nonpd

METHODS = ("cg", "bicg", "bicgstab")


def run_ref(method, A, b, *, atol, maxiter, x0=None, inv_diag=None, callback=None):
    A = sp.csr_array(A)
    AH = A.conj().T.tocsr()
    x = np.zeros(A.shape[0], dtype=b.dtype) if x0 is None else x0.astype(b.dtype).copy()
    kw = dict(atol=atol, maxiter=maxiter, callback=callback)
    if inv_diag is not None:
        kw["psolve"] = lambda r, d=inv_diag: d * r
    if method == "bicg":
        kw["rmatvec"] = AH.__matmul__
        if inv_diag is not None:
            kw["rpsolve"] = lambda r, d=np.conj(inv_diag): d * r
    return methods.get(method).reference_solver()(A.__matmul__, b, x, **kw)


class Iterates:
    def __init__(self):
        self.xs = []

    def __call__(self, xk):
        self.xs.append(np.array(xk, copy=True))


POISSON = {
    "poisson1d-40": lambda: laplace_1d(40),
    "poisson2d-20": lambda: laplace_2d(20),
    "poisson2d-20x7": lambda: laplace_2d(20, 7),
}


@pytest.mark.parametrize("name", list(POISSON))
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_iterates_match_scipy(name, method, dtype):
    A = POISSON[name]().astype(dtype)
    b = np.arange(A.shape[0]).astype(dtype)
    rtol = 1e-8 if dtype is np.float64 else 1e-3
    atol = rtol * float(np.linalg.norm(b))
    ours, theirs = Iterates(), Iterates()
    x, info, its = run_ref(method, A, b, atol=atol, maxiter=10 * A.shape[0], callback=ours)
    xs, infos = getattr(sla, method)(A, b, rtol=rtol, callback=theirs)
    assert info == infos == 0
    assert abs(len(ours.xs) - len(theirs.xs)) <= 1
    assert its >= len(ours.xs)
    # the same method in the same arithmetic: the iterates agree step by step
    tol = 1e-10 if dtype is np.float64 else 1e-4
    for k, (a, c) in enumerate(zip(ours.xs, theirs.xs)):
        assert np.linalg.norm(a - c) <= tol * max(np.linalg.norm(c), 1.0), f"iterate {k}"
    assert np.linalg.norm(b - A @ x) < atol or dtype is np.float32


@pytest.mark.parametrize("method", METHODS)
def test_complex_iterates_match_scipy(method):
    rng = np.random.RandomState(1234)
    C = rng.rand(9, 9) + 1j * rng.rand(9, 9)
    A = C.conj() @ C.T + 2 * np.eye(9)
    b = (np.arange(9) + 1j).astype(complex)
    atol = 1e-10 * np.linalg.norm(b)
    ours, theirs = Iterates(), Iterates()
    x, info, its = run_ref(method, A, b, atol=atol, maxiter=200, callback=ours)
    xs, infos = getattr(sla, method)(A, b, rtol=1e-10, callback=theirs)
    assert info == infos == 0
    assert abs(len(ours.xs) - len(theirs.xs)) <= 1
    # Rounding differs (SciPy updates p in place) and Krylov methods amplify it ~10x per step,
    # so only the first steps are compared tightly; a wrong conjugation would differ at O(1).
    for a, c in list(zip(ours.xs, theirs.xs))[:3]:
        assert np.linalg.norm(a - c) <= 1e-12 * np.linalg.norm(c)
    assert np.linalg.norm(b - A @ x) < atol


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("maxiter", [1, 2, 7])
def test_maxiter_honoured_exactly(method, maxiter):
    A = laplace_2d(20)
    b = np.ones(A.shape[0])
    calls = Iterates()
    x, info, its = run_ref(method, A, b, atol=1e-12, maxiter=maxiter, callback=calls)
    assert info == maxiter
    assert its == maxiter
    assert len(calls.xs) == maxiter
    # the callback sees the iterate as it evolves
    assert not np.array_equal(calls.xs[0], np.zeros_like(b))
    if maxiter > 1:
        assert not np.array_equal(calls.xs[-1], calls.xs[0])
    np.testing.assert_array_equal(calls.xs[-1], x)


@pytest.mark.parametrize("method", METHODS)
def test_callback_once_per_iteration(method):
    A = laplace_1d(30)
    b = np.ones(30)
    calls = Iterates()
    x, info, its = run_ref(method, A, b, atol=1e-8 * np.sqrt(30), maxiter=1000, callback=calls)
    assert info == 0
    if method == "bicgstab":
        # a half-step exit (||s|| < atol) counts as an iteration but has no callback, as in SciPy
        assert its - 1 <= len(calls.xs) <= its
    else:
        assert len(calls.xs) == its


@pytest.mark.parametrize("method", METHODS)
def test_x_updated_in_place_and_returned(method):
    A = laplace_1d(10)
    b = np.ones(10)
    x = np.zeros(10)
    out, info, _ = methods.get(method).reference_solver()(
        A.__matmul__, b, x, atol=1e-10, maxiter=100,
        **({"rmatvec": A.T.__matmul__} if method == "bicg" else {}))
    assert out is x
    assert info == 0


@pytest.mark.parametrize("method", METHODS)
def test_converged_start_takes_no_iterations(method):
    A = laplace_1d(10)
    x_star = np.linspace(1, 2, 10)
    b = A @ x_star
    calls = Iterates()
    x, info, its = run_ref(method, A, b, atol=1e-8, maxiter=100, x0=x_star, callback=calls)
    assert (info, its, len(calls.xs)) == (0, 0, 0)
    np.testing.assert_array_equal(x, x_star)


def test_zero_maxiter_returns_immediately():
    A = laplace_1d(10)
    b = np.ones(10)
    x, info, its = run_ref("cg", A, b, atol=1e-8, maxiter=0)
    assert its == 0 and info == 0      # the reference mirrors SciPy; the front end refuses 0
    np.testing.assert_array_equal(x, 0)


# --------------------------------------------------------------------------- breakdowns
BREAKDOWNS = {
    # name: (method, A, b, expected info, expected iterations)
    "sym-nonpd-bicg": ("bicg", *sym_nonpd(), -11, 0),
    "sym-nonpd-bicgstab": ("bicgstab", *sym_nonpd(), -11, 0),
    # BiCG: rho = <r~_1, r_1> = 0 after one step of a nonsymmetric 2x2
    "bicg-rho": ("bicg", np.array([[-1.0, 0.0], [1.0, 1.0]]), np.array([1.0, 0.0]), -10, 1),
    # BiCG: <p~, A p> = 0 at the first step
    "bicg-pAp": ("bicg", np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]), -11, 0),
    # BiCGStab: omega = 0 in step one makes r_1 = s orthogonal to r~, so rho_1 = 0
    "bicgstab-rho": ("bicgstab", np.array([[1.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]), -10, 1),
    # BiCGStab: <r~, A r> = 0 at the first step
    "bicgstab-rv": ("bicgstab", np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]), -11, 0),
}


@pytest.mark.parametrize("name", list(BREAKDOWNS))
def test_breakdown_codes(name):
    method, A, b, expected, expected_its = BREAKDOWNS[name]
    with np.errstate(all="ignore"):
        xs, infos = getattr(sla, method)(A, b, rtol=1e-8, maxiter=50)
        x, info, its = run_ref(method, A, b, atol=1e-8 * np.linalg.norm(b), maxiter=50)
    assert infos == expected, "SciPy must break down the same way on this case"
    assert info == expected
    assert its == expected_its
    assert np.isfinite(x).all()
    np.testing.assert_allclose(x, xs)


@pytest.mark.parametrize("A", [np.array([[0.0, 1.0], [1.0, 0.0]]), np.zeros((3, 3))],
                         ids=["antidiagonal", "zero-matrix"])
def test_cg_breakdown_on_zero_curvature(A):
    """p^T A p == 0 gives a non-finite alpha: documented, CG stops with -10 and leaves x alone."""
    n = A.shape[0]
    b = np.zeros(n)
    b[0] = 1.0
    calls = Iterates()
    with np.errstate(all="ignore"):
        x, info, its = run_ref("cg", A, b, atol=1e-8, maxiter=10, callback=calls)
    assert info == -10
    assert its == 0
    assert calls.xs == []
    np.testing.assert_array_equal(x, np.zeros(n))


def test_cg_indefinite_curvature():
    """diag(1, -1): with b = (1, 1) the very first p^T A p is 0 (-10 at once); with b = (2, 1)
    the curvatures are 3 and -1200/81, finite, and CG solves the 2x2 in two steps."""
    A = np.diag([1.0, -1.0])
    with np.errstate(all="ignore"):
        x, info, its = run_ref("cg", A, np.array([1.0, 1.0]), atol=1e-8, maxiter=10)
    assert (info, its) == (-10, 0)
    b = np.array([2.0, 1.0])
    x, info, its = run_ref("cg", A, b, atol=1e-8, maxiter=10)
    assert (info, its) == (0, 2)
    np.testing.assert_allclose(x, [2.0, -1.0])


def test_cg_indefinite_never_returns_nan():
    A, b = sym_nonpd()
    with np.errstate(all="ignore"):
        x, info, its = run_ref("cg", A, b, atol=1e-8, maxiter=200)
    assert info == -10
    assert np.isfinite(x).all()


# --------------------------------------------------------------------------- non-finite scalars
@pytest.mark.parametrize("name,method,dtype,M", nonfinite_cases.params())
def test_bicg_family_stops_on_a_nonfinite_scalar(name, method, dtype, M):
    """dpsolve extension (CG's, now BiCG's and BiCGStab's too): a non-finite scalar stops the
    solve with -10 at a fixed iteration, x finite (the last finite iterate), where SciPy runs on
    NaN to maxiter."""
    build, methods, _, _ = nonfinite_cases.CASES[name]
    A, b, x0 = build(dtype)
    info_e, its_e, _ = methods[method]
    inv = (1.0 / A.diagonal()).astype(A.dtype) if M else None
    calls = Iterates()
    with np.errstate(all="ignore"):
        x, info, its = run_ref(method, A, b, atol=1e-5 * np.linalg.norm(b.astype(complex)),
                               maxiter=10 * A.shape[0], x0=x0, inv_diag=inv, callback=calls)
    assert (info, its) == (info_e, its_e)
    assert np.isfinite(x).all()
    # a stop at the head or at alpha leaves x as the last callback saw it; BiCGStab's omega-stage
    # stop returns x_j + alpha p^ (no callback for iteration j), as its ||s|| < atol exit does
    assert len(calls.xs) == its
    if calls.xs and not (method == "bicgstab" and methods[method][2] == "omega"):
        np.testing.assert_array_equal(calls.xs[-1], x)
    if name == "trap":
        np.testing.assert_array_equal(x, nonfinite_cases.trap_solution(dtype))
    if name == "huge":                      # -10 at alpha in the first step: x untouched
        np.testing.assert_array_equal(x, np.zeros_like(x))
    if name == "t0":                        # x = x_0 + alpha p^ = (1, 1)
        np.testing.assert_array_equal(x, np.ones_like(x))


@pytest.mark.parametrize("method", ["bicg", "bicgstab"])
def test_scipy_iterates_on_nan_where_dpsolve_stops(method):
    """The departure from SciPy, documented: on the same system SciPy returns info = maxiter and
    a NaN x."""
    A, b, _ = nonfinite_cases.huge("float32")
    with np.errstate(all="ignore"):
        xs, infos = getattr(sla, method)(A, b, maxiter=9)
        x, info, its = run_ref(method, A, b, atol=1e-5 * np.linalg.norm(b), maxiter=9)
    assert infos == 9 and np.isnan(xs).all()
    assert (info, its) == (-10, 0) and np.isfinite(x).all()


# --------------------------------------------------------------------------- preconditioning
def badly_scaled_spd():
    T = laplace_2d(15)
    d = np.logspace(0, 3, T.shape[0])
    return (sp.diags_array(d) @ T @ sp.diags_array(d)).tocsr()


@pytest.mark.parametrize("method", METHODS)
def test_jacobi_cuts_iterations(method):
    A = badly_scaled_spd()
    b = A @ np.ones(A.shape[0])
    atol = 1e-8 * np.linalg.norm(b)
    inv = 1.0 / A.diagonal()
    _, info_p, its_p = run_ref(method, A, b, atol=atol, maxiter=5000, inv_diag=inv)
    _, info_u, its_u = run_ref(method, A, b, atol=atol, maxiter=5000)
    assert info_p == 0
    assert info_u in (0, 5000) or info_u < 0
    assert its_p < its_u, f"Jacobi {its_p} iterations, unpreconditioned {its_u}"
    assert its_p * 3 < its_u


@pytest.mark.parametrize("method", METHODS)
def test_jacobi_matches_scipy_with_diagonal_M(method):
    A = badly_scaled_spd()
    n = A.shape[0]
    b = A @ np.ones(n)
    inv = 1.0 / A.diagonal()
    M = LinearOperator((n, n), matvec=lambda v: inv * v, rmatvec=lambda v: inv * v, dtype=float)
    ours, theirs = Iterates(), Iterates()
    x, info, its = run_ref(method, A, b, atol=1e-8 * np.linalg.norm(b), maxiter=5000,
                           inv_diag=inv, callback=ours)
    xs, infos = getattr(sla, method)(A, b, rtol=1e-8, M=M, callback=theirs)
    assert info == infos == 0
    assert abs(len(ours.xs) - len(theirs.xs)) <= 1
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)


# --------------------------------------------------------------------------- the rho confirmation
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_dot_accurate_is_correctly_rounded(dtype):
    from dpsolve.reference._util import dot_accurate
    big = 1e8 if np.dtype(dtype).char in "fF" else 1e17
    x = np.array([big, 1.0, -big, 1.0, 3.0]).astype(dtype)
    y = np.ones(5, dtype)
    assert dot_accurate(x, y) == 5.0 and dot_accurate(x, y).dtype == np.dtype(dtype)
    if np.iscomplexobj(x):
        z = (x * 1j).astype(dtype)                            # <z, y> = conj(i) * 5
        assert dot_accurate(z, y) == -5j
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(1000), rng.standard_normal(1000)
    assert dot_accurate(a, b) == pytest.approx(np.dot(a, b), rel=1e-12)


def test_near_orthogonal_rho_is_not_a_breakdown(matrix_dir):
    """orsirr_1 + BiCGStab + Jacobi: <r~, r> turns near-orthogonal (~1e-17 relative) on the way,
    and NumPy's dot cancels it to exactly 0 for some right-hand sides perturbed by 1e-15 (4 of
    these 12 on x86, which SciPy reports as -10). With the confirmation all 12 converge."""
    from dpsolve.matrices import paper_rhs, read_matrix
    A = read_matrix(matrix_dir / "orsirr_1.mtx.gz")
    b, _ = paper_rhs(A)
    inv = 1.0 / A.diagonal()
    for seed in range(12):
        rhs = b * (1 + 1e-15 * np.random.default_rng(seed).standard_normal(b.size))
        atol = 1e-8 * np.linalg.norm(rhs)
        x, info, its = reference.bicgstab(A.__matmul__, rhs, np.zeros_like(rhs), atol=atol,
                                          maxiter=10_000, psolve=lambda v: inv * v)
        assert info == 0, f"seed {seed}: info {info} at {its}"
        assert np.linalg.norm(rhs - A @ x) <= atol
