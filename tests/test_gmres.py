"""dpsolve.gmres, the method-table spike: the host reference against SciPy's gmres (CPU), and
variant cublas against SciPy and the reference (GPU machines), in float32 / float64, real and
complex, at awkward sizes, with restarts, a preconditioner, callbacks and an operator A."""
import inspect
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import dpsolve
from scipy_cases import nonsym_dominant
from dpsolve import methods

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


_system = nonsym_dominant      # GMRES converges on it; CG would not apply


def _rtol(dtype):
    return 1e-4 if np.dtype(dtype).char in "fF" else 1e-9


def _scipy(A, b, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)    # callback_type left to default
        return sla.gmres(A, b, **kw)


def test_in_the_method_table():
    m = methods.get("gmres")
    assert methods.implemented("gmres", "host") and methods.implemented("gmres", "cublas")
    assert not methods.implemented("gmres", "merge")
    assert "gmres" in dpsolve.__all__ and dpsolve.gmres.__name__ == "gmres"
    assert [o.name for o in m.options] == ["restart", "callback_type"]


def test_signature_is_scipys_plus_keyword_extras():
    ours = list(inspect.signature(dpsolve.gmres).parameters.values())
    theirs = list(inspect.signature(sla.gmres).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours[:len(theirs)]] == \
           [(p.name, p.kind, p.default) for p in theirs]
    assert [p.name for p in ours[len(theirs):]] == ["variant", "sync", "format", "full_output",
                                                    "energy"]


@pytest.mark.parametrize("bad, err", [(0, ValueError), (-3, ValueError), (2.5, TypeError),
                                      (True, TypeError)])
def test_bad_restart_names_it(bad, err):
    A, b = _system(20, np.float64)
    with pytest.raises(err, match="restart"):
        dpsolve.gmres(A, b, restart=bad, variant="host")


def test_bad_callback_type_and_unknown_option():
    A, b = _system(20, np.float64)
    with pytest.raises(ValueError, match="callback_type"):
        dpsolve.gmres(A, b, callback_type="y", variant="host")
    with pytest.raises(TypeError, match="restart"):
        dpsolve.cg(A, b, restart=5, variant="host")       # an option of another method


def _check_against_scipy(variant, n, dtype, restart, precondition, maxiter=None):
    A, b = _system(n, dtype)
    M = sp.diags(1 / A.diagonal()) if precondition else None
    kw = dict(rtol=_rtol(dtype), restart=restart, maxiter=maxiter, M=M)
    x, info, rep = dpsolve.gmres(A, b, variant=variant, full_output=True, **kw)
    xs, infos = _scipy(A, b, **kw)
    assert info == infos
    assert x.dtype == b.dtype and isinstance(x, np.ndarray)
    if infos == 0:
        assert np.linalg.norm(b - A @ x) <= _rtol(dtype) * np.linalg.norm(b) * 1.0001
    tol = 1e-3 if np.dtype(dtype).char in "fF" else 1e-8
    np.testing.assert_allclose(x, xs, rtol=tol, atol=tol * np.abs(xs).max())
    return rep


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, restart", [(1, None), (7, 3), (33, None), (257, 5), (1000, 30)])
@pytest.mark.parametrize("precondition", [False, True])
def test_host_matches_scipy(dtype, n, restart, precondition):
    _check_against_scipy("host", n, dtype, restart, precondition)


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_host_maxiter_counts_cycles(dtype):
    rep = _check_against_scipy("host", 500, dtype, 2, False, maxiter=3)
    assert rep.iterations == 3 and rep.info == 3


@pytest.mark.parametrize("callback_type", ["x", "pr_norm", "legacy"])
def test_host_callbacks_as_scipys(callback_type):
    A, b = _system(200, np.float64)
    ours, theirs = [], []
    dpsolve.gmres(A, b, restart=5, variant="host", callback_type=callback_type,
                  callback=lambda v: ours.append(np.copy(v)))
    _scipy(A, b, restart=5, callback_type=callback_type,
           callback=lambda v: theirs.append(np.copy(v)))
    assert len(ours) == len(theirs) > 1
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-8, atol=1e-12)


