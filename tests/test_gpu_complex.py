"""complex64 and complex128 on every GPU variant: the kernels, then CG (Hermitian positive definite
systems), BiCG and BiCGStab (non-Hermitian systems) in every format, with and without Jacobi,
against the host reference and SciPy (GPU machines only).

Inner products are conjugated as SciPy's: <x, y> = x^H y. Every system here has a genuinely
complex matrix and right-hand side, so a kernel that forgets a conjugate fails.
"""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import dpsolve
from dpsolve.backends import VARIANT_NAMES, get_backend
from dpsolve.formats import to_csr
from dpsolve.matrices import laplace_1d, laplace_2d

pytestmark = pytest.mark.gpu

DTYPES = {"complex64": np.complex64, "complex128": np.complex128}
RTOL = {np.complex64: 1e-5, np.complex128: 1e-8}
FORMATS = ["csr-scalar", "csr-vector", "ell", "csr-adaptive"]


def _variants(method):
    return [v for v in VARIANT_NAMES[1:] if get_backend(v) is not None
            and method in getattr(get_backend(v), "methods", ())]


def _hermitian(L, shift, skew, seed):
    """L + shift I + i S with S real antisymmetric on L's off-diagonal pattern: Hermitian, and
    positive definite when shift exceeds ||S||."""
    U = sp.triu(L, k=1, format="csr")
    U.data = np.random.default_rng(seed).uniform(-skew, skew, U.nnz)
    S = U - U.T
    return (sp.csr_array(L, dtype=np.complex128) + shift * sp.eye_array(L.shape[0])
            + 1j * S).tocsr()


def _nonhermitian(A, scale, seed):
    """A with an imaginary part on every stored entry (same pattern): non-Hermitian."""
    A = sp.csr_array(A, dtype=np.complex128)
    A.data = (A.data
              + 1j * scale * np.random.default_rng(seed).uniform(-1, 1, A.nnz) * np.abs(A.data))
    return A


def _cd2d(nx, ny, shift):
    def cd1d(n, c, s):
        return sp.diags_array([np.full(n - 1, -1.0 - c), np.full(n, 2.0 + c + s), -np.ones(n - 1)],
                              offsets=[-1, 0, 1], shape=(n, n), format="csr")
    return (sp.kron(sp.eye_array(ny), cd1d(nx, 0.6, shift))
            + sp.kron(cd1d(ny, 0.3, 0.0), sp.eye_array(nx))).tocsr()


HPD = {
    "n1": _hermitian(laplace_1d(1), 0.5, 0.0, 0),
    "n2": _hermitian(laplace_1d(2), 0.5, 0.3, 1),
    "n97": _hermitian(laplace_1d(97), 0.5, 0.3, 2),
    "n1000": _hermitian(laplace_2d(40, 25), 1.5, 0.3, 3),
}
NONHERMITIAN = {
    "n1": _nonhermitian(_cd2d(1, 1, 0.5), 0.3, 0),
    "n31": _nonhermitian(_cd2d(31, 1, 1.0), 0.3, 1),
    "n1000": _nonhermitian(_cd2d(40, 25, 0.2), 0.3, 2),
}


def _rhs(n, dt, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)


def _true_residual(A, b, x):
    return float(np.linalg.norm(b.astype(np.complex128)
                                - sp.csr_array(A, dtype=np.complex128) @ x.astype(np.complex128)))


