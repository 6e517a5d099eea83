"""The front end (dpsolve.cg / bicg / bicgstab, variant="host") against SciPy's own solvers.

The cases are SciPy's (scipy/sparse/linalg/_isolve/tests/test_iterative.py): 1-D and 2-D Poisson,
a random SPD and a random Hermitian PD matrix, a nonsymmetric positive definite bidiagonal, and the
symmetric indefinite 11x11 case on which bicg and bicgstab break down. Solutions are checked the
way SciPy checks them (``norm(b - A x) <= rtol * norm(b)``) and iteration counts are compared with
a callback counter on both sides.
"""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from scipy.sparse.linalg import LinearOperator, aslinearoperator

import dpsolve
from dpsolve import _frontend
from scipy_cases import nonsym_posdef, poisson1d, poisson2d, rand_hpd, rand_spd, rtol_for, sym_nonpd
from dpsolve._device import status as device_status
from dpsolve.backends import VARIANT_NAMES, get_backend, variant_info

METHODS = dpsolve.methods.names()     # the method table: every method


# --------------------------------------------------------------------------- SciPy's cases
def badly_scaled_spd(n=20):
    """D T D with T = 2-D Poisson and D spanning three decades: Jacobi helps a lot."""
    T = poisson2d(n)
    d = np.logspace(0, 3, T.shape[0])
    return (sp.diags_array(d) @ T @ sp.diags_array(d)).tocsr()


# name -> (builder, methods that converge on it, dtypes)
CONVERGING = {
    "poisson1d": (poisson1d, METHODS, (np.float64, np.float32)),
    "poisson2d": (poisson2d, METHODS, (np.float64, np.float32)),
    "rand-spd": (rand_spd, METHODS, (np.float64, np.float32)),
    "herm-pd": (rand_hpd, METHODS, (np.complex128, np.complex64)),
    "nonsym-posdef": (nonsym_posdef, ("bicg", "bicgstab"), (np.float64, np.float32)),
}

CONVERGING_PARAMS = [
    pytest.param(name, method, dt, id=f"{name}-{method}-{np.dtype(dt).name}")
    for name, (_, methods, dtypes) in CONVERGING.items()
    for method in methods
    for dt in dtypes
]

# the cases of the methods whose callback gets x by default (GMRES's gets a residual norm)
X_CALLBACK_PARAMS = [p for p in CONVERGING_PARAMS
                     if dpsolve.methods.get(p.values[1]).callback_gets_x]


def build(name, dtype):
    A = CONVERGING[name][0]()
    A = A.astype(dtype)
    b = np.arange(A.shape[0]).astype(dtype)          # SciPy's default right-hand side
    return A, b


def true_residual(A, x, b):
    """||b - A x|| evaluated in double (complex double) precision, independently of dpsolve."""
    big = np.complex128 if np.iscomplexobj(x) or np.iscomplexobj(b) else np.float64
    if isinstance(A, LinearOperator):
        Ax = A.matvec(np.asarray(x, dtype=big))
    else:
        A64 = A.astype(big) if not isinstance(A, np.ndarray) else np.asarray(A, dtype=big)
        Ax = A64 @ np.asarray(x, dtype=big).ravel()
    return float(np.linalg.norm(np.asarray(b, dtype=big).ravel() - Ax))


class Counter:
    def __init__(self):
        self.calls = 0
        self.shapes = []

    def __call__(self, xk):
        self.calls += 1
        self.shapes.append(np.shape(xk))


def scipy_solve(method, A, b, **kw):
    """SciPy's function of ``method``; GMRES with a callback is told SciPy's default callback
    type ("legacy") explicitly, as SciPy asks (it warns otherwise)."""
    if method == "gmres" and kw.get("callback") is not None:
        kw.setdefault("callback_type", "legacy")
    return getattr(sla, method)(A, b, **kw)


def run_both(method, A, b, **kw):
    """(x, info, callback count) for SciPy and for dpsolve's host variant."""
    cs, cd = Counter(), Counter()
    xs, infos = scipy_solve(method, A, b, callback=cs, **kw)
    xd, infod = getattr(dpsolve, method)(A, b, callback=cd, variant="host", **kw)
    return (xs, infos, cs.calls), (xd, infod, cd.calls)


