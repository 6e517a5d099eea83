"""Variants "dynamic" (CDP2 tail-launch chains) and "persistent" (one cooperative kernel), one host
launch and one host wait per solve, for cg, bicg and bicgstab: the device-recorded residual
history against the reference's norm sequence, launch and sync counts, maxiter, NaN systems (-10)
and SciPy's breakdown codes (GPU only).
"""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import dpsolve
from dpsolve import methods, reference
from dpsolve.backends import get_backend
from dpsolve.matrices import laplace_2d

pytestmark = pytest.mark.gpu

METHODS = methods.methods_of("dynamic")      # the method table's (persistent runs the same)
FORMATS = ("csr-scalar", "csr-vector", "ell")
LAUNCHES_PER_ITER = {"cg": 2, "bicg": 2, "bicgstab": 3}
# persistent shares dynamic's device state, result area and residual history (one kernel instead
# of the chain): the whole module runs on both
DEVICE_DRIVEN = ("dynamic", "persistent")


@pytest.fixture(autouse=True, params=DEVICE_DRIVEN)
def variant(request):
    ok, reason = get_backend(request.param).availability()
    if not ok:
        pytest.skip(reason)
    return request.param


# --------------------------------------------------------------------------- problems
def convdiff(m, c=0.3):
    """Nonsymmetric 2-D convection-diffusion (central differences, mesh Peclet c < 1), n = m^2."""
    T = sp.diags_array([(-1 - c) * np.ones(m - 1), 2 * np.ones(m), (-1 + c) * np.ones(m - 1)],
                       offsets=[-1, 0, 1], shape=(m, m))
    eye = sp.eye_array(m)
    return (sp.kron(eye, T) + sp.kron(T, eye)).tocsr()


def rand_diag_dominant(n=300, per_row=20, seed=3):
    """Random nonsymmetric, strictly diagonally dominant, ~per_row entries a row (CSR-vector picks
    a wider lane group than for the stencils; A^H has rows of other lengths)."""
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, n), density=per_row / n, rng=rng, format="csr")
    A = A - sp.diags_array(A.diagonal())
    d = np.abs(A).sum(axis=1) + 1.0 + rng.uniform(0, 1, n)
    return (A + sp.diags_array(d)).tocsr()


def problem(method):
    A = laplace_2d(20) if method == "cg" else convdiff(20)
    b = np.random.default_rng(7).standard_normal(A.shape[0])
    return A, b


# --------------------------------------------------------------------------- the reference
class NormRecorder:
    """Wraps the norm the reference solvers take (through their space, ``LocalSpace.norm``) and
    records every value it returns, in order."""

    def __init__(self, method, monkeypatch):
        from dpsolve.reference._util import LocalSpace
        self.values = []
        inner = LocalSpace.norm

        def norm(space, v):
            val = inner(space, v)
            self.values.append(val)
            return val
        monkeypatch.setattr(LocalSpace, "norm", norm)


def reference_run(method, A, b, atol, maxiter, inv_diag=None, monkeypatch=None):
    """(x, info, its, expected residual history) of the reference. The history is one entry per
    iterate x_k: the norm the reference tests at the head of iteration k (for BiCGStab ||r_k||,
    not the mid-iteration ||s||, except after the ||s|| < atol exit, where ||s|| is the residual of
    the returned x). CG needs a preconditioner here: without one it tests sqrt(<r, r>), not
    norm()."""
    rec = NormRecorder(method, monkeypatch)
    A = sp.csr_array(A)
    kw = dict(atol=atol, maxiter=maxiter)
    if inv_diag is not None:
        kw["psolve"] = lambda r, d=inv_diag: d * r
    if method == "bicg":
        kw["rmatvec"] = A.conj().T.tocsr().__matmul__
        if inv_diag is not None:
            kw["rpsolve"] = lambda r, d=np.conj(inv_diag): d * r
    x, info, its = methods.get(method).reference_solver()(A.__matmul__, b, np.zeros_like(b), **kw)
    seq = rec.values
    if method == "bicgstab":
        heads = seq[0::2]
        seq = heads + [seq[-1]] if (info == 0 and len(seq) % 2 == 0) else heads
    return x, info, its, np.array(seq)