def _far_from_one(variant, dtype, scale):
    """A preconditioned GMRES on A * scale, b = A u: converged to u, x finite."""
    A, _ = _system(300, dtype)
    A = sp.csr_array(A * dtype(scale)).astype(dtype)
    u = np.random.default_rng(2).random(A.shape[0]).astype(dtype)
    b = A @ u
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, info = dpsolve.gmres(A, b, M="jacobi", variant=variant, rtol=_rtol(dtype))
    assert info == 0 and np.isfinite(x).all()
    assert np.linalg.norm(x - u) <= 100 * _rtol(dtype) * np.linalg.norm(u)


@pytest.mark.parametrize("dtype, scale", [(np.float64, 1e200), (np.float64, 1e-200),
                                          (np.float32, 1e30), (np.float32, 1e-30)])
def test_host_preconditioned_far_from_one(dtype, scale):
    """|A| = 1e200: the front end scales b to ~1 (its squares overflow), so M b is ~1e-200,
    whose squares underflow: GMRES's norms of M r are computed without squaring under- or
    overflow (``_system.vector_norm``), where NumPy's norm gave 0 and x came back NaN with
    info = maxiter (SciPy's gmres returns info 0 and an x 88 % off there). Float32 alike."""
    _far_from_one("host", dtype, scale)


def test_prepared_gmres_takes_its_options():
    A, b = _system(300, np.float64)
    P = dpsolve.prepare(A, "gmres", variant="host")
    x, info = P.solve(b, restart=4, rtol=1e-10)
    xs, infos = _scipy(A, b, restart=4, rtol=1e-10)
    assert info == infos == 0
    np.testing.assert_allclose(x, xs, rtol=1e-8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'restrat'"):
        P.solve(b, restrat=4)


# --------------------------------------------------------------------------- GPU (cublas)
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, restart", [(1, None), (7, 3), (257, 5), (1000, 30)])
@pytest.mark.parametrize("precondition", [False, True])
def test_cublas_matches_scipy(dtype, n, restart, precondition):
    rep = _check_against_scipy("cublas", n, dtype, restart, precondition)
    assert rep.variant == "cublas"


@pytest.mark.gpu
def test_cublas_cupy_in_cupy_out_and_operator_A():
    import cupy
    import cupyx.scipy.sparse as csp
    A, b = _system(400, np.float64)
    x, info = dpsolve.gmres(csp.csr_matrix(A), cupy.asarray(b), variant="cublas", restart=10,
                            rtol=1e-10)
    assert isinstance(x, cupy.ndarray) and info == 0
    xs, _ = _scipy(A, b, restart=10, rtol=1e-10)
    np.testing.assert_allclose(x.get(), xs, rtol=1e-8)
    op = sla.aslinearoperator(A)
    x2, info2 = dpsolve.gmres(op, b, variant="cublas", restart=10, rtol=1e-10)
    assert info2 == 0
    np.testing.assert_allclose(x2, xs, rtol=1e-8)


@pytest.mark.gpu
@pytest.mark.parametrize("callback_type", ["x", "pr_norm"])
def test_cublas_callbacks_as_the_reference(callback_type):
    A, b = _system(200, np.float64)
    ours, ref = [], []
    dpsolve.gmres(A, b, restart=5, variant="cublas", callback_type=callback_type,
                  callback=lambda v: ours.append(np.copy(v)))
    dpsolve.gmres(A, b, restart=5, variant="host", callback_type=callback_type,
                  callback=lambda v: ref.append(np.copy(v)))
    assert len(ours) == len(ref) > 1
    np.testing.assert_allclose(np.array(ours), np.array(ref), rtol=1e-7, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, scale", [(np.float64, 1e200), (np.float32, 1e30)])
def test_cublas_preconditioned_far_from_one(dtype, scale):
    """As test_host_preconditioned_far_from_one, on variant cublas (CuPy's norm squared the
    entries of M b too)."""
    _far_from_one("cublas", dtype, scale)


@pytest.mark.gpu
def test_other_gpu_variants_refuse_gmres_by_name():
    A, b = _system(50, np.float64)
    with pytest.raises(ValueError, match="gmres runs on 'host', 'cublas'"):
        dpsolve.gmres(A, b, variant="merge")