def solve(method, A, b, **kw):
    kw.setdefault("variant", "host")
    return getattr(dpsolve, method)(A, b, **kw)


# --------------------------------------------------------------------------- agreement with SciPy
@pytest.mark.parametrize("name, method, dtype", CONVERGING_PARAMS)
def test_matches_scipy(name, method, dtype):
    A, b = build(name, dtype)
    rtol = rtol_for(dtype)
    # as CSR, the form dpsolve runs: SciPy's dense gemv rounds otherwise, and CGS in float32 on
    # rand-spd takes 23 iterations in SciPy on the dense array, 27 on its CSR form
    (xs, infos, its_s), (xd, infod, its_d) = run_both(method, sp.csr_array(A), b, rtol=rtol)
    if method == "cgs" and infos != 0:
        pytest.skip(f"SciPy's own cgs does not converge on {name} in {np.dtype(dtype)} "
                    f"(info {infos}): CGS is erratic in single precision")
    assert infos == 0, "the case itself must be one SciPy solves"
    assert infod == 0
    assert true_residual(A, xd, b) <= rtol * np.linalg.norm(b.astype(xd.dtype))
    # single precision: the two codes' different summation orders can move the count by 2
    slack = 1 if np.dtype(dtype).char in "dD" else 2
    assert abs(its_d - its_s) <= slack, f"dpsolve took {its_d} iterations, SciPy {its_s}"
    assert xd.dtype == xs.dtype
    assert xd.shape == xs.shape == (A.shape[0],)
    if np.dtype(dtype).char in "dD":
        assert np.linalg.norm(xd - xs) <= 1e-4 * np.linalg.norm(xs)


@pytest.mark.parametrize("method", ["bicg", "bicgstab"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_breakdown_reported_like_scipy(method, dtype):
    A, b = sym_nonpd()
    A, b = A.astype(dtype), b.astype(dtype)
    with np.errstate(all="ignore"):
        (xs, infos, _), (xd, infod, _) = run_both(method, A, b, rtol=1e-8)
    assert infos < 0, "SciPy itself must break down on this case"
    assert infod < 0
    assert infod == infos
    assert np.isfinite(xd).all()
    assert true_residual(A, xd, b) <= np.linalg.norm(b)          # SciPy's check for this case


def test_cg_on_indefinite_stops_with_breakdown():
    """Documented dpsolve extension: CG stops with -10 on a non-finite step instead of iterating
    on NaNs until maxiter (SciPy returns info = maxiter and a NaN x on this case)."""
    A, b = sym_nonpd()
    with np.errstate(all="ignore"):
        x, info, rep = solve("cg", A, b, rtol=1e-8, full_output=True)
    assert info == -10
    assert rep.converged is False
    assert np.isfinite(x).all()


@pytest.mark.parametrize("method", ["bicg", "bicgstab"])
def test_bicg_family_stops_on_a_nonfinite_scalar(method, unscaled_rhs):
    """Documented dpsolve extension, as CG's: BiCG and BiCGStab stop with -10 when a scalar turns
    non-finite (float32 overflow here) instead of iterating on NaN to maxiter as SciPy does."""
    import nonfinite_cases
    A, b, x0 = nonfinite_cases.trap("float32")
    with np.errstate(all="ignore"):
        xs, infos = getattr(sla, method)(A, b, x0=x0, maxiter=20)
        x, info, rep = solve(method, A, b, x0=x0, maxiter=20, full_output=True)
    assert infos == 20 and not np.isfinite(xs).all()
    assert info == -10 and rep.converged is False
    assert rep.iterations == nonfinite_cases.CASES["trap"][1][method][1]
    np.testing.assert_array_equal(x, nonfinite_cases.trap_solution("float32"))


@pytest.mark.parametrize("name, method, dtype", X_CALLBACK_PARAMS)
def test_maxiter_one(name, method, dtype):
    A, b = build(name, dtype)
    counter = Counter()
    x, info = solve(method, A, b, x0=np.zeros_like(b), rtol=1e-12, maxiter=1, callback=counter)
    assert info == 1
    assert counter.calls == 1
    assert counter.shapes == [(A.shape[0],)]


@pytest.mark.parametrize("method", METHODS)
def test_callback_count_equals_iterations(method):
    A, b = build("poisson2d", np.float64)
    counter = Counter()
    x, info, rep = solve(method, A, b, rtol=1e-8, callback=counter, full_output=True)
    assert info == 0
    # bicgstab may stop half-way through its last iteration without a callback, as SciPy does
    slack = 1 if method == "bicgstab" else 0
    assert rep.iterations - slack <= counter.calls <= rep.iterations


# --------------------------------------------------------------------------- inputs left alone
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("x0_shape", ["1d", "column"])
def test_x0_not_modified(method, x0_shape):
    A, b = build("poisson1d", np.float64)
    x0 = np.random.default_rng(1).standard_normal(A.shape[0])
    if x0_shape == "column":
        x0 = x0.reshape(-1, 1)
    saved = x0.copy()
    x, info = solve(method, A, b, x0=x0, rtol=1e-8)
    assert info == 0
    np.testing.assert_array_equal(x0, saved)
    assert not np.shares_memory(x, x0)
    assert true_residual(A, x, b) <= 1e-8 * np.linalg.norm(b)


@pytest.mark.parametrize("method", METHODS)
def test_x0_is_used(method):
    """SciPy's test_x0_solves_problem_exactly: an exact x0 returns at once with x == x0."""
    A = np.eye(2)
    rhs = np.array([-1.0, -1.0])
    counter = Counter()
    x, info = solve(method, A, rhs, x0=rhs, callback=counter)
    assert info == 0
    np.testing.assert_allclose(x, rhs)
    assert counter.calls == 0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("b_dtype, b_shape", [(np.float64, "1d"), (np.float64, "column"),
                                               (np.float32, "1d")],
                         ids=["float64-1d", "float64-column", "float32-1d"])
def test_b_not_modified(method, b_dtype, b_shape):
    A, b = build("poisson1d", np.float64)
    b = b.astype(b_dtype)
    if b_shape == "column":
        b = b.reshape(-1, 1)
    saved = b.copy()
    x, info = solve(method, A, b, rtol=1e-6)
    assert info == 0
    np.testing.assert_array_equal(b, saved)
    assert not np.shares_memory(x, b)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128],
                         ids=["float64", "float32", "complex128"])