# --------------------------------------------------------------------------- residual history
@pytest.mark.parametrize("jacobi", [False, True], ids=["plain", "jacobi"])
@pytest.mark.parametrize("method", METHODS)
def test_residual_history_matches_reference(method, jacobi, monkeypatch, variant):
    if method == "cg" and not jacobi:
        pytest.skip("covered below: unpreconditioned CG tests sqrt(<r, r>), not norm(r)")
    A, b = problem(method)
    rtol = 1e-8
    inv_diag = 1.0 / A.diagonal() if jacobi else None
    _, info_r, its_r, expected = reference_run(method, A, b, rtol * np.linalg.norm(b), 10 * len(b),
                                               inv_diag, monkeypatch)
    assert info_r == 0
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=rtol, M="jacobi" if jacobi else None,
                                            variant=variant, full_output=True)
    assert info == 0 and rep.restarts == 0
    assert abs(rep.iterations - its_r) <= 1
    res = rep.residuals
    assert isinstance(res, np.ndarray) and res.dtype == np.float64
    assert len(res) == rep.iterations + 1                      # one entry per iterate x_0 .. x_k
    assert len(expected) == its_r + 1
    k = min(len(res), len(expected)) - 1                       # compare the common prefix
    np.testing.assert_allclose(res[:k], expected[:k], rtol=1e-6, atol=1e-12 * expected[0])
    assert res[-1] < rep.tolerance <= res[-2]                  # the last test passed, not earlier


def test_cg_history_unpreconditioned_against_true_residuals(variant):
    A, b = problem("cg")
    xs = []
    reference.cg(A.__matmul__, b, np.zeros_like(b), atol=1e-8 * np.linalg.norm(b), maxiter=4000,
                 callback=lambda xk: xs.append(xk.copy()))
    true = [np.linalg.norm(b)] + [np.linalg.norm(b - A @ xk) for xk in xs]
    _, info, rep = dpsolve.cg(A, b, rtol=1e-8, variant=variant, full_output=True)
    assert info == 0 and len(rep.residuals) == rep.iterations + 1
    assert abs(len(true) - len(rep.residuals)) <= 1
    k = min(len(true), len(rep.residuals))
    # the recurrence residual tracks the true one closely in float64 on this small problem
    np.testing.assert_allclose(rep.residuals[:k], true[:k], rtol=1e-5, atol=1e-12 * true[0])


def test_history_is_kept_in_float32_too(variant):
    A, b = problem("bicgstab")
    _, info, rep = dpsolve.bicgstab(A.astype(np.float32), b.astype(np.float32), rtol=1e-4,
                                    variant=variant, full_output=True)
    assert info == 0 and rep.residuals.dtype == np.float32
    assert len(rep.residuals) == rep.iterations + 1 + rep.restarts


def test_history_absent_for_huge_maxiter(variant):
    from dpsolve.backends.dynamic import HISTORY_MAX_ITER
    A, b = problem("bicg")
    _, info, rep = dpsolve.bicg(A, b, rtol=1e-8, maxiter=HISTORY_MAX_ITER + 1, variant=variant,
                                full_output=True)
    assert info == 0 and rep.residuals is None


# --------------------------------------------------------------------------- launches and syncs
@pytest.mark.parametrize("sync", ["polling", "blocking"])
@pytest.mark.parametrize("method", METHODS)
def test_one_host_launch_one_host_wait(method, sync, variant):
    A, b = problem(method)
    _, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-8, variant=variant, sync=sync,
                                            full_output=True)
    assert info == 0 and rep.restarts == 0 and rep.iterations > 5
    assert rep.host_launches == 1
    assert rep.host_syncs == 1
    assert rep.device_launches_per_iter == (LAUNCHES_PER_ITER[method] if variant == "dynamic"
                                            else 0)


def test_launches_per_iter_match_the_module_docs(variant):
    from dpsolve.cuda import ops
    assert ops.DYNAMIC_LAUNCHES_PER_ITER == LAUNCHES_PER_ITER["cg"]
    assert ops.BICG_DYNAMIC_LAUNCHES_PER_ITER == LAUNCHES_PER_ITER["bicg"]
    assert ops.BICGSTAB_DYNAMIC_LAUNCHES_PER_ITER == LAUNCHES_PER_ITER["bicgstab"]


