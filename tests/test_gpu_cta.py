"""persistent CG's one-block kernel (cg_persistent.cu's cg_persistent_cta, ops.cta_plan) against
its cooperative kernel (ops.CTA = False) and SciPy: which systems take it; the same codes and
iterations within 2 (its sums run in another order), x to the tolerance, for every dtype, with
and without Jacobi, at awkward sizes; x0, maxiter and the residual history; a breakdown; the
prepared call's one launch (GPU machines only)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _chain(n):
    """An SPD tridiagonal matrix of order n with a varied diagonal (rows of 1 to 3 entries)."""
    d = 2.5 + np.cos(np.arange(n))
    return sp.diags([-np.ones(n - 1), d, -np.ones(n - 1)], [-1, 0, 1], format="csr")


# (name, matrix): rows of at most 5 or 7 entries, n from 1 to 4,096 (R = 2, 4, 8)
CASES = [("chain-1", lambda: _chain(1)), ("chain-33", lambda: _chain(33)),
         ("2d-29", lambda: laplace_2d(29)), ("3d-11", lambda: laplace_3d(11)),
         ("chain-2047", lambda: _chain(2047)), ("2d-64", lambda: laplace_2d(64)),
         ("3d-16", lambda: laplace_3d(16))]


def _matrix(make, dtype):
    A = sp.csr_array(make())
    if np.dtype(dtype).kind == "c":              # D A D^H, D = diag(e^(i theta)): Hermitian, SPD
        d = sp.diags(np.exp(0.7j * np.arange(A.shape[0])))
        A = sp.csr_array(d @ A @ d.conj())
    A = A.astype(dtype)
    A.sort_indices()
    return A


def _rhs(A, seed=0):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(A.shape[0])
    if A.dtype.kind == "c":
        b = b + 1j * rng.standard_normal(A.shape[0])
    return b.astype(A.dtype)


def _device(A):
    from dpsolve.cuda import ops
    from dpsolve.formats import CSR
    return ops.DeviceMatrix.build(CSR(A.indptr.astype(np.int32), A.indices.astype(np.int32),
                                      A.data, A.shape[0]), "csr-scalar")


def _solve(monkeypatch, cta, A, b, **kw):
    """dpsolve.cg on persistent, on the one-block kernel (cta, where the system takes it) or the
    cooperative grid; the kernel that ran is checked (a grid of one with dynamic shared memory
    is the one block)."""
    from dpsolve.cuda import ops
    monkeypatch.setattr(ops, "CTA", cta)
    one_block = cta and ops.cta_plan(_device(sp.csr_array(A))) is not None
    launched, real = [], ops.launch

    def spy(kernel, grid, block, args, stream=None, shared_mem=0):
        launched.append(grid == (1,) and shared_mem > 0)
        return real(kernel, grid, block, args, stream, shared_mem=shared_mem)
    monkeypatch.setattr(ops, "launch", spy)
    try:
        out = dpsolve.cg(A, b, variant="persistent", full_output=True, **kw)
    finally:
        monkeypatch.setattr(ops, "launch", real)
    assert any(launched) == one_block, launched
    return out


@pytest.mark.parametrize("name,make", CASES)
def test_the_small_systems_take_one_block(name, make):
    from dpsolve.cuda import ops
    for dtype in DTYPES:
        A = _matrix(make, dtype)
        plan = ops.cta_plan(_device(A))
        n, size = A.shape[0], np.dtype(dtype).itemsize
        nz = 5 if np.diff(A.indptr).max() <= 5 else 7
        # R rows a thread (4 at most for complex); R (NZ + 1) values a thread and the slots in
        # shared memory
        r = min([r for r in (2, 4, 6, 8) if n <= 512 * r and (r <= 4 or A.dtype.kind == "f")],
                default=None)
        fits = r is not None and r * (nz + 1) * 512 * size + 48 * size <= ops._shared_optin()
        assert (plan is not None) == fits, (name, dtype)
        if plan is not None:
            kernel, threads, shared = plan
            assert threads == 512
            assert shared == r * (nz + 1) * 512 * size
            assert kernel.max_dynamic_shared_size_bytes >= shared


def test_the_others_take_the_cooperative_grid(monkeypatch):
    from dpsolve.cuda import ops
    from dpsolve.formats import CSR
    A = sp.csr_array(laplace_2d(65))                                  # n = 4,225 > 8 x 512
    assert ops.cta_plan(_device(A)) is None
    B = sp.csr_array(sp.random(100, 100, density=0.2, random_state=0) + 10 * sp.eye(100))
    assert ops.cta_plan(_device(B)) is None                          # rows of more than 7
    C = sp.csr_array(laplace_2d(16))
    ell = ops.DeviceMatrix.build(CSR(C.indptr.astype(np.int32), C.indices.astype(np.int32),
                                     C.data, C.shape[0]), "ell")
    assert ops.cta_plan(ell) is None                                  # not a CSR format
    monkeypatch.setattr(ops, "CTA", False)
    assert ops.cta_plan(_device(C)) is None


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,make", CASES)
def test_as_the_cooperative_kernel_and_scipy(monkeypatch, name, make, dtype, M):
    A = _matrix(make, dtype)
    b = _rhs(A)
    single = np.dtype(dtype) in (np.float32, np.complex64)
    rtol = 1e-4 if single else 1e-9
    x1, i1, r1 = _solve(monkeypatch, True, A, b, rtol=rtol, M=M)
    x0, i0, r0 = _solve(monkeypatch, False, A, b, rtol=rtol, M=M)
    assert i1 == i0 == 0, (i1, i0)
    assert abs(r1.iterations - r0.iterations) <= 2, (r1.iterations, r0.iterations)
    for x in (x1, x0):
        assert np.linalg.norm(b - A @ x) <= rtol * np.linalg.norm(b) * (1 + 1e-5)
    its = []
    Ms = None if M is None else sp.diags(1 / A.diagonal())
    xs, info = spla.cg(A, b, rtol=rtol, M=Ms, callback=lambda xk: its.append(1))
    assert info == 0 and abs(r1.iterations - len(its)) <= 2, (r1.iterations, len(its))
    assert x1.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_x0_maxiter_and_the_history(monkeypatch, dtype):
    """Out of iterations from an x0: the same code, iterations and, to rounding, x and ||r_j||."""
    A = sp.csr_array(laplace_2d(40)).astype(dtype)
    b = _rhs(A, 3)
    x0 = np.linspace(-1, 1, A.shape[0]).astype(dtype)
    keep = x0.copy()
    out = [_solve(monkeypatch, cta, A, b, x0=x0, rtol=1e-12, maxiter=9, M="jacobi")
           for cta in (True, False)]
    np.testing.assert_array_equal(x0, keep)                          # the caller's x0 untouched
    (x1, i1, r1), (x2, i2, r2) = out
    assert i1 == i2 == 9 and r1.iterations == r2.iterations == 9
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(x1, x2, rtol=tol, atol=tol * np.abs(x2).max())
    h1, h2 = np.asarray(r1.residuals), np.asarray(r2.residuals)
    assert h1.shape == h2.shape and h1.size >= 10
    np.testing.assert_allclose(h1, h2, rtol=100 * tol)


def test_a_breakdown_is_the_cooperative_kernels(monkeypatch):
    """<p, A p> = 0 at the first step: -10 on both kernels, x untouched (x0)."""
    A = sp.csr_array(np.array([[0.0, 1.0], [1.0, 0.0]]))
    b = np.array([1.0, 0.0])
    (x1, i1, _), (x2, i2, _) = (_solve(monkeypatch, cta, A, b, rtol=1e-8) for cta in (True, False))
    assert i1 == i2 == -10
    np.testing.assert_array_equal(x1, x2)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_the_prepared_call_runs_one_block(dtype):
    import cupy
    import cupyx.scipy.sparse as csp
    A = _matrix(lambda: laplace_2d(45), dtype)                       # n = 2,025
    b = cupy.asarray(_rhs(A, 5))
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", variant="persistent", M="jacobi")
    assert P._fast is not None and P._fast.grid == 1 and P._fast.shared > 0
    x, info = P.solve(b, rtol=1e-10)
    xg, info_g, rep = P.solve(b, rtol=1e-10, full_output=True)     # the general path
    assert info == info_g == 0
    bh = b.get()
    assert np.linalg.norm(bh - A @ x.get()) <= 1e-10 * np.linalg.norm(bh) * (1 + 1e-6)
    np.testing.assert_allclose(x.get(), xg.get(), rtol=0, atol=1e-7 * np.abs(xg.get()).max())
    x7, info7 = P.solve(b, rtol=1e-12, maxiter=7)                    # the same kernel, flags
    xg7, info_g7, _ = P.solve(b, rtol=1e-12, maxiter=7, full_output=True)
    assert info7 == info_g7 == 7
    np.testing.assert_array_equal(x7.get(), xg7.get())               # r = b = b - A 0: same bits
