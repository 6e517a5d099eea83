"""The single-reduction CG (Chronopoulos & Gear; dpsolve/methods/cg1), on the CPU:

* the reference against SciPy's cg (float32, float64, complex64, complex128 Hermitian; with and
  without Jacobi; x0; maxiter; zero b) and against dpsolve's reference CG on its breakdowns and
  non-finite stops (-10 at the same iteration);
* ``space.dots``: several inner products in one reduction, the bits of separate ``dot`` calls
  (LocalSpace, and DistributedSpace on MPI.COMM_SELF with one all-reduce);
* ``dpsolve.distributed.cg(..., single_reduction=True)`` on one rank (COMM_SELF): the reference's
  bits, one all-reduce per iteration, the report, the checks;
* stability on s3rmt3m3 (cond ~ 1e10, ~12k Jacobi-CG iterations) against the standard CG;
* the GPU loop (methods/cg1/gpu.py) run with NumPy stand-ins for the executor and the kernels
  of cg1.cu: its order of operations, slots, pending -10 and counts, against the reference bit
  for bit. (The kernels themselves compile in test_cuda_compile.py; they run on a GPU machine
  in tests/mpi_cases.py's GPU cases.)
"""
from __future__ import annotations

import contextlib
import importlib.util
import time

import types

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import dpsolve
import nonfinite_cases
from dpsolve import methods
from dpsolve.cuda import abi
from dpsolve.backends._gpu import GpuState
from dpsolve.matrices import laplace_2d, paper_rhs, read_matrix
from dpsolve.methods.cg1 import gpu as cg1_gpu
from dpsolve.methods.cg1.reference import cg1
from dpsolve.reference import cg as cg_reference
from dpsolve.reference._util import LocalSpace, dotprod
from scipy_cases import sym_nonpd

HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
needs_mpi4py = pytest.mark.skipif(not HAVE_MPI4PY,
                                  reason="mpi4py is not installed: pip install -e '.[mpi]'")
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


def _single(dtype):
    return np.dtype(dtype).char in "fF"


def _rtol(dtype):
    return 1e-4 if _single(dtype) else 1e-9


def spd(dtype, m=12, seed=0):
    """n = m^2: the 2-D Laplacian plus a random positive diagonal (so Jacobi is not a mere
    scaling); complex: plus an imaginary antisymmetric part, Hermitian positive definite."""
    rng = np.random.default_rng(seed)
    n = m * m
    A = laplace_2d(m).astype(float) + sp.diags_array(rng.uniform(0.0, 20.0, n))
    b = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        E = sp.diags_array([rng.standard_normal(n - 1)], offsets=[1])
        A = A.astype(complex) + 0.7j * (E - E.T)
        b = b + 1j * rng.standard_normal(n)
    return sp.csr_array(A.astype(dtype)), b.astype(dtype)


class Iterates:
    def __init__(self):
        self.xs = []

    def __call__(self, xk):
        self.xs.append(np.array(xk, copy=True))


def run(solver, A, b, *, atol, maxiter, x0=None, inv_diag=None, callback=None, space=None):
    x = np.zeros_like(b) if x0 is None else x0.astype(b.dtype).copy()
    psolve = (lambda r: inv_diag * r) if inv_diag is not None else None
    kw = {} if space is None else {"space": space}
    return solver(sp.csr_array(A).__matmul__, b, x, atol=atol, maxiter=maxiter, psolve=psolve,
                  callback=callback, **kw)


# --------------------------------------------------------------------------- not a table method
def test_not_a_method_of_the_table_but_a_keyword_of_distributed_cg():
    import inspect

    import dpsolve.distributed as dd
    assert "cg1" not in methods.names() and not hasattr(dpsolve, "cg1")
    assert not any(m == "cg1" for m, _ in methods.TABLE)
    assert inspect.signature(dd.cg).parameters["single_reduction"].default is False
    for other in (dd.bicg, dd.bicgstab):
        assert "single_reduction" not in inspect.signature(other).parameters
    assert "single_reduction" in dd.cg.__doc__ and "ONE all-reduce" in dd.cg.__doc__