def test_zero_rhs(method, dtype):
    A = rand_spd().astype(dtype) + 10 * np.eye(9, dtype=dtype)
    b = np.zeros(9, dtype=dtype)
    xs, _ = getattr(sla, method)(A, b)
    for x0 in (None, np.ones(9, dtype=dtype)):
        counter = Counter()
        x, info, rep = solve(method, A, b, x0=x0, callback=counter, full_output=True)
        assert info == 0
        np.testing.assert_array_equal(x, np.zeros(9))
        assert x.dtype == xs.dtype
        assert counter.calls == 0
        assert rep.iterations == 0 and rep.converged is True and rep.residual_norm == 0.0
    np.testing.assert_array_equal(b, 0)


@pytest.mark.parametrize("method", METHODS)
def test_b_column_vector(method):
    A, b = build("poisson1d", np.float64)
    xs, infos = getattr(sla, method)(A, b.reshape(-1, 1), rtol=1e-8)
    x, info = solve(method, A, b.reshape(-1, 1), rtol=1e-8)
    assert info == infos == 0
    assert x.shape == xs.shape == (A.shape[0],)
    assert true_residual(A, x, b) <= 1e-8 * np.linalg.norm(b)


UPCAST = [(np.int64, np.int64), (np.int32, np.float32), (np.float32, np.int64),
          (np.int64, np.float32), (np.uint8, np.float64), (np.bool_, np.float32),
          (np.float16, np.float16), (np.float32, np.complex64), (np.int32, np.complex64)]


@pytest.mark.parametrize("a_dtype, b_dtype", UPCAST,
                         ids=[f"A-{np.dtype(a).name}-b-{np.dtype(b).name}" for a, b in UPCAST])
