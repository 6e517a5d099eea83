"""The fused block CG's driver and its NumPy specification (dpsolve/_block_fused.py), on the host:
each column is textbook preconditioned CG to its own tolerance, frozen once it converged or broke
down; the passes and lanes of block.cu. The kernels themselves are held to HostBlockCG by
tests/test_block.py's GPU tests."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpsolve import _block_fused as bf
from dpsolve.matrices import laplace_2d


def _pcg(A, b, tol, dinv=None, maxiter=1000):
    """Textbook PCG (the module docstring's steps), one column: (x, iterations, converged)."""
    x = np.zeros_like(b)
    r = b.copy()
    z = r if dinv is None else dinv * r
    p, rz = z.copy(), r @ z
    if np.sqrt(r @ r) <= tol:
        return x, 0, True
    for it in range(1, maxiter + 1):
        q = A @ p
        alpha = rz / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        z = r if dinv is None else dinv * r
        if np.sqrt(r @ r) <= tol:
            return x, it, True
        rz, rz_old = r @ z, rz
        p = z + (rz / rz_old) * p
    return x, maxiter, False


def _problem(k=5, seed=0):
    A = sp.csr_array(laplace_2d(30))
    s = sp.diags_array(np.random.default_rng(seed).uniform(0.5, 2.0, A.shape[0]))
    A = sp.csr_array(s @ A @ s)                    # SPD with a varying diagonal
    B = np.random.default_rng(seed + 1).standard_normal((A.shape[0], k))
    B[:, 1] *= 1e-4                                # another scale
    if k > 2:
        B[:, 2] = 0                                # x = 0 at once
    return A, B


@pytest.mark.parametrize("jacobi", [False, True])
def test_each_column_is_textbook_pcg_to_its_own_tolerance(jacobi):
    A, B = _problem()
    dinv = 1 / A.diagonal() if jacobi else None
    tol = np.array([1e-8, 1e-8, 1e-8, 1e-3, 1e-6]) * np.linalg.norm(B, axis=0)
    ops = bf.HostBlockCG(A, B, None, tol, dinv)
    bf.run(ops, maxiter=1000, check_every=3)
    assert (ops.status == bf.CONVERGED).all()
    assert ops.iters[2] == 0 and not ops.X[:, 2].any()
    for j in range(B.shape[1]):
        x, its, ok = _pcg(A, B[:, j], tol[j], dinv)
        assert ok and abs(int(ops.iters[j]) - its) <= 1, (j, ops.iters[j], its)
        assert np.linalg.norm(B[:, j] - A @ ops.X[:, j]) <= 1.01 * tol[j]
        assert np.linalg.norm(ops.X[:, j] - x) <= 1e-6 * np.linalg.norm(x) + 1e-300
    assert len(set(ops.iters.tolist())) > 2        # the columns stopped at different iterations


def test_a_converged_column_is_frozen():
    """A column's result does not depend on the others: alone or beside a slower one, the same
    iterations and (to rounding) the same x."""
    A, B = _problem(k=2)
    tol = np.array([1e-8, 1e-3]) * np.linalg.norm(B, axis=0)      # column 1 stops early
    both = bf.HostBlockCG(A, B, None, tol)
    bf.run(both, 1000)
    alone = bf.HostBlockCG(A, B[:, 1:], None, tol[1:])
    bf.run(alone, 1000)
    assert both.iters[1] == alone.iters[0] < both.iters[0]
    assert np.linalg.norm(both.X[:, 1] - alone.X[:, 0]) <= 1e-7 * np.linalg.norm(alone.X[:, 0])


def test_maxiter_start_at_the_solution_and_breakdown():
    A, B = _problem(k=3)
    tol = 1e-10 * np.linalg.norm(B, axis=0)
    ops = bf.HostBlockCG(A, B, None, tol)
    bf.run(ops, maxiter=7, check_every=4)
    assert ops.status.tolist() == [bf.MAXITER, bf.MAXITER, bf.CONVERGED]
    assert ops.iters.tolist() == [7, 7, 0]
    # started at the solution: converged with no iteration
    X = np.column_stack([sp.linalg.spsolve(A.tocsc(), B[:, j]) for j in range(3)])
    ops = bf.HostBlockCG(A, B, X, 1e-8 * np.linalg.norm(B, axis=0) + 1e-300)
    bf.run(ops, 100)
    assert (ops.status == bf.CONVERGED).all() and not ops.iters.any()
    # indefinite A: the column whose p^H A p is exactly 0 breaks down, the other not
    D = sp.csr_array(sp.diags_array([1.0, -1.0, 3.0, 1.0]))
    Bd = np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    ops = bf.HostBlockCG(D, Bd, None, np.array([1e-12, 1e-12]))
    bf.run(ops, 50)
    assert ops.status.tolist() == [bf.CONVERGED, bf.BROKE]


def test_a_column_stops_at_its_own_limit():
    """limit: the iterations each column may run (a restart's budget): a column at its limit
    stops with MAXITER, the others go on as without it."""
    A, B = _problem(k=3)
    tol = 1e-10 * np.linalg.norm(B, axis=0)
    free = bf.HostBlockCG(A, B, None, tol)
    bf.run(free, 1000)
    ops = bf.HostBlockCG(A, B, None, tol, limit=[5, 1000, 1])
    bf.run(ops, 1000, check_every=2)
    assert ops.status.tolist() == [bf.MAXITER, bf.CONVERGED, bf.CONVERGED]
    assert ops.iters.tolist() == [5, free.iters[1], 0]
    assert np.array_equal(ops.X[:, 1], free.X[:, 1])
    early = bf.HostBlockCG(A, B, None, tol)
    bf.run(early, 5)
    assert np.array_equal(ops.X[:, 0], early.X[:, 0])


class _Pending:
    """A queued read of the active count that the host sees done only once it waits for it
    (ready: as the device would report it)."""

    def __init__(self, count, ready):
        self.count, self._ready, self.waited = count, ready, False

    def ready(self):
        return self._ready

    def value(self):
        self.waited = True
        return self.count


class _Ops:
    """Stands in for the device: its last column converges at iteration `end`; each read of
    the active count holds the count as of the iterations queued before it."""

    def __init__(self, end, ready):
        self.end, self.ready, self.its, self.reads, self.finished = end, ready, 0, [], False

    def start(self):
        pass

    def iterate_many(self, m):
        self.its += m

    def read_active(self):
        self.reads.append(_Pending(int(self.its < self.end), self.ready))
        return self.reads[-1]

    def finish(self):
        self.finished = True


@pytest.mark.parametrize("ready", [False, True])
@pytest.mark.parametrize("end", [0, 1, 13, 40])
def test_run_reads_the_active_count_without_idling_the_device(end, ready):
    """run queues a read every check_every iterations and waits only for the oldest of more
    than LAG: it stops once a read says no column is active, at most (LAG + 1) x check_every
    iterations past the end where reads are slow, within check_every where they are done."""
    ops = _Ops(end, ready)
    bf.run(ops, maxiter=1000, check_every=4)
    assert ops.finished and ops.its >= end
    past = ops.its - end
    assert past <= (4 if ready else (bf.LAG + 1) * 4), (ops.its, end)
    if not ready:          # the host waited only where LAG newer reads were queued
        assert sum(r.waited for r in ops.reads) == len(ops.reads) - bf.LAG
    ops = _Ops(10**6, ready)
    bf.run(ops, maxiter=37, check_every=4)
    assert ops.its == 37 and ops.finished


def _host_runner(A, B, tol):
    """with_restarts' two callables over HostBlockCG (X kept here, as _solve keeps it on the
    device), and the calls made."""
    X = np.zeros(B.shape, B.dtype)
    calls = []

    def run_columns(cols, start, limit):
        calls.append((cols.copy(), start, np.array(limit)))
        ops = bf.HostBlockCG(A, B[:, cols], None if start is None else X[:, cols], tol[cols],
                             limit=limit)
        bf.run(ops, int(np.max(limit)))
        X[:, cols] = ops.X
        return ops.status, ops.iters

    def residuals(cols):
        A64 = A.astype(np.float64)
        return np.linalg.norm(B[:, cols] - A64 @ X[:, cols].astype(np.float64), axis=0)
    return X, calls, run_columns, residuals


def test_float32_columns_restart_from_the_true_residual():
    """with_restarts (what dpsolve's fused block does after its run): float32 CG's recurrence
    claims rtol 1e-6 where the true residual misses it; those columns alone run again from
    their iterate, within the iterations they have left, until the true residual meets the
    tolerance. Without restarts they keep the miss (the caller reports non-convergence); with
    too few iterations nothing restarts."""
    from dpsolve._frontend import MAX_RESTARTS
    A = sp.csr_array(laplace_2d(80)).astype(np.float32)
    n, k = A.shape[0], 6
    B = np.random.default_rng(1).standard_normal((n, k)).astype(np.float32)
    tol = 1e-6 * np.linalg.norm(B.astype(np.float64), axis=0)
    X, calls, run_columns, residuals = _host_runner(A, B, tol)
    status, total, restarts, res = bf.with_restarts(run_columns, residuals, k, tol, 10 * n,
                                                    MAX_RESTARTS)
    assert restarts.any() and (status == bf.CONVERGED).all() and (res <= tol).all()
    assert calls[0][1] is None and (calls[0][0] == np.arange(k)).all()
    assert calls[1][1] == "x" and (calls[1][0] == np.flatnonzero(restarts)).all()   # missed
    for (prev, _, _), (cols, start, limit) in zip(calls[1:], calls[2:]):
        assert start == "x" and set(cols) <= set(prev) and (limit < 10 * n).all()
    assert sum(len(c) for c, _, _ in calls[1:]) == restarts.sum()
    _, _, run0, res0_of = _host_runner(A, B, tol)
    status0, _, restarts0, res0 = bf.with_restarts(run0, res0_of, k, tol, 10 * n, 0)
    assert not restarts0.any() and (status0 == bf.CONVERGED).all() and not (res0 <= tol).all()
    _, calls2, run2, res2_of = _host_runner(A, B, tol)
    status2, total2, restarts2, _ = bf.with_restarts(run2, res2_of, k, tol, 20, MAX_RESTARTS)
    assert (status2 == bf.MAXITER).all() and (total2 == 20).all() and not restarts2.any()
    assert len(calls2) == 1


def test_lanes_and_passes():
    assert [bf.lanes(k) for k in (1, 2, 3, 4, 5, 16, 17, 32)] == [2, 2, 4, 4, 8, 16, 32, 32]
    with pytest.raises(ValueError, match="1 to 32 columns"):
        bf.lanes(33)
    assert bf.passes(32) == [slice(0, 32)]
    assert bf.passes(40) == [slice(0, 20), slice(20, 40)]
    assert bf.passes(65) == [slice(0, 22), slice(22, 43), slice(43, 65)]
    assert all(s.stop - s.start <= bf.MAX_K for k in range(1, 200) for s in bf.passes(k))