# --------------------------------------------------------------------------- reference vs SciPy
def _against_scipy(dtype, M, x0=None, maxiter=None, A=None, b=None):
    if A is None:
        A, b = spd(dtype)
    rtol = _rtol(dtype)
    inv = (1.0 / A.diagonal()).astype(dtype) if M == "jacobi" else None
    ours, theirs = Iterates(), Iterates()
    x, info, its = run(cg1, A, b, atol=rtol * float(np.linalg.norm(b)),
                       maxiter=maxiter or 10 * A.shape[0], x0=x0, inv_diag=inv, callback=ours)
    xs, infos = sla.cg(A, b, None if x0 is None else x0.copy(), rtol=rtol, maxiter=maxiter,
                       M=sp.diags_array(inv) if inv is not None else None, callback=theirs)
    assert info == infos and len(ours.xs) == its
    assert x.dtype == b.dtype
    if maxiter is not None:
        assert (info, its, len(theirs.xs)) == (maxiter, maxiter, maxiter)
    else:
        assert info == 0 and abs(its - len(theirs.xs)) <= 1
        assert np.linalg.norm(b - A @ x) <= rtol * np.linalg.norm(b) * (1.01 if _single(dtype)
                                                                        else 1.0001)
    # the same iterates as SciPy's CG (the same in exact arithmetic), to rounding: measured
    # 1.6e-7 (single) and 3e-16 (double) relative, the bounds 10x and 1e5x above
    close = 2e-6 if _single(dtype) else 1e-11
    for k, (mine, scipys) in enumerate(zip(ours.xs, theirs.xs)):
        err = np.linalg.norm(mine - scipys) / np.linalg.norm(scipys)
        assert err <= close, f"iterate {k}: {err:.3g}"
    return x, its


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [None, "jacobi"])
def test_reference_matches_scipy(dtype, M):
    _, its = _against_scipy(dtype, M)
    assert its >= 5                       # a real run, not a one-step solve


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_reference_x0(dtype):
    A, b = spd(dtype, seed=3)
    x0 = np.random.default_rng(4).standard_normal(A.shape[0]).astype(dtype)
    keep = x0.copy()
    _against_scipy(dtype, "jacobi", x0=x0, A=A, b=b)
    assert np.array_equal(x0, keep)       # run() passes a copy: the solver's x is its own


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_reference_maxiter(dtype):
    _against_scipy(dtype, None, maxiter=5)


def test_reference_exact_x0_and_zero_b():
    """A zero residual at the start: 0 at 0 with x untouched; a zero b (and x0 = 0) with
    atol = 0 stops as dpsolve's CG does (0/0 is not finite: -10 at 0, x = 0) -- the front ends
    return zeros for b = 0 before any solver runs, as SciPy does (test_one_rank_zero_b)."""
    A, b = spd(np.float64)
    x0 = np.ones(A.shape[0])
    bb = A @ x0
    for solver in (cg1, cg_reference):
        x, info, its = run(solver, A, bb, atol=1e-12, maxiter=10, x0=x0)
        assert (info, its) == (0, 0) and np.array_equal(x, x0)
    zero = np.zeros(A.shape[0])
    with np.errstate(all="ignore"):
        got = [run(solver, A, zero, atol=0.0, maxiter=10)[1:] for solver in (cg1, cg_reference)]
        assert got[0] == got[1] == (-10, 0)
        x, info, its = run(cg1, A, zero, atol=1e-300, maxiter=10)
    assert (info, its) == (0, 0) and not x.any()