def test_dtype_coercion_matches_scipy(a_dtype, b_dtype):
    if a_dtype is np.bool_:
        A = np.eye(4, dtype=bool)
    else:
        A = (4 * np.eye(4) + np.diag(np.ones(3), 1) + np.diag(np.ones(3), -1)).astype(a_dtype)
    b = np.array([1, 2, 3, 4]).astype(b_dtype)
    xs, infos = sla.cg(A, b)
    x, info = solve("cg", A, b)
    assert info == infos == 0
    assert x.dtype == xs.dtype
    np.testing.assert_allclose(x, xs, rtol=1e-3)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_integer_sparse_and_dense_A_upcast(sparse):
    A = np.array([[4, 1, 0], [1, 3, 1], [0, 1, 2]], dtype=np.int64)
    A_in = sp.csr_array(A) if sparse else A
    b = np.array([1, 2, 3], dtype=np.int32)
    xs, _ = sla.cg(A_in, b, rtol=1e-10)
    x, info = solve("cg", A_in, b, rtol=1e-10)
    assert info == 0
    assert x.dtype == xs.dtype == np.float64
    np.testing.assert_allclose(A @ x, b, rtol=1e-8)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64], ids=["complex128", "complex64"])
def test_complex_hermitian_cg(dtype):
    A = rand_hpd().astype(dtype)
    assert np.allclose(A, A.conj().T)
    b = (np.arange(9) + 1j * np.arange(9)[::-1]).astype(dtype)
    rtol = rtol_for(dtype)
    (xs, infos, its_s), (xd, infod, its_d) = run_both("cg", A, b, rtol=rtol)
    assert infod == infos == 0
    assert xd.dtype == xs.dtype == dtype
    assert true_residual(A, xd, b) <= rtol * np.linalg.norm(b)
    assert abs(its_d - its_s) <= 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_operator_dtype_follows_scipy(dtype):
    """A LinearOperator's declared dtype decides the working type, as in SciPy, even when its
    matvec returns something wider."""
    A64 = rand_spd() + 10 * np.eye(9)
    op = LinearOperator((9, 9), matvec=lambda v: A64 @ np.asarray(v, dtype=np.float64),
                        dtype=dtype)
    b = np.ones(9, dtype=np.float32)
    xs, _ = sla.cg(op, b)
    x, info = solve("cg", op, b)
    assert info == 0
    assert x.dtype == xs.dtype == dtype


# --------------------------------------------------------------------------- preconditioning
def _jacobi_forms(A):
    inv = 1.0 / A.diagonal()
    n = A.shape[0]
    return {
        "jacobi": "jacobi",
        "inverse-diagonal-1d": inv,
        "dia_array": sp.diags_array(inv, format="dia"),
        "dia_matrix": sp.dia_matrix((inv[None, :], [0]), shape=(n, n)),
        "csr_array": sp.diags_array(inv, format="csr"),
        "LinearOperator": LinearOperator((n, n), matvec=lambda v: inv * v,
                                         rmatvec=lambda v: np.conj(inv) * v, dtype=A.dtype),
        "dense-ndarray": np.diag(inv),
    }


JACOBI_FORMS = list(_jacobi_forms(sp.eye_array(2)).keys())


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("form", JACOBI_FORMS)
def test_jacobi_preconditioning(method, form):
    A = badly_scaled_spd()
    n = A.shape[0]
    b = A @ np.ones(n)
    rtol = 1e-8
    M = _jacobi_forms(A)[form]
    inv = 1.0 / A.diagonal()
    M_scipy = LinearOperator((n, n), matvec=lambda v: inv * v, rmatvec=lambda v: inv * v,
                             dtype=A.dtype)
    cs, cd, cu = Counter(), Counter(), Counter()
    xs, infos = scipy_solve(method, A, b, rtol=rtol, M=M_scipy, callback=cs)
    x, info = solve(method, A, b, rtol=rtol, M=M, callback=cd)
    _, info_plain = solve(method, A, b, rtol=rtol, callback=cu)
    assert infos == 0 and info == 0
    assert true_residual(A, x, b) <= rtol * np.linalg.norm(b)
    assert abs(cd.calls - cs.calls) <= 1
    assert cd.calls < cu.calls, "Jacobi should cut the iterations on a badly scaled matrix"


def test_general_preconditioner_operator():
    """A non-diagonal M (here the exact inverse) is applied as an operator: one or two steps."""
    A = poisson2d(10)
    Ad = A.toarray()
    n = A.shape[0]
    M = LinearOperator((n, n), matvec=lambda v: np.linalg.solve(Ad, v),
                       rmatvec=lambda v: np.linalg.solve(Ad.T, v), dtype=float)
    b = np.arange(n, dtype=float)
    for method in METHODS:
        counter = Counter()
        x, info = solve(method, A, b, rtol=1e-8, M=M, callback=counter)
        assert info == 0
        assert counter.calls <= 2
        assert true_residual(A, x, b) <= 1e-8 * np.linalg.norm(b)


