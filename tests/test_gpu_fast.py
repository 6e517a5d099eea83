"""The prepared call's fast paths (dpsolve/_fast.py: cg_persistent's DPS_FAST_* flags, and
graph's one launch with graph_head's device tolerance) against the general path on the same
prepared system: the same bits where the tolerance does not decide (a run out of iterations),
the same codes and an x within its tolerance where it does, b = 0, a b so small that ||b||^2
underflows, a NaN in b, the caller's stream, ``update``, a NumPy b; and the path is taken (GPU
machines only)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve.matrices import laplace_2d

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


# (variant, M): the persistent kernel's (Jacobi fused or none), graph's (fused Jacobi, none, and
# AMG's V-cycle as kernels captured in the loop)
CASES = [("persistent", None), ("persistent", "jacobi"), ("graph", None), ("graph", "jacobi"),
         ("graph", "amg")]
VARIANTS = ["persistent", "graph"]


def _cases(dtypes):
    """(dtype, variant, M) over CASES; AMG in the real dtypes."""
    return [(d, v, M) for v, M in CASES for d in dtypes
            if M != "amg" or np.dtype(d).kind == "f"]


def _system(n_side, dtype, M=None, seed=0, variant="persistent", method="cg"):
    import cupy
    import cupyx.scipy.sparse as csp
    A = sp.csr_array(laplace_2d(n_side)).astype(dtype)
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(A.shape[0])
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(A.shape[0])
    P = dpsolve.prepare(csp.csr_matrix(A), method, M=M, variant=variant)
    return A, P, cupy.asarray(b.astype(dtype))


def _nan_as_the_general_path(P, b):
    """A NaN in (a copy of) b: the fast path's call raises the general path's error."""
    bad = b.copy()
    bad[5] = np.nan
    with pytest.raises(ValueError) as fast_err:
        P.solve(bad)
    with pytest.raises(ValueError) as general_err:
        P.solve(bad, full_output=True)
    assert str(fast_err.value) == str(general_err.value)


def _refuse_general_path(monkeypatch):
    """From here on, a call that reaches the general path's iterate fails the test."""
    from dpsolve import _frontend

    def refuse(*a, **k):
        raise AssertionError("the general path ran")
    monkeypatch.setattr(_frontend, "iterate", refuse)


def _general(P, b, **kw):
    """The general path's (x, info) on the same system (full_output takes it)."""
    x, info, _ = P.solve(b, full_output=True, **kw)
    return x, info


@pytest.mark.parametrize("dtype,variant,M", _cases(DTYPES))
def test_out_of_iterations_gives_the_general_paths_bits(dtype, variant, M):
    """maxiter = 7 (not converged): r = b and the same kernels, so the same x bit for bit."""
    A, P, b = _system(29, dtype, M, variant=variant)        # n = 841: an awkward size
    assert P._fast is not None
    x, info = P.solve(b, rtol=1e-12, maxiter=7)
    xg, info_g = _general(P, b, rtol=1e-12, maxiter=7)
    assert info == info_g == 7
    np.testing.assert_array_equal(x.get(), xg.get())


@pytest.mark.parametrize("dtype,variant,M", _cases(DTYPES))
def test_converged_as_the_general_path(dtype, variant, M):
    A, P, b = _system(37, dtype, M, seed=1, variant=variant)
    rtol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
    b_before = b.copy()
    x, info = P.solve(b, rtol=rtol)
    xg, info_g = _general(P, b, rtol=rtol)
    assert info == info_g == 0
    np.testing.assert_array_equal(b.get(), b_before.get())          # b only read
    bh = b.get()
    assert np.linalg.norm(bh - A @ x.get()) <= rtol * np.linalg.norm(bh) * (1 + 1e-6)
    scale = np.abs(xg.get()).max()                   # the same iterates; the tolerance's
    np.testing.assert_allclose(x.get(), xg.get(), rtol=0, atol=1e3 * rtol * scale)  # rounding
    assert x.dtype == P.dtype and x.shape == b.shape and x.data.ptr != b.data.ptr