# --------------------------------------------------------------------------- -10, as CG's
# diag(1, 0, 1) with b = (0, 2, 1), diag(0, 2) with b = (2, -2): positive semidefinite, the
# second <p, A p> is exactly 0 in binary arithmetic (found by search), so both CGs stop at 1
BREAKDOWNS = {
    "antidiagonal": (np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]), 0),
    "zero-matrix": (np.zeros((3, 3)), np.array([1.0, 0.0, 0.0]), 0),
    "diag(1,-1)": (np.diag([1.0, -1.0]), np.array([1.0, 1.0]), 0),
    "sym-nonpd": (*sym_nonpd(), 0),
    "semidefinite-3": (np.diag([1.0, 0.0, 1.0]), np.array([0.0, 2.0, 1.0]), 1),
    "semidefinite-2": (np.diag([0.0, 2.0]), np.array([2.0, -2.0]), 1),
}


@pytest.mark.parametrize("name", list(BREAKDOWNS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_breakdown_is_minus_10_where_cg_stops(name, dtype):
    """A zero or non-finite denominator (A not positive definite): -10 at the iteration where
    dpsolve's CG stops, with its x (finite) and its callbacks."""
    A, b, at = BREAKDOWNS[name]
    b = b.astype(dtype)
    out = []
    for solver in (cg1, cg_reference):
        calls = Iterates()
        with np.errstate(all="ignore"):
            x, info, its = run(solver, A.astype(dtype), b, atol=1e-8, maxiter=50, callback=calls)
        out.append((x, info, its, len(calls.xs)))
    (x, info, its, k), (xr, info_r, its_r, k_r) = out
    assert (info, its, k) == (info_r, its_r, k_r) == (-10, at, at)
    assert np.isfinite(x).all() and np.array_equal(x, xr)


def test_indefinite_that_cg_solves():
    """diag(1, -1), b = (2, 1): curvatures 3 and -1200/81, finite: both CGs solve it in 2."""
    A = np.diag([1.0, -1.0])
    x, info, its = run(cg1, A, np.array([2.0, 1.0]), atol=1e-8, maxiter=10)
    assert (info, its) == (0, 2)
    np.testing.assert_allclose(x, [2.0, -1.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_nonfinite_tau_is_minus_10_after_the_callback(dtype):
    """diag(1, -1 + 2^-20), b = s (1, 1) with s at the edge of the range (nonfinite_cases'
    scale): alpha_0 = 2^21, r_1 ~ 2^21 s, whose <r, r> overflows: -10 at 1 after one callback,
    x = x_1 (finite), as dpsolve's CG."""
    s = nonfinite_cases._scale(dtype)
    A = np.diag([1.0, -1.0 + 2.0 ** -20]).astype(dtype)
    b = np.array([s, s], dtype)
    out = []
    for solver in (cg1, cg_reference):
        calls = Iterates()
        with np.errstate(all="ignore"):
            x, info, its = run(solver, A, b, atol=1e-8, maxiter=10, callback=calls)
        out.append((x, info, its, len(calls.xs)))
    assert out[0][1:] == out[1][1:] == (-10, 1, 1)
    assert np.isfinite(out[0][0]).all() and np.array_equal(out[0][0], out[1][0])


# --------------------------------------------------------------------------- space.dots
def _pairs(dtype, n=1001, seed=0):
    rng = np.random.default_rng(seed)

    def vec():
        v = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
        if np.dtype(dtype).kind == "c":
            v = v + 1j * rng.standard_normal(n)
        return v.astype(dtype)
    r, u, w = vec(), vec(), vec()
    return [(r, u), (u, w), (r, r)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_local_space_dots_are_the_dots(dtype):
    pairs = _pairs(dtype)
    space = LocalSpace(dotprod(pairs[0][0]))
    got = space.dots(pairs)
    want = [space.dot(a, b) for a, b in pairs]
    assert [type(g) for g in got] == [type(w) for w in want]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    assert space.dots([]) == []


@needs_mpi4py
@pytest.mark.parametrize("dtype", DTYPES)
def test_distributed_space_dots_one_allreduce_same_bits(dtype):
    """On COMM_SELF: ``dots`` is one all-reduce of all the partials, each value the bits of a
    separate ``dot`` (one all-reduce each) and of the serial LocalSpace's dot."""
    from mpi4py import MPI

    from dpsolve.distributed import DistributedSpace, MpiTransport
    pairs = _pairs(dtype, seed=1)
    tr = MpiTransport(MPI.COMM_SELF)
    space = DistributedSpace(tr, 0, 1, dtype)
    got = space.dots(pairs)
    assert tr.stats.allreduce_calls == 1
    want = [space.dot(a, b) for a, b in pairs]
    assert tr.stats.allreduce_calls == 1 + len(pairs)
    serial = [LocalSpace(dotprod(a)).dot(a, b) for a, b in pairs]
    for g, w, s in zip(got, want, serial):
        assert type(g) is type(w) is type(s)
        assert g.tobytes() == w.tobytes() == s.tobytes()


# --------------------------------------------------------------------------- one rank, distributed
def _one_rank(A, b, **kw):
    from mpi4py import MPI

    import dpsolve.distributed as dd
    D = dd.DistributedMatrix.from_global(A, MPI.COMM_SELF)
    return dd.cg(D, b, full_output=True, **kw)


@needs_mpi4py
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("M", [None, "jacobi", "callable"])
def test_one_rank_single_reduction_is_the_reference(dtype, M):
    """dd.cg(single_reduction=True) on COMM_SELF, variant host: the reference cg1's bits and
    iterations; ONE all-reduce per iteration: ||b||, x0.any(), the set-up's dots, one per
    iteration, the true residual -- iterations + 4 (standard CG: 2 per iteration, 3 with M,
    + 5)."""
    A, b = spd(dtype, seed=5)
    rtol = _rtol(dtype)
    inv = (1.0 / A.diagonal()).astype(dtype)
    Mk = {"jacobi": "jacobi", "callable": lambda r: inv * r}.get(M)
    x, info, rep = _one_rank(A, b, rtol=rtol, M=Mk, single_reduction=True)
    xr, info_r, its_r = run(cg1, A, b, atol=rtol * float(np.linalg.norm(b)), maxiter=10 * b.size,
                            inv_diag=inv if M else None)
    assert info == info_r == 0 and rep.restarts == 0
    assert rep.iterations == its_r and np.array_equal(x, xr)
    assert rep.single_reduction is True and rep.method == "cg"
    assert "cg (single reduction)/host/mpi 1 rank" in rep.summary()
    assert rep.as_dict()["single_reduction"] is True
    assert rep.allreduce_calls == rep.iterations + 4
    xs, info_s, rep_s = _one_rank(A, b, rtol=rtol, M=Mk)
    assert rep_s.single_reduction is False and info_s == 0
    assert abs(rep_s.iterations - rep.iterations) <= 1
    assert rep_s.restarts == 0            # ||b||, any, <r, z> and ||r|| at set-up, residual
    assert rep_s.allreduce_calls == (3 if M else 2) * rep_s.iterations + 5


@needs_mpi4py
def test_one_rank_zero_b_and_x0():
    A, b = spd(np.float64, seed=6)
    x, info, rep = _one_rank(A, np.zeros_like(b), single_reduction=True)
    assert (info, rep.iterations) == (0, 0) and not x.any()
    x0 = np.random.default_rng(7).standard_normal(b.size)
    keep = x0.copy()
    from mpi4py import MPI

    import dpsolve.distributed as dd
    D = dd.DistributedMatrix.from_global(A, MPI.COMM_SELF)
    x, info = dd.cg(D, b, x0, rtol=1e-10, M="jacobi", single_reduction=True)
    xr, info_r, _ = run(cg1, A, b, atol=1e-10 * float(np.linalg.norm(b)), maxiter=10 * b.size,
                        x0=x0, inv_diag=1.0 / A.diagonal())
    assert info == info_r == 0 and np.array_equal(x, xr) and np.array_equal(x0, keep)


@needs_mpi4py
def test_single_reduction_checks():
    from mpi4py import MPI

    import dpsolve.distributed as dd
    D = dd.DistributedMatrix.laplace3d(3, 3, 3, MPI.COMM_SELF)
    b = np.ones(27)
    with pytest.raises(ValueError, match="single_reduction is a keyword of cg only, not of "
                                         "bicgstab"):
        dd.solve("bicgstab", D, b, single_reduction=True)
    with pytest.raises(ValueError, match="single_reduction must be True or False, got 'yes'"):
        dd.cg(D, b, single_reduction="yes")
    with pytest.raises(TypeError, match="single_reduction"):
        dd.bicg(D, b, single_reduction=True)
    x, info = dd.solve("bicgstab", D, b, single_reduction=False)      # False is everyone's
    assert info == 0


# --------------------------------------------------------------------------- stability: s3rmt3m3
S3_RTOL = 1e-8


@pytest.fixture(scope="module")
def s3rmt3m3(matrix_dir):
    path = matrix_dir / "s3rmt3m3.mtx.gz"
    if not path.exists():
        pytest.skip(f"{path} is not present")
    return read_matrix(path)


class _LastTau(LocalSpace):
    """LocalSpace recording the last recurrence residual norm the solver tested."""
    tau = None

    def dots(self, pairs):
        out = super().dots(pairs)
        self.tau = float(np.sqrt(abs(out[-1])))           # <r, r>: the last pair (Jacobi)
        return out

    def norm(self, r):
        self.tau = super().norm(r)
        return self.tau


def test_s3rmt3m3_single_reduction_is_as_stable_as_cg(s3rmt3m3):
    """s3rmt3m3 (n = 5357, cond ~ 1e10), Jacobi, rtol 1e-8, the paper's b = A ones, x0 = 0:
    single-reduction CG against dpsolve's reference CG (SciPy's iteration; the README's 12,421
    iterations). Chronopoulos & Gear's recurrence for A p (s = w + beta s) and for
    <p, A p> (delta - beta gamma' / alpha) could drift from the true ones in 12k steps and
    delay convergence or leave a true residual above the recurrence's; measured here:

        CG   12,421 iterations, ||b - A x|| / ||b|| = 9.654e-09 (recurrence 9.654e-09)
        CG1  12,420 iterations, ||b - A x|| / ||b|| = 9.737e-09 (recurrence 9.737e-09)

    (about 1.6 s each on one CPU core). The bounds:

    * true residual <= 1.01 rtol ||b||: the recurrence residual is < rtol ||b|| when the loop
      stops, and the measured gap between it and the true one is ~1e-13 ||b|| for both CGs
      (5 orders below the tolerance); 1 % of the tolerance allows a gap 1000x the measured;
      a recurrence that drifted (a wrong s, an inconsistent alpha) shows as a gap first;
    * iterations within 2 % of CG's: perturbing b by 1e-14 (relative, 5 draws) moves CG's own
      count by up to 0.45 % (12,366 .. 12,421) and CG1's by up to 0.4 % (12,418 .. 12,465), and
      CG1 / CG ranged 0.9999 .. 1.006: 2 % is 3x the spread rounding alone causes, and far below
      what a loss of stability costs (pipelined CG variants lose several-fold on such systems).
    """
    A = s3rmt3m3
    b, _ = paper_rhs(A)
    inv = 1.0 / A.diagonal()
    nb = float(np.linalg.norm(b))
    out = {}
    for name, solver in (("cg", cg_reference), ("cg1", cg1)):
        space = _LastTau(dotprod(b))
        t0 = time.perf_counter()
        x, info, its = run(solver, A, b, atol=S3_RTOL * nb, maxiter=10 * A.shape[0],
                           inv_diag=inv, space=space)
        true = float(np.linalg.norm(b - A @ x)) / nb
        out[name] = (info, its, true, space.tau / nb, time.perf_counter() - t0)
    summary = "; ".join(f"{k}: info={v[0]} it={v[1]} true={v[2]:.4g} recurrence={v[3]:.4g} "
                        f"{v[4]:.1f}s" for k, v in out.items())
    for name, (info, its, true, rec, _) in out.items():
        assert info == 0, summary
        assert rec < S3_RTOL, summary
        assert true <= 1.01 * S3_RTOL, summary
        assert abs(true - rec) <= 1e-3 * S3_RTOL, summary
    ratio = out["cg1"][1] / out["cg"][1]
    assert 0.98 <= ratio <= 1.02, summary


# --------------------------------------------------------------------------- ABI
def test_the_three_reduced_slots_are_adjacent():
    """ONE all-reduce covers gamma', delta and <r, r>: abi.compare insists they are adjacent."""
    mirror = abi.mirror()
    g = mirror["DPS_SLOT_CG1_GAMMA"]
    assert (mirror["DPS_SLOT_CG1_DELTA"], mirror["DPS_SLOT_CG1_RR"]) == (g + 1, g + 2)
    assert cg1_gpu.RED == g and cg1_gpu.N_RED == 3
    bad = dict(mirror, DPS_SLOT_CG1_RR=g + 3)
    assert any("must follow DPS_SLOT_CG1_GAMMA" in p for p in abi.compare(bad, bad))
    assert g + 2 < abi.DPS_SLOTS


# --------------------------------------------------------------------------- the GPU loop, emulated
def _null(p):
    return isinstance(p, np.uint64)


def _dot(a, b):
    return dotprod(a)(a, b)


def _k_update(n, pre, pending, status, alpha, beta, inv_diag, u, w, p, s, x, r, part_ru,
              part_rr):
    """cg1.cu's cg1_update, element for element in NumPy (one block's partials)."""
    if pending[0] != 0:
        status[0] = pending[0]
        return
    assert bool(pre) is not _null(inv_diag) is _null(u) is _null(part_rr)
    p[:] = (u if pre else r) + beta[0] * p
    s[:] = w + beta[0] * s
    x += alpha[0] * p
    r -= alpha[0] * s
    if pre:
        u[:] = inv_diag * r
    part_ru[:] = 0
    part_ru[0] = _dot(r, u if pre else r)
    if pre:
        part_rr[:] = 0
        part_rr[0] = _dot(r, r)


def _k_finish(n_ru, part_ru, part_rr, n_uw, part_uw, red):
    red[0] = np.sum(part_ru[:n_ru])
    red[1] = np.sum(part_uw[:n_uw])
    red[2] = red[0] if _null(part_rr) else np.sum(part_rr[:n_ru])


def _k_start(red, gamma, alpha, beta, tau, status, pending):
    a = red[0] / red[1]
    ok = np.isfinite(a)
    gamma[0], tau[0] = red[0], np.sqrt(abs(red[2]))
    alpha[0], beta[0], status[0] = (a if ok else 0), 0, 0
    pending[0] = 0 if ok else abi.DPS_BREAKDOWN


def _k_step(red, gamma, alpha, beta, tau, status, pending):
    if status[0] != 0:
        return
    g1, d = red[0], red[1]
    tau[0] = np.sqrt(abs(red[2]))
    b = g1 / gamma[0]
    a = g1 / (d - b * g1 / alpha[0])
    ok = np.isfinite(b) and np.isfinite(a)
    gamma[0], beta[0], alpha[0] = g1, (b if ok else 0), (a if ok else 0)
    pending[0] = 0 if ok else abi.DPS_BREAKDOWN


KERNELS = {"cg1_update": _k_update, "cg1_finish": _k_finish, "cg1_start": _k_start,
           "cg1_step": _k_step}


class _Plan:
    def __init__(self, ex):
        self.ex, self.ops = ex, []

    def run(self, stream):
        for op in self.ops:
            op()



class _FakeExecutor:
    """The executor's surface cg1_cuda uses, in NumPy: an operation runs now or, inside
    ``record()``, is kept for the plan (as dpsolve/cuda/executor.py's); ``allreduce_slots``
    is counted as a distributed executor's would be (one rank: the sum is the value)."""

    def __init__(self):
        self._recording = None
        self.allreduces = []

    def do(self, fn):
        if self._recording is not None:
            self._recording.append(fn)
        else:
            fn()

    @contextlib.contextmanager
    def record(self):
        plan = _Plan(self)
        self._recording = plan.ops
        try:
            yield plan
        finally:
            self._recording = None

    def spmv(self, A, x, y):
        self.do(lambda: y.__setitem__(slice(None), A @ x))

    def copy(self, src, dst):
        self.do(lambda: dst.__setitem__(slice(None), src))

    def fill(self, v, value):
        self.do(lambda: v.fill(value))

    def axpy(self, alpha, x, y, sign=1.0):
        def op():
            y[:] += (y.dtype.type(sign) * alpha[0]) * x
        self.do(op)

    def jacobi(self, inv_diag, r, z):
        self.do(lambda: z.__setitem__(slice(None), inv_diag * r))

    def scalar(self, source, name, dtype, *ptrs, block=False):
        assert source == "cg1"
        self.do(lambda: KERNELS[name](*ptrs))

    def allreduce_slots(self, view):
        assert view.size == 3
        self.do(lambda: self.allreduces.append(view.copy()))


class _FakeState:
    """GpuState's surface cg1_cuda uses, over NumPy arrays (work vectors poisoned with NaN)."""

    def __init__(self, A, b, inv_diag):
        n, dt = A.shape[0], b.dtype
        self.A, self.n, self.dtype, self.stream, self.M = A, n, dt, None, None
        self.ex = _FakeExecutor()
        self.inv_diag = inv_diag
        # the preconditioner's faces as cg1_cuda reads them: fused (pointwise) or none; the
        # emulated cg1_update takes the D^-1 array where the kernel takes its PrecondArgs
        self.fused, self.general = inv_diag is not None, False
        self.pc_args = inv_diag if inv_diag is not None else np.uint64(0)
        self.b = b.copy()
        self.r, self.p, self.v = (np.full(n, np.nan, dt) for _ in range(3))
        self.z = np.full(n, np.nan, dt) if inv_diag is not None else self.r
        self.scal = np.zeros(abi.DPS_SLOTS, dt)
        self.scal[abi.DPS_SLOT_ONE] = 1
        self._vecs = {}

    residual = GpuState.residual            # the real r = b - A x, over the fake executor

    def s(self, k):
        return self.scal[k:k + 1]

    def vec(self, name):
        return self._vecs.setdefault(name, np.full(self.n, np.nan, self.dtype))

    def partial_sets(self, k):
        return [np.full(1024, np.nan, self.dtype) for _ in range(k)]

    def psolve(self, r, z):
        self.ex.jacobi(self.inv_diag, r, z)

    def read_tau(self, sync):
        return (float(self.scal[abi.DPS_SLOT_TAU].real),
                int(self.scal[abi.DPS_SLOT_STATUS].real))


def _emulated(monkeypatch, A, b, *, atol, maxiter, inv_diag=None, x0=None, callback=None):
    """cg1_cuda (the real loop and host_loop) over the NumPy stand-ins."""
    st = _FakeState(sp.csr_array(A), b, inv_diag)

    def launch(kernel, grid, block, args, stream=None, shared_mem=0):
        st.ex.do(lambda: kernel(*args))

    def dot_partial(x, y, partials, stream=None):
        def op():
            partials[:] = 0
            partials[0] = _dot(x, y)
        st.ex.do(op)
        return 1

    monkeypatch.setattr(cg1_gpu, "launch", launch)
    monkeypatch.setattr(cg1_gpu, "get_kernel", lambda source, expr, dt: KERNELS[expr[:-5]])
    monkeypatch.setattr(cg1_gpu.ops, "dot_partial", dot_partial)
    x = np.zeros_like(b) if x0 is None else x0.astype(b.dtype).copy()
    info, its, extra = cg1_gpu.cg1_cuda(None, st, x, atol=atol, maxiter=maxiter, sync=None,
                                        callback=callback)
    return x, info, its, st


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [None, "jacobi"])
def test_gpu_loop_emulated_is_the_reference(monkeypatch, dtype, M):
    """The loop's kernels and slots, emulated: the reference's x, info and iterations bit for bit
    (the NumPy stand-ins compute what the kernels compute in the reference's operation order);
    one all-reduce at set-up and one per iteration, of the three slots."""
    A, b = spd(dtype, seed=8)
    inv = (1.0 / A.diagonal()).astype(dtype) if M else None
    atol = _rtol(dtype) * float(np.linalg.norm(b))
    calls = Iterates()
    x, info, its, st = _emulated(monkeypatch, A, b, atol=atol, maxiter=500, inv_diag=inv,
                                 callback=calls)
    xr, info_r, its_r = run(cg1, A, b, atol=atol, maxiter=500, inv_diag=inv)
    assert (info, its, len(calls.xs)) == (info_r, its_r, its_r) and info == 0
    assert np.array_equal(x, xr)
    assert len(st.ex.allreduces) == its + 1
    # set-up's reduction: <r, u>, <u, A u>, <r, r> of r = b
    u = inv * b if M else b
    want = [_dot(b, u), _dot(u, A @ u), _dot(b, b)]
    assert st.ex.allreduces[0].tobytes() == np.array(want, dtype).tobytes()


def test_gpu_loop_emulated_records_five_launches_and_one_allreduce(monkeypatch):
    A, b = spd(np.float64, seed=9)
    launches = []
    orig = cg1_gpu.cg1_cuda

    def counting(backend, st, x, **kw):
        real_record = st.ex.record

        @contextlib.contextmanager
        def record():
            with real_record() as plan:
                yield plan
            launches.append(len(plan.ops))
        st.ex.record = record
        return orig(backend, st, x, **kw)
    monkeypatch.setattr(cg1_gpu, "cg1_cuda", counting)
    _emulated(monkeypatch, A, b, atol=1e-8, maxiter=3)
    # update, spmv, dot_partial, finish, the all-reduce (a host call), step
    assert launches == [6]


@pytest.mark.parametrize("name", ["antidiagonal", "zero-matrix", "sym-nonpd", "semidefinite-3",
                                  "semidefinite-2"])
def test_gpu_loop_emulated_breakdowns(monkeypatch, name):
    """The pending -10: raised by the next iteration's update kernel after the host's tau test,
    x untouched, at the reference's iteration."""
    A, b, at = BREAKDOWNS[name]
    calls = Iterates()
    with np.errstate(all="ignore"):
        x, info, its, st = _emulated(monkeypatch, A, b, atol=1e-8, maxiter=50, callback=calls)
        xr, info_r, its_r = run(cg1, A, b, atol=1e-8, maxiter=50)
    assert (info, its, len(calls.xs)) == (info_r, its_r, at) == (-10, at, at)
    assert np.array_equal(x, xr)
    assert int(st.scal[abi.DPS_SLOT_STATUS].real) == -10


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_gpu_loop_emulated_nonfinite_tau_and_maxiter(monkeypatch, dtype):
    s = nonfinite_cases._scale(dtype)
    A = np.diag([1.0, -1.0 + 2.0 ** -20]).astype(dtype)
    b = np.array([s, s], dtype)
    with np.errstate(all="ignore"):
        x, info, its, _ = _emulated(monkeypatch, A, b, atol=1e-8, maxiter=10)
    assert (info, its) == (-10, 1) and np.isfinite(x).all()
    A, b = spd(dtype, seed=10)
    x, info, its, _ = _emulated(monkeypatch, A, b, atol=1e-30, maxiter=4)
    xr, _, _ = run(cg1, A, b, atol=1e-30, maxiter=4)
    assert (info, its) == (4, 4) and np.array_equal(x, xr)


def test_gpu_loop_refuses_a_general_preconditioner():
    A, b = spd(np.float64, seed=11)
    st = _FakeState(A, b, None)
    st.general = True                     # a user's operator M, or one of kernels: not fusable
    st.precond = types.SimpleNamespace(kind="operator")
    with pytest.raises(ValueError, match="M=None or a pointwise preconditioner.*'operator'"):
        cg1_gpu.cg1_cuda(None, st, np.zeros_like(b), atol=1e-8, maxiter=5, sync=None,
                         callback=None)