def test_sparse_nondiagonal_preconditioner():
    A = poisson1d(30)
    b = np.ones(30)
    M = sp.csr_array(np.linalg.inv(A.toarray()))       # dense inverse stored as sparse
    counter = Counter()
    x, info = solve("cg", A, b, rtol=1e-10, M=M, callback=counter)
    assert info == 0
    assert counter.calls <= 2


# --------------------------------------------------------------------------- forms of A
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["aslinearoperator", "custom"])
def test_A_as_linear_operator(method, kind):
    A, b = build("poisson2d", np.float64)
    if kind == "aslinearoperator":
        op = aslinearoperator(A)
    else:
        op = LinearOperator(A.shape, matvec=lambda v: A @ v, rmatvec=lambda v: A.T @ v,
                            dtype=A.dtype)
    (xs, infos, its_s), (xd, infod, its_d) = run_both(method, op, b, rtol=1e-8)
    assert infod == infos == 0
    assert true_residual(A, xd, b) <= 1e-8 * np.linalg.norm(b)
    assert abs(its_d - its_s) <= 1


@pytest.mark.parametrize("method", METHODS)
def test_A_as_dense_ndarray(method):
    """Dense input is converted to CSR, so the iteration count is compared with SciPy on the CSR
    form: SciPy's own dense gemv rounds differently, and bicgstab on 2-D Poisson is sensitive
    enough to that to take 70 rather than 74 steps."""
    A, b = build("poisson2d", np.float64)
    dense = A.toarray()
    cs, cd = Counter(), Counter()
    xs, infos = scipy_solve(method, A, b, rtol=1e-8, callback=cs)
    xd, infod = solve(method, dense, b, rtol=1e-8, callback=cd)
    assert infod == infos == 0
    assert true_residual(A, xd, b) <= 1e-8 * np.linalg.norm(b)
    assert abs(cd.calls - cs.calls) <= 1
    assert np.linalg.norm(xd - xs) <= 1e-4 * np.linalg.norm(xs)


SPARSE_KINDS = [f"{fmt}_{kind}" for fmt in ("csr", "csc", "coo", "dia", "lil", "bsr", "dok")
                for kind in ("matrix", "array")]


@pytest.mark.parametrize("kind", SPARSE_KINDS)
@pytest.mark.parametrize("method", METHODS)
def test_A_every_scipy_sparse_format(kind, method):
    A, b = build("poisson2d", np.float64)
    A_in = getattr(sp, kind)(A)
    assert A_in.format == kind.split("_")[0]
    x, info = solve(method, A_in, b, rtol=1e-8)
    x_ref, info_ref = solve(method, A, b, rtol=1e-8)
    assert info == info_ref == 0
    np.testing.assert_allclose(x, x_ref, rtol=1e-12, atol=1e-12)
    assert true_residual(A, x, b) <= 1e-8 * np.linalg.norm(b)


@pytest.mark.parametrize("cls", [sp.coo_array, sp.coo_matrix], ids=["coo_array", "coo_matrix"])
def test_coo_duplicates_summed_and_input_untouched(cls):
    # [[4, 1], [1, 3]] written with its entries split into duplicates, out of order
    row = np.array([1, 0, 0, 1, 0, 1, 0])
    col = np.array([1, 0, 1, 0, 0, 1, 0])
    val = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 1.0])
    A = cls((val, (row, col)), shape=(2, 2))
    saved = (A.row.copy(), A.col.copy(), A.data.copy(), A.nnz)
    b = np.array([1.0, 2.0])
    x, info = solve("cg", A, b, rtol=1e-12)
    assert info == 0
    np.testing.assert_allclose(np.array([[4.0, 1.0], [1.0, 3.0]]) @ x, b, rtol=1e-10)
    np.testing.assert_array_equal(A.row, saved[0])
    np.testing.assert_array_equal(A.col, saved[1])
    np.testing.assert_array_equal(A.data, saved[2])
    assert A.nnz == saved[3] == 7
    assert not A.has_canonical_format