@pytest.mark.parametrize("dtype,variant,M", _cases(DTYPES))
def test_a_numpy_b_gives_the_general_paths_answer(monkeypatch, dtype, variant, M):
    """A NumPy b of the system's dtype takes the fast path (b up and x back queued around the
    launch): NumPy x, the general path's bits out of iterations, its code and x within the
    tolerance when converged, the CuPy b's bits; b only read; each x its own copy; b = 0 and a
    NaN as the general path answers them."""
    from dpsolve import _frontend
    A, P, b = _system(29, dtype, M, seed=3, variant=variant)
    bh = b.get()
    before = bh.copy()
    xg, info_g = _general(P, bh, rtol=1e-12, maxiter=7)
    iterate = _frontend.iterate
    _refuse_general_path(monkeypatch)
    x, info = P.solve(bh, rtol=1e-12, maxiter=7)
    assert type(x) is np.ndarray and x.dtype == P.dtype and x.shape == bh.shape
    assert info == info_g == 7
    np.testing.assert_array_equal(x, xg)
    np.testing.assert_array_equal(x, P.solve(b, rtol=1e-12, maxiter=7)[0].get())
    rtol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
    x2, info2 = P.solve(2 * bh, rtol=rtol)
    assert info2 == 0
    assert np.linalg.norm(2 * bh - A @ x2) <= rtol * np.linalg.norm(2 * bh) * (1 + 1e-6)
    np.testing.assert_array_equal(x, xg)                  # x is not the next call's buffer
    np.testing.assert_array_equal(bh, before)
    monkeypatch.setattr(_frontend, "iterate", iterate)
    x0, info0 = P.solve(np.zeros_like(bh))
    assert type(x0) is np.ndarray and info0 == 0 and not x0.any()
    _nan_as_the_general_path(P, bh)


