"""The default call's lane (dpsolve/_fast.py's Lane): ``dpsolve.cg(A, b)`` with a cupyx CSR A and
a CuPy b takes one guarded launch from its third call on (here, with ADOPT_AFTER = 1, its
second). It must give the general path's answers, read A as it is at each call (values changed in
place; a matrix changed into a bad one raises the general path's error and never reaches the
kernel), and keep nothing past its matrix (GPU machines only)."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve import _fast
from dpsolve import DpsolveWarning, FormatError
from dpsolve.matrices import laplace_2d, laplace_3d

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


@pytest.fixture(autouse=True)
def _no_lanes(monkeypatch):
    """No lanes before or after; a lane made after one general-path call (the module's default
    waits for two: ``test_a_matrix_used_once_makes_no_lane`` tests that)."""
    dpsolve.clear_cache()
    monkeypatch.setattr(_fast, "ADOPT_AFTER", 1)
    yield
    dpsolve.clear_cache()


def _system(A, dtype=np.float64, seed=0):
    import cupy
    import cupyx.scipy.sparse as csp
    A = sp.csr_array(A).astype(dtype)
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(A.shape[0])
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(A.shape[0])
    return A, csp.csr_matrix(A), cupy.asarray(b.astype(dtype))


class Spy:
    """Counts the calls the lane answered (FastCG.solve returning a result under a Lane)."""

    def __init__(self, monkeypatch):
        self.answered = 0
        real = _fast.Lane.solve

        def solve(lane, *a):
            out = real(lane, *a)
            self.answered += out is not None
            return out
        monkeypatch.setattr(_fast.Lane, "solve", solve)


def _general(dA, b, **kw):
    x, info, _ = cg(dA, b, full_output=True, **kw)              # full_output: the general path
    return x, info


def cg(dA, b, **kw):
    """The default call on variant persistent in csr-scalar (what "auto" picks at 3-D 100^3; the
    rule may pick ELL elsewhere, which the lane does not take)."""
    kw = {"variant": "persistent", "format": "csr-scalar", **kw}
    return dpsolve.cg(dA, b, **kw)


@pytest.mark.parametrize("fmt", ["csr-scalar", "csr-vector"])
@pytest.mark.parametrize("side", [29, 70])          # one block (cta_plan) and the cooperative grid
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_lane_gives_the_general_paths_bits(dtype, side, fmt, monkeypatch):
    """maxiter = 7 (not converged): the same iterates as the general path, bit for bit; then a
    converged call with the same code and an x within its tolerance."""
    spy = Spy(monkeypatch)
    A, dA, b = _system(laplace_2d(side), dtype)
    x1, info1 = cg(dA, b, rtol=1e-12, maxiter=7, format=fmt)   # the general path; adopted
    assert spy.answered == 0 and len(_fast._lanes) == 1
    x2, info2 = cg(dA, b, rtol=1e-12, maxiter=7, format=fmt)   # the lane
    assert spy.answered == 1
    xg, info_g = _general(dA, b, rtol=1e-12, maxiter=7, format=fmt)
    assert info1 == info2 == info_g == 7
    np.testing.assert_array_equal(x2.get(), xg.get())
    np.testing.assert_array_equal(x1.get(), xg.get())
    rtol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
    x, info = cg(dA, b, rtol=rtol, format=fmt)
    assert spy.answered == 2 and info == 0
    bh = b.get()
    assert np.linalg.norm(bh - A @ x.get()) <= rtol * np.linalg.norm(bh) * (1 + 1e-6)
    assert x.dtype == np.dtype(dtype) and x.data.ptr != b.data.ptr


@pytest.mark.parametrize("sync", ["polling", "blocking"])
def test_values_changed_in_place_are_solved_with(sync, monkeypatch):
    """A time stepper's habit: A.data rewritten between calls. The lane reads A live."""
    spy = Spy(monkeypatch)
    A, dA, b = _system(laplace_3d(12))
    cg(dA, b, sync=sync)
    for step in range(3):
        dA.data *= 1.5                                           # in place: the same pointers
        x, info = cg(dA, b, rtol=1e-10, sync=sync)
        A = A * 1.5
        assert info == 0
        bh = b.get()
        assert np.linalg.norm(bh - A @ x.get()) <= 1e-10 * np.linalg.norm(bh) * (1 + 1e-6)
    assert spy.answered == 3