# ------------------------------------------------------------------------- every format x dtype x M
PROBLEMS = {"convdiff": lambda: convdiff(23, 0.5), "randdd": rand_diag_dominant}


@pytest.mark.parametrize("jacobi", [False, True], ids=["plain", "jacobi"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("method", ["bicg", "bicgstab"])
def test_formats_dtypes_jacobi(method, name, fmt, dtype, jacobi, monkeypatch, variant):
    A = PROBLEMS[name]().astype(dtype)
    b = np.random.default_rng(11).standard_normal(A.shape[0]).astype(dtype)
    rtol = 1e-8 if dtype == np.float64 else 1e-4
    inv_diag = (1.0 / A.diagonal()).astype(dtype) if jacobi else None
    _, info_r, its_r, _ = reference_run(method, A, b, rtol * float(np.linalg.norm(b)), 10 * len(b),
                                        inv_diag, monkeypatch)
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=rtol, M="jacobi" if jacobi else None,
                                            variant=variant, format=fmt, full_output=True)
    assert rep.format == fmt and x.dtype == dtype
    assert info == 0 and info_r == 0
    assert rep.residual_norm <= rep.tolerance
    if dtype == np.float64:
        assert rep.restarts == 0 and abs(rep.iterations - its_r) <= 1
    elif rep.restarts == 0:         # float32: rounding differs from the float32 reference's
        assert abs(rep.iterations - its_r) <= max(2, its_r // 5)
    # one host launch and one host wait per run (a restart from the true residual is a new run)
    assert rep.host_launches == 1 + rep.restarts and rep.host_syncs == 1 + rep.restarts
    assert len(rep.residuals) == rep.iterations + 1 + rep.restarts


# --------------------------------------------------------------------------- maxiter, NaN
@pytest.mark.parametrize("maxiter", [1, 2, 7])
@pytest.mark.parametrize("method", ["bicg", "bicgstab"])
def test_maxiter_is_honoured_exactly(method, maxiter, variant):
    A, b = problem(method)
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-14, maxiter=maxiter, variant=variant,
                                            full_output=True)
    assert info == maxiter and rep.iterations == maxiter
    assert len(rep.residuals) == maxiter + 1
    kw = {"rmatvec": A.T.tocsr().__matmul__} if method == "bicg" else {}
    xr, info_r, its_r = methods.get(method).reference_solver()(A.__matmul__, b, np.zeros_like(b),
                                                  atol=1e-14 * np.linalg.norm(b), maxiter=maxiter,
                                                  **kw)
    assert (info_r, its_r) == (maxiter, maxiter)
    np.testing.assert_allclose(x, xr, rtol=1e-10, atol=1e-12)


def nan_case(method, dtype):
    """Systems on which SciPy's scalars turn NaN: no breakdown test fires, SciPy runs to maxiter.
    BiCG: A = huge * I overflows <p~, A p> to inf (alpha = 0), then A p to inf (0 * inf = NaN).
    BiCGStab: t = A s = 0 with s != 0 (A singular) gives omega = 0/0. dpsolve stops at the
    non-finite scalar with -10 (tests/test_gpu_nonfinite.py has more of these, on every variant).
    The huge A is one dpsolve otherwise scales (``_system.scale_matrix``) and solves: the test
    turns that off (``unscaled_rhs``)."""
    if method == "bicg":
        big = 1e308 if dtype == np.float64 else 3e38
        return sp.csr_array(sp.eye_array(4, dtype=dtype) * dtype(big)), np.ones(4, dtype)
    return sp.csr_array(np.array([[1, 1], [0, 0]], dtype)), np.ones(2, dtype)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("method", ["bicg", "bicgstab"])
def test_nan_scalars_stop_with_minus_10(method, dtype, fmt, variant, unscaled_rhs):
    A, b = nan_case(method, dtype)
    maxiter = 9
    with np.errstate(all="ignore"):
        xs, infos = getattr(sla, method)(A, b, maxiter=maxiter)
        x, info, rep = getattr(dpsolve, method)(A, b, maxiter=maxiter, variant=variant,
                                                format=fmt, full_output=True)
        xr, info_r, ref = getattr(dpsolve, method)(A, b, maxiter=maxiter, variant="host",
                                                   full_output=True)
    assert infos == maxiter and np.isnan(xs).all(), "SciPy must iterate on NaN to maxiter here"
    assert info == info_r == -10 and rep.iterations == ref.iterations == 0
    np.testing.assert_array_equal(x, xr)     # BiCG: x0 = 0 untouched; BiCGStab: alpha p^ = 1
    assert rep.host_launches == 1 and rep.host_syncs == 1
    assert len(rep.residuals) == 1 and np.isfinite(rep.residuals).all()


# --------------------------------------------------------------------------- breakdowns
def _sym_nonpd():
    from scipy_cases import sym_nonpd
    return sym_nonpd()


BREAKDOWNS = {
    # name: (method, A, b, SciPy's info (or the infos accepted), the reference's iterations)
    "sym-nonpd-bicg": ("bicg", *_sym_nonpd(), -11, 0),
    "sym-nonpd-bicgstab": ("bicgstab", *_sym_nonpd(), -11, 0),
    "bicg-rho": ("bicg", np.array([[-1.0, 0.0], [1.0, 1.0]]), np.array([1.0, 0.0]), -10, 1),
    "bicg-pAp": ("bicg", np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]), -11, 0),
    "bicgstab-rho": ("bicgstab", np.array([[1.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]), -10, 1),
    "bicgstab-rv": ("bicgstab", np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]), -11, 0),
    # BiCGStab's omega test: alpha = 1/3, s = -(1, 2, 1)/3 and t = A s = (-2, 2, -2)/3 give
    # <t, s> = 0 exactly, so omega_0 = 0. rho_1 = <r~, s> is 0 in exact arithmetic and rounding
    # noise (~eps) in floating point: then -11 at iteration 1 (omega), but where a platform's
    # rounding makes rho_1 exactly 0 it is -10 at 1 (SciPy itself gives -11 on one machine and
    # -10 on another in float64). Both outcomes are accepted, for SciPy and dpsolve alike.
    "bicgstab-omega": ("bicgstab", np.array([[0.0, 0.0, 2.0], [-2.0, 1.0, -2.0], [1.0, 0.0, 1.0]]),
                       np.array([-1.0, 1.0, -1.0]), (-11, -10), 1),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", list(BREAKDOWNS))
