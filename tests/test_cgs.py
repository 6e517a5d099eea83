"""dpsolve.cgs, the method table's second folder method: the host reference against SciPy's cgs
(CPU), and variant cublas against SciPy and the reference (GPU machines), in float32 / float64,
real and complex, at awkward sizes, with Jacobi and operator preconditioners, x0, callbacks,
maxiter, SciPy's breakdowns and dpsolve's non-finite stop."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from scipy.sparse.linalg import LinearOperator

import dpsolve
import nonfinite_cases
from scipy_cases import nonsym_dominant
from dpsolve import methods
from dpsolve._system import make_system
from dpsolve.backends import VARIANT_NAMES, get_backend
from dpsolve.methods.cgs import reference

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
SIZES = (1, 2, 3, 17, 100, 1000)


_system = nonsym_dominant      # a few CGS steps converge on it


def _single(dtype):
    return np.dtype(dtype).char in "fF"


def _rtol(dtype):
    return 1e-4 if _single(dtype) else 1e-9


def _close(dtype):
    """How close two solves of the same iteration are (rounding of SpMV and M differs)."""
    return 1e-3 if _single(dtype) else 1e-8


class Iterates:
    """A callback keeping copies of the iterates. Not a list: SciPy tests ``if callback:``, and
    an empty list is false."""

    def __init__(self):
        self.xs = []

    def __call__(self, xk):
        self.xs.append(np.array(xk, copy=True))


# (A, b, SciPy's info, the iteration it stops at): every step exact in binary arithmetic, so
# SciPy (and dpsolve) break down there in every dtype and summation order
BREAKDOWNS = {
    # r = r~ = (1, -1): <r~, A r> = 1 - 1 = 0 at once
    "rv-at-0": ([[1, 0], [0, -1]], [1, -1], -11, 0),
    # alpha = 3/2, r_1 = (-11/2, 5, 1), <r~, r_1> = -11 + 10 + 1 = 0
    "rho-at-1": ([[1, 2, -2], [0, 0, -1], [0, 0, 0]], [2, 2, 1], -10, 1),
    # alpha = -1, then 1 (x_2 = (1, 1, -2)), and <r~, r_2> = 0
    "rho-at-2": ([[-1, 1, -1], [0, 0, -1], [0, -1, -1]], [0, 2, 1], -10, 2),
}


def test_in_the_method_table():
    m = methods.get("cgs")
    assert methods.implemented("cgs", "host") and methods.implemented("cgs", "cublas")
    assert "cgs" in methods.methods_of("cublas") and "cgs" not in methods.methods_of("merge")
    for variant in ("cuda", "merge", "dynamic", "graph", "persistent"):
        assert not methods.implemented("cgs", variant)
    assert m.reference_solver() is reference.cgs
    assert set(m.info_codes) == {-10, -11} and not m.adjoint and not m.options
    assert m.callback_gets_x
    assert "cgs" in dpsolve.__all__ and dpsolve.cgs.__name__ == "cgs"
    doc = dpsolve.cgs.__doc__
    assert doc.startswith("Solve ``Ax = b`` with the Conjugate Gradient Squared method.")
    assert "-10 rho breakdown, -11 <r~, v> == 0" in doc and "scipy.sparse.linalg.cgs" in doc


def test_other_variants_refuse_cgs_by_name():
    """Decided without a GPU: a variant without an implementation names those that have one."""
    A, b = _system(20, np.float64)
    system = make_system("cgs", A, b, None, None)
    for variant in VARIANT_NAMES[2:]:
        why = get_backend(variant).why_not(system)
        assert why is not None and "not cgs; cgs runs on 'host', 'cublas'" in why
    assert get_backend("cublas").why_not(system) is None


# --------------------------------------------------------------------------- host vs SciPy
def _check_against_scipy(variant, n, dtype, M=None, maxiter=None, x0=None):
    """dpsolve.cgs on ``variant`` and SciPy's cgs on the same system: info, the callbacks (one per
    iteration), the solution, and the kind of array that comes back.

    The iterates are compared one by one in double precision only: CGS squares its residual
    polynomial, and where a step nearly breaks down (a small <r~, v>) it amplifies rounding
    differences (of M, of a GPU's sums) by 1e4 or more for that iterate (complex64, n = 100: 1e-7
    becomes 3e-3, and the next iterate agrees again to 2e-7); in single precision the count
    may then move by one, as the front end's tests allow for every method."""
    A, b = _system(n, dtype)
    if M == "jacobi":
        M = sp.diags(1 / A.diagonal())
    kw = dict(rtol=_rtol(dtype), maxiter=maxiter, M=M)
    ours, theirs = Iterates(), Iterates()
    x0_saved = None if x0 is None else x0.copy()
    x, info, rep = dpsolve.cgs(A, b, x0, variant=variant, full_output=True, callback=ours, **kw)
    xs, infos = sla.cgs(A, b, None if x0 is None else x0.copy(), callback=theirs, **kw)
    assert info == infos and rep.variant == variant
    assert isinstance(x, np.ndarray) and x.dtype == b.dtype and x.shape == (n,)
    assert x0 is None or np.array_equal(x0, x0_saved)
    assert len(ours.xs) == rep.iterations
    single = _single(dtype)
    if variant == "host" or not single:
        assert rep.iterations == len(theirs.xs)
    else:
        assert abs(rep.iterations - len(theirs.xs)) <= 1
    if variant == "host":
        assert rep.restarts == 0          # the residual CGS tests is the true one already
    tol = _close(dtype)
    if infos == 0:
        slack = 1.01 if single else 1.0001         # rounding of NumPy's ||b - A x||
        assert np.linalg.norm(b - A @ x) <= _rtol(dtype) * np.linalg.norm(b) * slack
        assert rep.residual_norm <= rep.tolerance
    if not single:
        for mine, scipys in zip(ours.xs, theirs.xs):
            np.testing.assert_allclose(mine, scipys, rtol=tol, atol=tol * np.abs(scipys).max())
    assert np.linalg.norm(x - xs) <= tol * np.linalg.norm(xs)
    return rep


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("M", [None, "jacobi"])
def test_host_matches_scipy(dtype, n, M):
    _check_against_scipy("host", n, dtype, M)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_runs_scipys_iterates(dtype):
    """The reference alone (no front end), on SciPy's operators: SciPy's iterates bit for bit,
    as the same NumPy operations on the same operands in the same order give (the true residual
    b - A x, not the recurrence's, and SciPy's operand order in complex products: either
    departure moves the iterates by a few ulps only, which no tolerance would tell)."""
    A, b = _system(300, dtype)
    ours, theirs = Iterates(), Iterates()
    atol = _rtol(dtype) * np.linalg.norm(b)
    x, info, its = reference.cgs(A.__matmul__, b, np.zeros_like(b), atol=atol, maxiter=3000,
                                 callback=ours)
    xs, infos = sla.cgs(A, b, rtol=0, atol=atol, callback=theirs)
    assert info == infos == 0 and its == len(ours.xs) == len(theirs.xs) > 3
    for mine, scipys in zip(ours.xs, theirs.xs):
        np.testing.assert_array_equal(mine, scipys)


