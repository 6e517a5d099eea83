"""The fused block BiCGStab's NumPy specification (dpsolve/_block_bicgstab.py), on the host: each
column is dpsolve's reference BiCGStab (SciPy's algorithm) to its own tolerance, frozen once it
converged (at the half step too), broke down or spent its limit. The kernels are held to
HostBlockBiCGStab by tests/test_block.py's GPU tests."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpsolve import _block_fused as bf
from dpsolve._block_bicgstab import HostBlockBiCGStab, breakdown_tol
from dpsolve.matrices import convdiff_2d
from dpsolve.reference.bicgstab import bicgstab as reference_bicgstab


def _problem(k=5, seed=0):
    A = sp.csr_array(convdiff_2d(24, peclet=30.0))            # nonsymmetric, 576 rows
    B = np.random.default_rng(seed).standard_normal((A.shape[0], k))
    B[:, 1] *= 1e-4
    if k > 2:
        B[:, 2] = 0
    return A, B


def _single(A, b, tol, dinv=None, maxiter=2000):
    psolve = None if dinv is None else (lambda v: dinv * v)
    x, info, its = reference_bicgstab(lambda v: A @ v, b, np.zeros_like(b), atol=tol,
                                      maxiter=maxiter, psolve=psolve)
    return x, info, its


@pytest.mark.parametrize("jacobi", [False, True])
def test_each_column_is_the_reference_bicgstab_to_its_own_tolerance(jacobi):
    A, B = _problem()
    dinv = 1 / A.diagonal() if jacobi else None
    tol = np.array([1e-8, 1e-8, 1e-8, 1e-3, 1e-6]) * np.linalg.norm(B, axis=0)
    ops = HostBlockBiCGStab(A, B, None, tol, dinv)
    bf.run(ops, maxiter=2000, check_every=3)
    assert (ops.status == bf.CONVERGED).all(), ops.status
    assert ops.iters[2] == 0 and not ops.X[:, 2].any()
    for j in (0, 1, 3, 4):          # column 2 is zero: x = 0 (the front end's answer too)
        x, info, its = _single(A, B[:, j], tol[j], dinv)
        assert info == 0
        assert abs(int(ops.iters[j]) - its) <= 1, (j, ops.iters[j], its)
        assert np.linalg.norm(B[:, j] - A @ ops.X[:, j]) <= 1.5 * tol[j]
        assert np.linalg.norm(ops.X[:, j] - x) <= 1e-5 * np.linalg.norm(x) + 1e-300
    assert len(set(ops.iters.tolist())) > 2        # the columns stopped at different iterations


def test_a_column_is_frozen_and_stops_at_its_limit():
    A, B = _problem(k=3)
    tol = np.array([1e-10, 1e-3, 1e-10]) * np.linalg.norm(B, axis=0) + 1e-300
    both = HostBlockBiCGStab(A, B[:, :2], None, tol[:2])
    bf.run(both, 2000)
    alone = HostBlockBiCGStab(A, B[:, 1:2], None, tol[1:2])
    bf.run(alone, 2000)
    assert both.iters[1] == alone.iters[0] < both.iters[0]
    assert np.linalg.norm(both.X[:, 1] - alone.X[:, 0]) <= 1e-7 * np.linalg.norm(alone.X[:, 0])
    ops = HostBlockBiCGStab(A, B, None, tol, limit=[4, 2000, 1])
    bf.run(ops, 2000)
    assert ops.status.tolist() == [bf.MAXITER, bf.CONVERGED, bf.CONVERGED]
    assert ops.iters.tolist() == [4, both.iters[1], 0]


def test_converging_at_the_half_step():
    """A diagonal A with b an eigenvector: s = 0 after the first half step, so x = alpha M p
    and the iteration counts one, as the reference returns (x, 0, j + 1) there."""
    A = sp.csr_array(sp.diags_array(np.linspace(1.0, 3.0, 50)))
    B = np.zeros((50, 2))
    B[7, 0] = 2.0
    B[:, 1] = np.linspace(-1, 1, 50)
    tol = 1e-10 * np.linalg.norm(B, axis=0)
    ops = HostBlockBiCGStab(A, B, None, tol)
    bf.run(ops, 100)
    x, info, its = _single(A, B[:, 0], tol[0])
    assert ops.status[0] == bf.CONVERGED and ops.iters[0] == its == 1
    assert np.array_equal(ops.X[:, 0], x)
    assert ops.status[1] == bf.CONVERGED and ops.iters[1] > 1


def test_breakdowns_and_a_start_at_the_solution():
    A, B = _problem(k=2)
    X = np.column_stack([sp.linalg.spsolve(A.tocsc(), B[:, j]) for j in range(2)])
    ops = HostBlockBiCGStab(A, B, X, 1e-8 * np.linalg.norm(B, axis=0))
    bf.run(ops, 100)
    assert (ops.status == bf.CONVERGED).all() and not ops.iters.any()
    # a skew A: <r~, A r~> = 0 at once, so <r~, v> = 0 in the first iteration: breakdown
    S = sp.csr_array(np.array([[0.0, 1.0], [-1.0, 0.0]]))
    Bs = np.array([[1.0, 1.0], [1.0, 0.0]])
    ops = HostBlockBiCGStab(S + 0 * sp.eye_array(2), Bs, None, np.array([1e-12, 1e-12]))
    bf.run(ops, 20)
    assert ops.status.tolist() == [bf.BROKE, bf.BROKE]
    _, info, _ = _single(S, Bs[:, 0], 1e-12)
    assert info == -11
    assert breakdown_tol(np.float32) == pytest.approx(np.finfo(np.float32).eps ** 2)