def test_a_nan_put_in_place_raises_and_the_lane_recovers(monkeypatch):
    spy = Spy(monkeypatch)
    A, dA, b = _system(laplace_2d(40))
    cg(dA, b)
    keep = float(dA.data[17])
    dA.data[17] = np.nan
    with pytest.raises(ValueError, match="A contains NaN or Inf"):
        cg(dA, b)
    assert not _fast._lanes                                      # the guard stopped it: dropped
    dA.data[17] = keep
    for _ in range(2):
        x, info = cg(dA, b, rtol=1e-10)
        assert info == 0
    assert spy.answered == 1                                     # adopted again, then taken


@pytest.mark.parametrize("dtype,k", [(np.float32, -100), (np.float32, 100),
                                     (np.float64, -700)])
def test_values_scaled_far_from_1_in_place_leave_the_lane(dtype, k, monkeypatch):
    """A.data rescaled in place past the window where A is solved as it is: the guard (csr_check's
    exponent words) stops the kernel, the general path solves A / 2^f and answers as at scale 1
    (x / 2^k, the same bits), and makes no lane of a scaled A; back at scale 1 the lane returns."""
    spy = Spy(monkeypatch)
    A, dA, b = _system(laplace_3d(12), dtype)
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    x1, info1 = cg(dA, b, rtol=rtol)                            # the general path; adopted
    assert info1 == 0 and len(_fast._lanes) == 1
    dA.data *= dtype(2.0 ** k)                                   # in place: the same pointers
    x, info = cg(dA, b, rtol=rtol)
    assert info == 0 and spy.answered == 0 and not _fast._lanes
    np.testing.assert_array_equal(x.get(), (x1.get() * np.float64(2.0 ** -k)).astype(dtype))
    x, info = cg(dA, b, rtol=rtol)                              # still the general path
    assert info == 0 and spy.answered == 0 and not _fast._lanes
    dA.data *= dtype(2.0 ** -k)
    for _ in range(2):
        x, info = cg(dA, b, rtol=rtol)
    assert info == 0 and spy.answered == 1
    np.testing.assert_array_equal(x.get(), x1.get())


def test_a_matrix_too_spread_to_scale_makes_no_lane(monkeypatch):
    """float32 values up to 2^40 (outside the window) and down to 2^-40: A is not scaled (2^-40
    would fall below 2^-32), and no lane is made for it (its guard would stop every call)."""
    spy = Spy(monkeypatch)
    A = sp.csr_array(laplace_3d(12), dtype=np.float32) * np.float32(2.0 ** 37)
    A = sp.csr_array(A + sp.diags_array(np.full(A.shape[0], 2.0 ** -40), offsets=1,
                                        shape=A.shape, dtype=np.float32))
    A, dA, b = _system(A, np.float32)
    for _ in range(3):
        x, info = cg(dA, b, rtol=1e-4)
        assert info == 0 and spy.answered == 0 and not _fast._lanes
    assert np.linalg.norm(b.get() - A @ x.get()) <= 1e-4 * np.linalg.norm(b.get()) * 1.01


@pytest.mark.parametrize("side", [29, 70])
def test_an_index_broken_in_place_raises_the_general_error(side):
    """A column index out of range never reaches the kernel: FormatError, and the GPU is fine."""
    A, dA, b = _system(laplace_2d(side))
    cg(dA, b)
    n = A.shape[0]
    keep = int(dA.indices[5])
    dA.indices[5] = n + 1000
    with pytest.raises(FormatError, match="column index out of range"):
        cg(dA, b)
    dA.indices[5] = keep
    x, info = cg(dA, b, rtol=1e-10)
    assert info == 0