def test_breakdown_codes_like_scipy(name, dtype, fmt, variant):
    method, A, b, expected, its = BREAKDOWNS[name]
    if fmt == "ell" and name.startswith("sym-nonpd"):
        pytest.skip("ELL refuses sym-nonpd (2.2x padding)")
    A, b = sp.csr_array(A.astype(dtype)), b.astype(dtype)
    with np.errstate(all="ignore"):
        xs, infos = getattr(sla, method)(A, b, rtol=1e-8, maxiter=50)
        x, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-8, maxiter=50, variant=variant,
                                                format=fmt, full_output=True)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert infos in expected, "SciPy must break down the same way on this case"
    assert info in expected and rep.iterations == its
    assert np.isfinite(x).all()
    np.testing.assert_allclose(x, xs, rtol=1e-6, atol=1e-7)   # x left where SciPy leaves it
    assert rep.host_launches == 1 and rep.host_syncs == 1
    assert len(rep.residuals) == its + 1


def test_bicgstab_exit_on_small_s_returns_j_plus_one(variant):
    """A = I: s = r - alpha A r = 0 in the first iteration, so BiCGStab exits half-way with
    x = alpha p^ after 1 iteration (SciPy: info 0, no callback)."""
    A = sp.eye_array(50, format="csr")
    b = np.random.default_rng(0).standard_normal(50)
    x, info, rep = dpsolve.bicgstab(A, b, rtol=1e-8, variant=variant, full_output=True)
    xs, infos = sla.bicgstab(A, b, rtol=1e-8)
    assert infos == 0 and info == 0 and rep.iterations == 1
    np.testing.assert_allclose(x, xs, rtol=1e-14)
    assert len(rep.residuals) == 2 and rep.residuals[1] < rep.tolerance
