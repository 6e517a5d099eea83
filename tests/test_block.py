"""Several right-hand sides: dpsolve.<method>(A, B) with B of shape (n, k) (dpsolve/_block.py).

Each column is the single solve of that column, bit for bit (one prepared system, the columns one
after another); (n,) and (n, 1) keep SciPy's single right-hand side; bad columns are named."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve.backends import VARIANT_NAMES, get_backend
from dpsolve.matrices import laplace_2d

N = 144


def _A(dtype=np.float64):
    return sp.csr_array(laplace_2d(12)).astype(dtype)


def _B(k=4, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.random((N, k))
    if np.dtype(dtype).kind == "c":
        B = B + 1j * rng.random((N, k))
    if k > 1:
        B[:, 1] *= 1e-3                   # columns of different scale converge at different j
    return B.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("method", ["cg", "bicgstab", "bicg", "gmres"])
def test_each_column_is_its_single_solve(method, dtype):
    A, B = _A(dtype), _B(5, dtype)
    B[:, 3] = 0                                           # a zero column: x = 0, info 0
    B0 = B.copy()
    rtol = 1e-5 if dtype == np.float32 else 1e-8
    X, info, rep = getattr(dpsolve, method)(A, B, rtol=rtol, variant="host", full_output=True)
    assert np.array_equal(B, B0)                          # the caller's B is not modified
    assert X.shape == B.shape and X.dtype == dtype and info.shape == (5,)
    assert rep.k == 5 and rep.info.tolist() == info.tolist()
    for j in range(5):
        x, i = getattr(dpsolve, method)(A, B[:, j], rtol=rtol, variant="host")
        assert np.array_equal(X[:, j], x) and info[j] == i     # the same code too (a float32
        if i == 0:                                             # BiCG may break down: -10)
            assert np.linalg.norm(B[:, j] - A @ X[:, j]) <= rtol * np.linalg.norm(B[:, j]) * 1.01
    assert (info == 0).sum() >= 4
    assert not X[:, 3].any() and rep.iterations[3] == 0


def test_single_right_hand_sides_keep_scipys_shapes():
    A, B = _A(), _B(1)
    for b in (B[:, 0], B):
        x, info = dpsolve.cg(A, b, variant="host")
        assert x.shape == (N,) and isinstance(info, int)


def test_orders_x0_prepared_and_callbacks():
    A, B = _A(), _B(3)
    X, info = dpsolve.cg(A, np.asfortranarray(B), rtol=1e-8, variant="host")
    Xc, _ = dpsolve.cg(A, np.ascontiguousarray(B), rtol=1e-8, variant="host")
    assert np.array_equal(X, Xc) and X.flags.c_contiguous
    # x0 per column: starting at the answer costs no iteration
    X2, info2, rep2 = dpsolve.cg(A, B, X, rtol=1e-8, variant="host", full_output=True)
    assert (rep2.iterations <= 1).all()
    with pytest.raises(ValueError, match=r"x0 \(144, 2\) and b \(144, 3\) must have the same"):
        dpsolve.cg(A, B, np.zeros((N, 2)), variant="host")
    # a prepared system takes blocks too, through P.solve and dpsolve.cg(P, B)
    P = dpsolve.prepare(A, "cg", variant="host")
    Xp, infop = P.solve(B, rtol=1e-8)
    assert np.array_equal(Xp, X) and (infop == 0).all()
    assert np.array_equal(dpsolve.cg(P, B, rtol=1e-8)[0], X)
    # the callback sees X (n, k), the column in progress updated
    seen = []
    dpsolve.cg(A, B, rtol=1e-8, variant="host", callback=lambda Xk: seen.append(Xk.shape))
    assert seen and set(seen) == {(N, 3)}


def test_bad_columns_are_named_and_each_column_keeps_its_code():
    A, B = _A(), _B(4)
    B[5, 2] = np.nan
    with pytest.raises(ValueError, match="b contains NaN or Inf in column 2"):
        dpsolve.cg(A, B, variant="host")
    B[5, 2] = 1.0
    X0 = np.zeros((N, 4))
    X0[0, 1] = np.inf
    with pytest.raises(ValueError, match="x0 contains NaN or Inf in column 1"):
        dpsolve.cg(A, B, X0, variant="host")
    with pytest.raises(ValueError, match=r"shapes of A \(144, 144\) and b \(143, 4\)"):
        dpsolve.cg(A, B[:-1], variant="host")
    # a column that cannot converge in maxiter has its own code; the others converge
    B[:, 0] *= 1e6
    X, info = dpsolve.cg(A, B, atol=1e-3, rtol=0.0, maxiter=3, variant="host")
    assert info[0] == 3
    X, info = dpsolve.cg(A, B[:, 1:], rtol=1e-8, variant="host")
    assert (info == 0).all()


def test_an_empty_block_returns_empty_arrays():
    X, info = dpsolve.cg(_A(), np.zeros((N, 0)), variant="host")
    assert X.shape == (N, 0) and info.shape == (0,)


def test_distributed_refuses_a_block_by_name():
    from dpsolve.distributed.solvers import _local_vector
    v, problem = _local_vector(np.ones((10, 3)), 10, "b")
    assert v is None and "takes one right-hand side (n_local,) for now" in problem


GPU_VARIANTS = [v for v in VARIANT_NAMES[1:] if get_backend(v) is not None]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_gpu_block_equals_single_solves(variant):
    import cupy
    A, B = _A(), _B(3)
    for Bin in (B, cupy.asarray(B)):
        X, info = dpsolve.cg(A, Bin, rtol=1e-8, variant=variant, M="jacobi")
        assert isinstance(X, type(Bin)) and (info == 0).all()
        Xh = X.get() if isinstance(X, cupy.ndarray) else X
        for j in range(3):
            x, i = dpsolve.cg(A, B[:, j], rtol=1e-8, variant=variant, M="jacobi")
            assert np.array_equal(Xh[:, j], x) and i == 0