@pytest.mark.parametrize("side", [29, 70])
def test_a_pattern_changed_in_place_gets_the_general_paths_answer(side, monkeypatch):
    """Row pointers moved in place (same nnz): longer rows than the one-block kernel took, and
    unsorted ones. The guard sends the call to the general path, which repairs a copy."""
    import cupy
    spy = Spy(monkeypatch)
    A, dA, b = _system(laplace_2d(side))
    cg(dA, b)
    ip = dA.indptr.get()
    i = int(np.argmax(np.diff(ip)))                              # a row of 5 entries
    ip[i + 1] += 1                                               # takes row i + 1's first entry
    dA.indptr[:] = cupy.asarray(ip)                             # (no longer symmetric)
    xl, info_l = cg(dA, b, maxiter=20)
    xg, info_g = _general(dA, b, maxiter=20)
    assert spy.answered == 0 and not _fast._lanes and info_l == info_g
    np.testing.assert_array_equal(xl.get(), xg.get())


def test_replaced_arrays_are_another_matrix(monkeypatch):
    spy = Spy(monkeypatch)
    A, dA, b = _system(laplace_2d(33))
    cg(dA, b)
    dA.data = dA.data * 2.0                                      # a new array: a new key
    x, info = cg(dA, b, rtol=1e-10)
    assert spy.answered == 0 and info == 0
    np.testing.assert_allclose((2.0 * A) @ x.get(), b.get(), atol=1e-9 * np.linalg.norm(b.get()))
    cg(dA, b)
    assert spy.answered == 1


def test_b_zero_nan_and_other_calls():
    """b = 0 is x = 0; a NaN in b is the general path's error; a float32 b, x0 and full_output
    take the general path with their usual answers; the lane stays."""
    import cupy
    A, dA, b = _system(laplace_2d(25))
    cg(dA, b)
    x, info = cg(dA, cupy.zeros_like(b))
    assert info == 0 and not x.any()
    bad = b.copy()
    bad[3] = np.inf
    with pytest.raises(ValueError, match="b contains NaN or Inf"):
        cg(dA, bad)
    assert len(_fast._lanes) == 1
    for kw in ({"x0": cupy.zeros_like(b)}, {"M": "jacobi"}, {"variant": "graph"}):
        x, info = cg(dA, b, rtol=1e-10, **kw)
        assert info == 0
        assert np.linalg.norm(b.get() - A @ x.get()) <= 1e-9 * np.linalg.norm(b.get())
    x, info = cg(dA, b.astype(np.float32), rtol=1e-10)
    assert info == 0 and x.dtype == np.float64


def test_threads_share_a_lane_safely():
    """Four threads solving with one matrix at once: each answer its own b's."""
    import cupy
    A, dA, b = _system(laplace_3d(14))
    cg(dA, b)
    rng = np.random.default_rng(3)
    rhs = [rng.standard_normal(A.shape[0]) for _ in range(4)]
    errors = []

    def work(k):
        try:
            with cupy.cuda.Stream(non_blocking=True):
                bk = cupy.asarray(rhs[k])
                for _ in range(6):
                    x, info = cg(dA, bk, rtol=1e-10)
                    r = np.linalg.norm(rhs[k] - A @ x.get()) / np.linalg.norm(rhs[k])
                    if info != 0 or r > 1e-10 * (1 + 1e-6):
                        errors.append((k, info, r))
        except Exception as e:                                   # pragma: no cover - reported
            errors.append((k, repr(e)))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_lanes_go_with_their_matrices():
    """At most LANE_ENTRIES lanes; a collected matrix takes its lane with it."""
    mats = [_system(laplace_2d(20 + k))[1:] for k in range(3)]
    for dA, b in mats:
        cg(dA, b)
    assert len(_fast._lanes) == _fast.LANE_ENTRIES == 2
    keys = [k for k in _fast._lanes]
    assert all(k[0] in (id(mats[1][0]), id(mats[2][0])) for k in keys)
    del mats[2], dA, b                                           # (the loop held the last)
    gc.collect()
    assert len(_fast._lanes) == 1