# --------------------------------------------------------------------------- the API surface
@pytest.mark.parametrize("method", METHODS)
def test_signature_is_scipys_plus_keyword_extras(method):
    ours = list(inspect.signature(getattr(dpsolve, method)).parameters.values())
    theirs = list(inspect.signature(getattr(sla, method)).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours[:len(theirs)]] == \
           [(p.name, p.kind, p.default) for p in theirs]
    K = inspect.Parameter.KEYWORD_ONLY
    assert [(p.name, p.kind, p.default) for p in ours[len(theirs):]] == [
        ("variant", K, "auto"), ("sync", K, "polling"), ("format", K, "auto"),
        ("full_output", K, False), ("energy", K, False)]


@pytest.mark.parametrize("method", METHODS)
def test_removed_tol_keyword_and_positional_rtol(method):
    A, b = build("poisson1d", np.float64)
    with pytest.raises(TypeError, match="tol"):
        getattr(dpsolve, method)(A, b, tol=1e-5, variant="host")
    with pytest.raises(TypeError):
        getattr(dpsolve, method)(A, b, None, 1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_full_output_report(method):
    A, b = build("poisson2d", np.float64)
    counter = Counter()
    x, info, rep = solve(method, A, b, rtol=1e-8, callback=counter, full_output=True)
    assert isinstance(rep, dpsolve.SolveReport)
    assert info == 0 and rep.info == 0 and rep.converged is True
    assert rep.method == method and rep.variant == "host"
    assert rep.n == A.shape[0] and rep.nnz == A.nnz and rep.dtype == "float64"
    assert rep.format is None                                  # the host variant has no format
    assert rep.sync == "polling"
    assert rep.iterations >= counter.calls >= 1
    assert rep.tolerance == pytest.approx(1e-8 * np.linalg.norm(b))
    true = true_residual(A, x, b)
    assert rep.residual_norm == pytest.approx(true, rel=1e-6)
    assert rep.residual_norm <= rep.tolerance
    assert rep.restarts == 0
    assert isinstance(rep.wall_time, float) and rep.wall_time > 0
    assert isinstance(rep.host_cpu_time, float) and rep.host_cpu_time >= 0
    assert rep.device == "host CPU"
    for field in ("gpu_time", "gpu_energy", "gpu_power", "device_launches_per_iter"):
        assert getattr(rep, field) is None, f"{field} cannot be measured on the host"
    assert rep.host_energy is None or rep.host_energy >= 0
    d = rep.as_dict()
    assert d["iterations"] == rep.iterations and "residuals" not in d
    assert "n/a" in rep.summary()                              # GPU fields print as n/a, not 0


def test_full_output_false_returns_pair():
    A, b = build("poisson1d", np.float64)
    out = solve("cg", A, b)
    assert isinstance(out, tuple) and len(out) == 2


def test_full_output_on_nonconvergence():
    A, b = build("poisson2d", np.float64)
    x, info, rep = solve("cg", A, b, rtol=1e-12, maxiter=5, full_output=True)
    assert info == 5 and rep.info == 5 and rep.iterations == 5 and rep.converged is False
    assert rep.residual_norm == pytest.approx(true_residual(A, x, b), rel=1e-6)
    assert rep.residual_norm > rep.tolerance


# --------------------------------------------------------------------------- variants
needs_no_gpu = pytest.mark.skipif(device_status().ok, reason="a usable CUDA device is present")


@needs_no_gpu
def test_auto_falls_back_to_host_and_warns_once(monkeypatch):
    monkeypatch.setattr(_frontend, "_warned_fallback", False)
    A, b = build("poisson1d", np.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x1, info1, rep1 = dpsolve.cg(A, b, full_output=True)                # variant="auto"
        x2, info2, rep2 = dpsolve.bicgstab(A, b, variant="auto", full_output=True)
    ours = [w for w in caught if issubclass(w.category, dpsolve.DpsolveWarning)]
    assert len(ours) == 1
    assert "CUDA" in str(ours[0].message) and "host" in str(ours[0].message)
    assert ours[0].filename == __file__, "the warning should point at the caller's line"
    assert rep1.variant == rep2.variant == "host"
    assert info1 == info2 == 0


GPU_VARIANTS = VARIANT_NAMES[1:]


@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_unavailable_variant_raises_with_reason(variant):
    info = variant_info(variant)
    if info.available:
        pytest.skip(f"variant {variant!r} can run here")
    A, b = build("poisson1d", np.float64)
    with pytest.raises(dpsolve.BackendUnavailableError,
                       match=f"variant '{variant}' cannot run here: .+") as exc:
        dpsolve.cg(A, b, variant=variant)
    err = exc.value
    assert isinstance(err, dpsolve.DpsolveError) and isinstance(err, RuntimeError)
    assert err.variant == variant
    assert err.reason and err.reason in str(err)


def test_variants_listing():
    vs = dpsolve.variants()
    assert [v.name for v in vs] == ["host", "cublas", "cuda", "merge", "dynamic", "graph",
                                    "persistent"]
    assert all(isinstance(v, dpsolve.VariantInfo) for v in vs)
    host = vs[0]
    assert host.available is True and host.reason is None
    for v in vs:
        assert v.description
        if not v.available:
            assert isinstance(v.reason, str) and v.reason.strip()
        else:
            assert v.reason is None
    if not device_status().ok:
        assert [v.name for v in vs if v.available] == ["host"]


# --------------------------------------------------------------------------- true-residual check
def _float32_drift_case():
    """2-D Poisson in float32 with rtol=1e-6: the CG recurrence residual drops below the
    tolerance while the true residual stalls far above it (SciPy reports success here)."""
    A = poisson2d(30).astype(np.float32)
    b = np.ones(A.shape[0], dtype=np.float32)
    return A, b, 1e-6


def test_float32_drift_case_is_meaningful():
    """The premise of the next test, on dpsolve's own reference solver: the recurrence claims
    convergence although the true residual misses the tolerance."""
    A, b, rtol = _float32_drift_case()
    tol = rtol * float(np.linalg.norm(b))
    x, info, _ = dpsolve.reference.cg(A.__matmul__, b, np.zeros_like(b), atol=tol, maxiter=10000)
    assert info == 0
    assert true_residual(A, x, b) > tol


@pytest.mark.parametrize("method", METHODS)
def test_no_false_success_in_float32(method):
    A, b, rtol = _float32_drift_case()
    x, info, rep = solve(method, A, b, rtol=rtol, full_output=True)
    tol = rtol * float(np.linalg.norm(b))
    assert rep.restarts > 0 or info != 0
    if info == 0:
        assert true_residual(A, x, b) <= tol * (1 + 1e-3)
    else:
        # not converged; CGS alone may break down, where SciPy's cgs does too (-10 at 824, both)
        assert info > 0 or (method == "cgs" and info == sla.cgs(A, b, rtol=rtol)[1] < 0)
        assert rep.converged is False
        assert rep.residual_norm > tol
        # the report's float32 residual is at rounding level here; it must still be the true
        # one, not the recurrence's (which is below the tolerance)
        assert true_residual(A, x, b) > tol


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=["float32", "complex64"])
def test_no_false_success_small_spd_single(dtype):
    """rand-spd / herm-pd at rtol=1e-5 in single precision: SciPy's recurrence claims success."""
    A = (rand_spd() if dtype is np.float32 else rand_hpd()).astype(dtype)
    b = np.arange(9).astype(dtype)
    rtol = 1e-5
    x, info, rep = solve("cg", A, b, rtol=rtol, full_output=True)
    if info == 0:
        assert true_residual(A, x, b) <= rtol * np.linalg.norm(b) * (1 + 1e-3)
    else:
        assert info > 0 and rep.residual_norm > rep.tolerance


def _liar(real, lies):
    """A reference solver that, for its first ``lies`` calls, takes one step and then claims
    convergence (info 0) with x barely improved; afterwards it defers to the real solver."""
    calls = {"n": 0}

    def solver(matvec, b, x, *, atol, maxiter, **kw):
        calls["n"] += 1
        if calls["n"] <= lies:
            kw.pop("callback", None)
            x, _, its = real(matvec, b, x, atol=atol, maxiter=1, **kw)
            return x, 0, its
        return real(matvec, b, x, atol=atol, maxiter=maxiter, **kw)
    solver.calls = calls
    return solver


@pytest.mark.parametrize("method", METHODS)
def test_restart_recovers_from_false_convergence(monkeypatch, method):
    liar = _liar(dpsolve.methods.get(method).reference_solver(), lies=1)
    monkeypatch.setitem(dpsolve.methods.TABLE, (method, "host"), liar)
    A, b = build("poisson2d", np.float64)
    x, info, rep = solve(method, A, b, rtol=1e-8, full_output=True)
    assert liar.calls["n"] == 2
    assert rep.restarts == 1
    assert info == 0 and rep.converged
    assert true_residual(A, x, b) <= 1e-8 * np.linalg.norm(b)


@pytest.mark.parametrize("method", METHODS)
def test_persistent_false_convergence_is_not_success(monkeypatch, method):
    liar = _liar(dpsolve.methods.get(method).reference_solver(), lies=10 ** 6)
    monkeypatch.setitem(dpsolve.methods.TABLE, (method, "host"), liar)
    A, b = build("poisson2d", np.float64)
    x, info, rep = solve(method, A, b, rtol=1e-8, full_output=True)
    assert info == 10 * A.shape[0]            # SciPy's non-convergence code: maxiter
    assert rep.converged is False
    assert rep.restarts == _frontend.MAX_RESTARTS
    assert rep.iterations < info
    assert rep.residual_norm == pytest.approx(true_residual(A, x, b), rel=1e-6)
    assert rep.residual_norm > rep.tolerance


def test_restarts_respect_maxiter(monkeypatch):
    liar = _liar(dpsolve.methods.get("cg").reference_solver(), lies=10 ** 6)
    monkeypatch.setitem(dpsolve.methods.TABLE, ("cg", "host"), liar)
    A, b = build("poisson2d", np.float64)
    x, info, rep = solve("cg", A, b, rtol=1e-8, maxiter=3, full_output=True)
    assert info == 3 and rep.iterations == 3 and not rep.converged


def test_gpu_variants_name_who_takes_operators():
    """The reasons GPU variants give for refusing an operator A or a general M (decided without a
    GPU) name the variants that take them."""
    from dpsolve._system import make_system
    A = sp.csr_array(np.diag([2.0, 3.0, 4.0]))
    b = np.ones(3)
    op_sys = make_system("cg", aslinearoperator(A), b, None, None)
    m_sys = make_system("cg", A, b, None, np.ones((3, 3)))
    assert m_sys.M.kind == "operator"
    for name in ("dynamic", "persistent", "graph"):
        why = get_backend(name).why_not(op_sys)
        assert "'host', 'cublas', 'cuda', 'merge'" in why and "LinearOperator" in why
    for name in ("graph", "dynamic", "persistent"):
        assert "general preconditioner runs on 'host', 'cublas', 'cuda', 'merge'" in \
            get_backend(name).why_not(m_sys)
    for name in ("cublas", "cuda", "merge"):
        assert (get_backend(name).why_not(op_sys) is None
                and get_backend(name).why_not(m_sys) is None)
    assert get_backend("merge").why_not(op_sys) is None


def test_graph_cache_key_follows_the_matrix_contents():
    """variant 'graph' caches its instantiated graph per prepared system; the key (decided without
    a GPU) changes with any value of A or D^-1, and large matrices are not keyed (not cached)."""
    from dpsolve._system import make_system
    from dpsolve.backends import graph
    A = sp.random_array((300, 300), density=0.05, rng=1, format="csr") + sp.eye_array(300) * 10
    b = np.ones(300)
    key = graph.GraphBackend.cache_key
    k0 = key(make_system("cg", A, b, None, None), "csr-scalar")
    assert k0 == key(make_system("cg", A.copy(), 2 * b, None, None), "csr-scalar")   # new b: hit
    A2 = A.copy()
    A2.data[7] *= 1.0 + 1e-15
    assert key(make_system("cg", A2, b, None, None), "csr-scalar") != k0
    assert key(make_system("cg", A, b, None, None), "ell") != k0
    assert key(make_system("bicg", A, b, None, None), "csr-scalar") != k0
    assert key(make_system("cg", A, b, None, "jacobi"), "csr-scalar") != k0
    big = sp.eye_array(graph.CACHE_MAX_BYTES // 12 + 1, format="csr")
    assert key(make_system("cg", big, np.ones(big.shape[0]), None, None), "csr-scalar") is None