@pytest.mark.parametrize("dtype", (np.float64, np.complex128))
def test_host_operator_M(dtype):
    """A general preconditioner (SciPy's incomplete LU) as an operator, as SciPy takes it: SciPy's
    count and solution, and far fewer iterations than without it."""
    A, b = _system(1000, dtype, seed=3)
    A = (A + sp.diags(np.linspace(0, 40, 1000))).tocsr()           # badly scaled: M matters
    ilu = sla.spilu(A.tocsc(), drop_tol=1e-2)
    M = LinearOperator(A.shape, matvec=ilu.solve, dtype=A.dtype)
    ours, theirs = Iterates(), Iterates()
    x, info, rep = dpsolve.cgs(A, b, rtol=1e-10, M=M, callback=ours, variant="host",
                               full_output=True)
    xs, infos = sla.cgs(A, b, rtol=1e-10, M=M, callback=theirs)
    _, _, plain = dpsolve.cgs(A, b, rtol=1e-10, variant="host", full_output=True)
    assert info == infos == 0 and len(ours.xs) == len(theirs.xs) == rep.iterations
    assert rep.iterations < plain.iterations / 2
    np.testing.assert_allclose(x, xs, rtol=1e-8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_x0(dtype):
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal(100).astype(dtype)
    rep = _check_against_scipy("host", 100, dtype, x0=x0)
    assert rep.iterations > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_maxiter_reached(dtype):
    """maxiter=3 on a system that needs more: info 3 as SciPy's, after three callbacks."""
    rep = _check_against_scipy("host", 1000, dtype, maxiter=3)
    assert rep.info == rep.iterations == 3 and rep.converged is False


def test_host_exact_x0_returns_at_once():
    A, b = _system(50, np.float64)
    x_exact = np.linalg.solve(A.toarray(), b)
    calls = Iterates()
    x, info, rep = dpsolve.cgs(A, A @ x_exact, x_exact, callback=calls, variant="host",
                               full_output=True)
    assert info == 0 and rep.iterations == 0 and not calls.xs
    np.testing.assert_array_equal(x, x_exact)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", BREAKDOWNS)
def test_host_breakdowns_as_scipys(case, dtype):
    A, b, code, at = BREAKDOWNS[case]
    A, b = np.array(A, dtype=dtype), np.array(b, dtype=dtype)
    ours, theirs = Iterates(), Iterates()
    with np.errstate(all="ignore"):
        xs, infos = sla.cgs(A, b, rtol=1e-10, callback=theirs)
        x, info, rep = dpsolve.cgs(A, b, rtol=1e-10, callback=ours, variant="host",
                                   full_output=True)
    assert infos == code, "the case itself must break down in SciPy"
    assert info == code and rep.iterations == len(ours.xs) == len(theirs.xs) == at
    assert rep.converged is False
    np.testing.assert_array_equal(x, xs)


def test_sym_nonpd_breaks_down_as_scipy():
    """SciPy's sym-nonpd case (bicg and bicgstab break down on it): CGS's <r~, A r> is 0 at once."""
    from scipy_cases import sym_nonpd
    A, b = sym_nonpd()
    xs, infos = sla.cgs(A, b, rtol=1e-8)
    x, info = dpsolve.cgs(A, b, rtol=1e-8, variant="host")
    assert info == infos == -11
    np.testing.assert_array_equal(x, xs)


@pytest.mark.parametrize("which", ["rho", "rv"])
def test_breakdown_confirmed_with_the_accurate_dot(monkeypatch, which):
    """A fast inner product that cancels to 0 where the exact one does not (what a summation order
    can do on a near-orthogonal pair) is recomputed with dot_accurate before it is a breakdown:
    the solve goes on and converges. Without the confirmation it stops with -10 / -11."""
    A, b = _system(200, np.float64)
    atol = 1e-10 * np.linalg.norm(b)
    x_ref, info_ref, its_ref = reference.cgs(A.__matmul__, b, np.zeros_like(b), atol=atol,
                                             maxiter=2000)
    real_dotprod = reference.dotprod
    calls = {"n": 0}
    lie_at = 2 if which == "rho" else 3        # dots per iteration: rho, then <r~, v>

    def lying_dotprod(x):
        dot = real_dotprod(x)

        def fast(a, c):
            calls["n"] += 1
            return dot(a, c) * 0 if calls["n"] == lie_at + 1 else dot(a, c)
        return fast
    monkeypatch.setattr(reference, "dotprod", lying_dotprod)
    x, info, its = reference.cgs(A.__matmul__, b, np.zeros_like(b), atol=atol, maxiter=2000)
    assert calls["n"] > lie_at + 1, "the lie was told"
    assert info == info_ref == 0 and abs(its - its_ref) <= 1
    np.testing.assert_allclose(x, x_ref, rtol=1e-8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_nonfinite_stops_with_minus_10(dtype, unscaled_rhs):
    """dpsolve's extension, as BiCG's: where SciPy iterates on NaN or inf to maxiter, CGS stops
    with -10 and a finite x. "huge": <r~, A r> overflows in the first iteration (x untouched);
    "trap": the residual after the first step overflows (-10 at 1, after its callback)."""
    dt = np.dtype(dtype).name
    A, b, _ = nonfinite_cases.huge(dt)
    with np.errstate(all="ignore"):
        xs, infos = sla.cgs(A, b, maxiter=20)
        x, info, rep = dpsolve.cgs(A, b, maxiter=20, variant="host", full_output=True)
    assert infos == 20
    assert info == -10 and rep.iterations == 0
    np.testing.assert_array_equal(x, 0)
    A, b, x0 = nonfinite_cases.trap(dt)
    calls = Iterates()
    with np.errstate(all="ignore"):
        xs, infos = sla.cgs(A, b, x0.copy(), maxiter=20)
        x, info, rep = dpsolve.cgs(A, b, x0, maxiter=20, callback=calls, variant="host",
                                   full_output=True)
    assert infos == 20 and not np.isfinite(xs).all()
    assert info == -10 and rep.iterations == len(calls.xs) == 1 and np.isfinite(x).all()


def test_prepared_cgs():
    A, b = _system(300, np.float64)
    P = dpsolve.prepare(A, "cgs", variant="host")
    for seed in (1, 2):
        rhs = np.random.default_rng(seed).standard_normal(300)
        x, info = P.solve(rhs, rtol=1e-10)
        xs, infos = sla.cgs(A, rhs, rtol=1e-10)
        assert info == infos == 0
        np.testing.assert_allclose(x, xs, rtol=1e-8)


# --------------------------------------------------------------------------- GPU (cublas)
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("M", [None, "jacobi"])
def test_cublas_matches_scipy(dtype, n, M):
    _check_against_scipy("cublas", n, dtype, M)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [None, "jacobi"])
def test_cublas_matches_the_reference(dtype, M):
    """Against the host reference (iterate by iterate in double precision: see
    _check_against_scipy); the host waits and launches per iteration that gpu.py's docstring
    states (3 waits; 17 launches, 19 with Jacobi)."""
    A, b = _system(500, dtype, seed=2)
    M = sp.diags(1 / A.diagonal()) if M else None
    ours, ref = Iterates(), Iterates()
    x, info, rep = dpsolve.cgs(A, b, rtol=_rtol(dtype), M=M, callback=ours, variant="cublas",
                               full_output=True)
    xh, info_h, rep_h = dpsolve.cgs(A, b, rtol=_rtol(dtype), M=M, callback=ref, variant="host",
                                    full_output=True)
    assert info == info_h == 0 and rep.iterations == len(ours.xs) > 2
    tol = _close(dtype)
    if _single(dtype):
        assert abs(rep.iterations - rep_h.iterations) <= 1
    else:
        assert rep.iterations == rep_h.iterations
        for mine, host in zip(ours.xs, ref.xs):
            np.testing.assert_allclose(mine, host, rtol=tol, atol=tol * np.abs(host).max())
    assert np.linalg.norm(x - xh) <= tol * np.linalg.norm(xh)
    assert rep.restarts == 0 or _single(dtype)     # float32: tau and the check round apart
    if rep.restarts == 0:
        its = rep.iterations
        assert rep.host_syncs == 2 + 3 * its       # set-up's ||r||, 3 per iteration, the check
        assert rep.host_launches == 1 + (19 if M is not None else 17) * its


@pytest.mark.gpu
def test_cublas_cupy_in_cupy_out_and_operators():
    import cupy
    import cupyx.scipy.sparse as csp
    A, b = _system(400, np.float64)
    xs, _ = sla.cgs(A, b, rtol=1e-10)
    x, info = dpsolve.cgs(csp.csr_matrix(A), cupy.asarray(b), variant="cublas", rtol=1e-10)
    assert isinstance(x, cupy.ndarray) and info == 0
    np.testing.assert_allclose(x.get(), xs, rtol=1e-8)
    x2, info2 = dpsolve.cgs(sla.aslinearoperator(A), b, variant="cublas", rtol=1e-10)
    assert isinstance(x2, np.ndarray) and info2 == 0
    np.testing.assert_allclose(x2, xs, rtol=1e-8)
    ilu = sla.spilu(A.tocsc(), drop_tol=1e-3)
    M = LinearOperator(A.shape, matvec=ilu.solve, dtype=A.dtype)
    x3, info3, rep3 = dpsolve.cgs(A, b, rtol=1e-10, M=M, variant="cublas", full_output=True)
    _, info_h, rep_h = dpsolve.cgs(A, b, rtol=1e-10, M=M, variant="host", full_output=True)
    assert info3 == info_h == 0 and abs(rep3.iterations - rep_h.iterations) <= 1
    np.testing.assert_allclose(x3, xs, rtol=1e-8)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", BREAKDOWNS)
def test_cublas_breakdowns_as_the_reference(case, dtype):
    A, b, code, at = BREAKDOWNS[case]
    A, b = sp.csr_array(np.array(A, dtype=dtype)), np.array(b, dtype=dtype)
    x, info, rep = dpsolve.cgs(A, b, rtol=1e-10, variant="cublas", full_output=True)
    xh, _ = dpsolve.cgs(A, b, rtol=1e-10, variant="host")
    assert info == code and rep.iterations == at
    np.testing.assert_array_equal(x, xh)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_cublas_nonfinite_as_the_reference(dtype, unscaled_rhs):
    dt = np.dtype(dtype).name
    for build in (nonfinite_cases.huge, nonfinite_cases.trap):
        A, b, x0 = build(dt)
        with np.errstate(all="ignore"):
            x, info, rep = dpsolve.cgs(A, b, x0, maxiter=20, variant="cublas", full_output=True)
            xh, info_h, rep_h = dpsolve.cgs(A, b, x0, maxiter=20, variant="host",
                                            full_output=True)
        assert info == info_h == -10 and rep.iterations == rep_h.iterations
        assert np.isfinite(x).all()
        np.testing.assert_allclose(x, xh, rtol=1e-6)


@pytest.mark.gpu
def test_other_gpu_variants_refuse_cgs_by_name():
    A, b = _system(50, np.float64)
    with pytest.raises(ValueError, match="cgs runs on 'host', 'cublas'"):
        dpsolve.cgs(A, b, variant="merge")