def test_on_the_callers_stream():
    """b written on a non-default stream is read after it is written, x ready on it: y = 2 x
    queued on that stream sees x. y is read on that stream too (CuPy's get copies on the
    current stream): read outside the ``with``, on the legacy default stream, which does not
    wait for a non-blocking one, y could be copied before 2 x was written (all zeros in 73-127
    of 150 tries with 8 processes on one H200; benchmarks/lane-stream-race-2026-11-29.py)."""
    import cupy
    A, dA, b = _system(laplace_2d(31))
    cg(dA, b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        b2 = cupy.asarray(A @ np.arange(A.shape[0], dtype=float))
        x, info = cg(dA, b2, rtol=1e-10)
        y = (x * 2).get() / 2                      # on s, after 2 x
    assert info == 0, info
    np.testing.assert_allclose(y, np.arange(A.shape[0]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("A", [laplace_3d(40), laplace_2d(100)], ids=["3d-40", "2d-100"])
def test_the_plain_default_call_takes_the_lane_where_auto_picks_csr(A, monkeypatch):
    """dpsolve.cg(A, b) as most users write it: from its second call on, the lane, exactly
    where the automatic choice is persistent CG in a format the lane reads (else never)."""
    spy = Spy(monkeypatch)
    A, dA, b = _system(A)
    _, _, rep = dpsolve.cg(dA, b, full_output=True)
    for _ in range(3):
        x, info = dpsolve.cg(dA, b)
        assert info == 0
    takes = rep.variant == "persistent" and rep.format in _fast.LANE_FORMATS
    assert spy.answered == (2 if takes else 0)


def test_a_lane_that_cannot_be_made_costs_a_warning_not_the_result(monkeypatch):
    monkeypatch.setattr(_fast, "LANES", True)

    def broken(*a, **k):
        raise RuntimeError("no kernel here")
    monkeypatch.setattr(_fast.Lane, "__init__", broken)
    A, dA, b = _system(laplace_2d(20))
    with pytest.warns(DpsolveWarning, match="lane could not be set up.*no kernel here"):
        x, info = cg(dA, b, rtol=1e-10)
    assert info == 0 and not _fast.LANES and not _fast._lanes
    assert np.linalg.norm(b.get() - A @ x.get()) <= 1e-10 * np.linalg.norm(b.get()) * (1 + 1e-6)
    x, info = cg(dA, b, rtol=1e-10)                              # the general path, quietly
    assert info == 0


def test_a_matrix_used_once_makes_no_lane(monkeypatch):
    """ADOPT_AFTER = 2: a matrix's first call only counts it, its second makes the lane, its
    third takes it; one-off matrices (a new object each call) never make one."""
    monkeypatch.setattr(_fast, "ADOPT_AFTER", 2)
    spy = Spy(monkeypatch)
    A, dA, b = _system(laplace_2d(24))
    others = [csp_matrix_like(dA) for _ in range(3)]            # new objects, the same arrays
    for other in others:
        cg(other, b)
    assert not _fast._lanes and spy.answered == 0
    cg(dA, b)
    assert not _fast._lanes
    cg(dA, b)
    assert len(_fast._lanes) == 1 and spy.answered == 0
    x, info = cg(dA, b, rtol=1e-10)
    assert spy.answered == 1 and info == 0


def csp_matrix_like(dA):
    import cupyx.scipy.sparse as csp
    return csp.csr_matrix((dA.data, dA.indices, dA.indptr), shape=dA.shape)