def _check_against_host(method, variant, systems, fmt, dtype, M):
    if fmt not in get_backend(variant).formats:
        pytest.skip(f"variant {variant!r} runs {', '.join(get_backend(variant).formats)}")
    dt = DTYPES[dtype]
    rtol = RTOL[dt]
    double = dt == np.complex128
    for k, (name, A) in enumerate(systems.items()):
        A = A.astype(dt)
        b = _rhs(A.shape[0], dt, k)
        x0 = np.zeros_like(b)
        x, info, rep = getattr(dpsolve, method)(A, b, x0=x0, rtol=rtol, M=M, variant=variant,
                                                format=fmt, full_output=True)
        _, info_h, ref = getattr(dpsolve, method)(A, b, rtol=rtol, M=M, variant="host",
                                                  full_output=True)
        what = (f"{name}: info {info} in {rep.iterations} its, "
                f"host info {info_h} in {ref.iterations}")
        assert isinstance(x, np.ndarray) and x.dtype == dt and not np.any(x0)
        assert rep.variant == variant and rep.format == fmt
        assert info == info_h == 0, what
        # complex128: the counts do not move with the reduction order (+-1); complex64 does
        assert abs(rep.iterations - ref.iterations) <= (
            1 if double else max(3, 0.25 * ref.iterations)), what
        tol = rtol * np.linalg.norm(b.astype(np.complex128))
        assert _true_residual(A, b, x) <= tol * (1.0 if double else 1.5), what
        assert rep.residual_norm <= tol
        if rep.residuals is not None:
            assert rep.residuals.dtype.kind == "f"      # norms are real


# ------------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt", FORMATS)
def test_spmv_and_dot_kernels(fmt, dtype):
    import cupy
    from dpsolve.cuda import ops
    dt = DTYPES[dtype]
    for n in (1, 33, 1000, 4097):
        A = sp.csr_array(_nonhermitian(_cd2d(n, 1, 0.1) if n < 1000 else laplace_2d(n // 31, 31)
                                       + sp.eye_array(n // 31 * 31, k=17), 0.5, n), dtype=dt)
        dA = ops.DeviceMatrix.build(to_csr(A, dt), fmt, max_fill=1e9)
        x = _rhs(A.shape[0], dt, 7)
        y = cupy.full(A.shape[0], np.nan, dt)
        ops.spmv(dA, cupy.asarray(x), y)
        eps = np.finfo(dt).eps
        ref = A.astype(np.complex128) @ x.astype(np.complex128)
        np.testing.assert_allclose(y.get(), ref, rtol=0, atol=50 * eps * np.abs(ref).max())
        out = cupy.zeros(1, dt)
        parts = cupy.zeros(ops.DOT_MAX_PARTIALS, dt)
        u = _rhs(A.shape[0], dt, 8)
        ops.dot(cupy.asarray(u), cupy.asarray(x), out, parts)
        want = np.vdot(u.astype(np.complex128), x.astype(np.complex128))   # conj(u) . x
        assert abs(complex(out.get()[0]) - want) <= 50 * eps * np.abs(u).dot(np.abs(x))


# ------------------------------------------------------------------------------- solvers
@pytest.mark.parametrize("M", [None, "jacobi"], ids=["none", "jacobi"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("variant", _variants("cg"))
def test_cg_hermitian(variant, fmt, dtype, M):
    _check_against_host("cg", variant, HPD, fmt, dtype, M)


@pytest.mark.parametrize("M", [None, "jacobi"], ids=["none", "jacobi"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("method,variant", [pytest.param(m, v, id=f"{m}-{v}")
                                            for m in ("bicg", "bicgstab") for v in _variants(m)])
def test_bicg_bicgstab_nonhermitian(method, variant, fmt, dtype, M):
    _check_against_host(method, variant, NONHERMITIAN, fmt, dtype, M)


@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab"])
def test_scipy_agrees_on_the_complex_systems(method):
    """The systems above are what SciPy solves too (same iteration counts in complex128, +-1)."""
    systems = HPD if method == "cg" else NONHERMITIAN
    variant = next(iter(_variants(method)))
    for k, (name, A) in enumerate(systems.items()):
        b = _rhs(A.shape[0], np.complex128, k)
        its = []
        xs, info_s = getattr(sla, method)(A, b, rtol=1e-8, callback=lambda xk: its.append(1))
        x, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-8, variant=variant, full_output=True)
        assert info == info_s == 0, name
        assert abs(rep.iterations - len(its)) <= 1, name
        np.testing.assert_allclose(x, xs, rtol=1e-6, atol=1e-8 * np.abs(xs).max())