@pytest.mark.parametrize("variant,M", [("persistent", None), ("graph", "amg")])
def test_the_fast_path_is_taken(monkeypatch, variant, M):
    """Its calls never reach the general path's iterate (and still solve)."""
    A, P, b = _system(16, np.float64, M, variant=variant)
    _refuse_general_path(monkeypatch)
    x, info = P.solve(b, rtol=1e-8, atol=0, maxiter=None)
    assert info == 0
    with pytest.raises(AssertionError, match="general path"):
        P.solve(b, rtol=1e-8, full_output=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_b_zero_and_nan(variant):
    import cupy
    A, P, b = _system(12, np.float64, variant=variant)
    x, info = P.solve(cupy.zeros_like(b))
    assert info == 0 and not x.any()
    _nan_as_the_general_path(P, b)
    x, info = P.solve(b, rtol=1e-8)                          # the system still solves
    assert info == 0


@pytest.mark.parametrize("dtype,variant", [(np.float64, "persistent"), (np.float64, "graph"),
                                           (np.float32, "graph")])
def test_a_b_whose_square_underflows(dtype, variant):
    """||b||^2 underflows to 0 (b = 2^-600 b' in float64, 2^-80 b' in float32) though b is not
    0: the general path's answer (it scales b), not x = 0."""
    A, P, b = _system(13, dtype, variant=variant, seed=4)
    tiny = b * dtype(2.0 ** (-600 if dtype == np.float64 else -80))
    assert float((tiny * tiny).sum()) == 0.0 and tiny.any()
    x, info = P.solve(tiny, rtol=1e-6)
    xg, info_g = _general(P, tiny, rtol=1e-6)
    assert info == info_g == 0 and x.any()
    np.testing.assert_array_equal(x.get(), xg.get())


@pytest.mark.parametrize("variant", VARIANTS)
def test_on_the_callers_stream_and_after_update(variant):
    """b made on a non-default stream is read after it is written; update() rebinds."""
    import cupy
    import cupyx.scipy.sparse as csp
    A, P, b = _system(20, np.float64, variant=variant)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        b2 = cupy.asarray(A @ np.arange(A.shape[0], dtype=float))   # queued on s
        x, info = P.solve(b2, rtol=1e-10)
        assert info == 0
        np.testing.assert_allclose(x.get(), np.arange(A.shape[0]), rtol=1e-6, atol=1e-6)
    P.update(csp.csr_matrix(2.0 * A))
    assert P._fast is not None
    x, info = P.solve(b, rtol=1e-10)
    assert info == 0
    np.testing.assert_allclose((2.0 * A) @ x.get(), b.get(), rtol=0,
                               atol=1e-9 * np.linalg.norm(b.get()))


@pytest.mark.parametrize("variant", VARIANTS)
def test_other_calls_take_the_general_path(variant):
    """Another dtype (CuPy or NumPy), x0, a 2-D b, a strided NumPy b: the general path, its
    answers unchanged."""
    import cupy
    A, P, b = _system(10, np.float64, variant=variant)
    bh = b.get()
    b32 = b.astype(np.float32)
    strided = np.repeat(bh, 2)[::2]
    for args, kw in (((b32.get(),), {}), ((b32,), {}), ((b,), {"x0": cupy.zeros_like(b)}),
                     ((b[:, None],), {}), ((strided,), {}), ((bh,), {"x0": np.zeros_like(bh)})):
        x, info = P.solve(*args, rtol=1e-10, **kw)
        assert np.all(info == 0)
        xr = x.get() if hasattr(x, "get") else x
        rhs = bh if args[0].dtype == np.float64 else b32.get().astype(np.float64)
        assert np.linalg.norm(rhs - A @ xr.ravel()) <= 1e-9 * np.linalg.norm(rhs)


def test_the_copied_result_area_gives_the_same():
    """Without unified addressing the result area is copied back: the same answers."""
    A, P, b = _system(18, np.float64)
    f = P._fast
    x0, info0 = P.solve(b, rtol=1e-9)
    f.zero_copy = False
    f.rec["status"] = f.status.data.ptr
    x1, info1 = P.solve(b, rtol=1e-9)
    x2, info2 = P.solve(b, rtol=1e-9, maxiter=3)
    assert info0 == info1 == 0 and info2 == 3
    np.testing.assert_array_equal(x0.get(), x1.get())


def _host(v):
    return v.get() if hasattr(v, "get") else v


@pytest.mark.parametrize("method", ["bicg", "bicgstab"])
@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("numpy_b", [False, True])
def test_graphs_other_methods(method, M, numpy_b):
    """BiCG and BiCGStab on graph take the fast path too (a CuPy or a NumPy b): the general
    path's bits out of iterations, its code and an x within the tolerance when converged."""
    A, P, b = _system(23, np.float64, M, seed=2, variant="graph", method=method)
    assert P._fast is not None
    b = b.get() if numpy_b else b
    x, info = P.solve(b, rtol=1e-14, maxiter=5)
    xg, info_g = _general(P, b, rtol=1e-14, maxiter=5)
    assert info == info_g == 5 and type(x) is type(b)
    np.testing.assert_array_equal(_host(x), _host(xg))
    x, info = P.solve(b, rtol=1e-9)
    xg, info_g = _general(P, b, rtol=1e-9)
    assert info == info_g == 0
    bh = _host(b)
    assert np.linalg.norm(bh - A @ _host(x)) <= 1e-9 * np.linalg.norm(bh) * (1 + 1e-6)


@pytest.mark.parametrize("variant,M", [("persistent", None), ("graph", "amg"),
                                       ("graph", None)])
@pytest.mark.parametrize("numpy_b", [False, True])
def test_a_block_takes_the_fast_path_column_by_column(monkeypatch, variant, M, numpy_b):
    """B (n, k) asked for (X, info) alone on a prepared system whose block runs as columns: each
    column is the plain call's (x, info) bit for bit (maxiter 40: out of iterations without
    AMG), and the general path never runs; a zero column is x = 0, info 0; B is only read."""
    from dpsolve import _block
    A, P, b = _system(31, np.float64, M, seed=4, variant=variant)
    import cupy
    B = cupy.stack([b, 3 * b, cupy.zeros_like(b), b[::-1].copy()], axis=1)
    B = B.get() if numpy_b else B
    before = _host(B).copy()
    monkeypatch.setattr(_block, "FUSED_PATH", False)      # graph + None would run fused
    want = [P.solve(B[:, j].copy(), rtol=1e-9, maxiter=40) for j in range(4)]
    _refuse_general_path(monkeypatch)
    X, info = P.solve(B, rtol=1e-9, maxiter=40)
    assert type(X) is type(B) and X.shape == B.shape
    assert info.tolist() == [w[1] for w in want] and info[2] == 0
    for j in range(4):
        np.testing.assert_array_equal(_host(X)[:, j], _host(want[j][0]))
    assert not _host(X)[:, 2].any()
    np.testing.assert_array_equal(_host(B), before)


@pytest.mark.parametrize("variant,M", [("persistent", "jacobi"), ("graph", "amg")])
def test_a_numpy_block_with_x0_and_a_report_solves_on_the_device(variant, M):
    """A NumPy B and X0 with full_output go up once and X comes down once (no host slices):
    each column the single solve with its x0 and report, bit for bit; NumPy out; B and X0 only
    read."""
    A, P, b = _system(27, np.float64, M, seed=5, variant=variant)
    rng = np.random.default_rng(6)
    B = np.asfortranarray(rng.standard_normal((P.n, 3)))      # either order
    X0 = rng.standard_normal((P.n, 3))
    before = B.copy(), X0.copy()
    X, info, rep = P.solve(B, X0, rtol=1e-9, full_output=True)
    assert type(X) is np.ndarray and X.shape == B.shape and rep.k == 3
    for j in range(3):
        x, i, r = P.solve(B[:, j].copy(), X0[:, j].copy(), rtol=1e-9, full_output=True)
        np.testing.assert_array_equal(X[:, j], x)
        assert info[j] == i == 0 and rep.columns[j].iterations == r.iterations
    np.testing.assert_array_equal(B, before[0])
    np.testing.assert_array_equal(X0, before[1])
