"""The prepared call's fast path (dpsolve/_fast.py) on the host: its decisions from the kernel's
result area are ``_frontend.restarted``'s after one run, and it hands over to the general path
exactly where that path would do more (scaling, a restart)."""
from __future__ import annotations

import numpy as np
import pytest

from dpsolve import _fast
from dpsolve._frontend import restarted

F8 = np.float64


@pytest.mark.parametrize("info,its,rnorm,tol,maxiter", [
    (0, 12, 1e-9, 1e-8, 100),       # converged, confirmed
    (1, 1, 0.5, 1e-8, 1),           # out of iterations
    (100, 100, 0.5, 1e-8, 100),
    (-10, 3, 0.5, 1e-8, 100),       # a breakdown keeps its code
    (-10, 3, 0.0, 0.0, 100),        # tol = 0: an exact zero residual is success ...
    (-10, 3, 0.5, 0.0, 100),        # ... anything else non-convergence
    (0, 100, 0.5, 1e-8, 100),       # converged by the recurrence, budget spent: maxiter
    (0, 0, 0.5, 1e-8, 100),         # exits at once, the true residual misses: maxiter
])
def test_decisions_are_restarteds_first_run(info, its, rnorm, tol, maxiter):
    expect = restarted(lambda budget: (info, its), lambda: rnorm, tol, maxiter)[0]
    res2 = rnorm ** 2 if rnorm else 1e-300 ** 2
    if rnorm == 0:                   # an exact zero square is outside the safe range
        assert _fast.decide(info, its, 1.0, 0.0, tol, maxiter, F8) is None
        return
    assert _fast.decide(info, its, 1.0, res2, tol, maxiter, F8) == expect


def test_a_restart_is_the_general_paths():
    """Converged by the recurrence, not by the true residual, iterations left: restarted would
    run again; the fast path hands over."""
    runs, norms = iter([(0, 5), (0, 1)]), iter([0.5, 1e-9])
    assert restarted(lambda budget: next(runs), lambda: next(norms), 1e-8, 100)[3] == 1
    assert _fast.decide(0, 5, 1.0, 0.25, 1e-8, 100, F8) is None


@pytest.mark.parametrize("bb", [np.nan, np.inf, 1e-320, 1e308])
def test_b_outside_the_safe_range_is_the_general_paths(bb):
    """NaN or Inf in b (the general path raises its error), or ||b||^2 that needs scaling."""
    assert _fast.decide(0, 5, bb, 1e-20, 1e-8, 100, F8) is None


@pytest.mark.parametrize("res2", [np.nan, np.inf, 0.0])
def test_a_residual_outside_the_safe_range_is_the_general_paths(res2):
    assert _fast.decide(0, 5, 1.0, res2, 1e-8, 100, F8) is None


@pytest.mark.parametrize("bnorm,general", [(1.0, False), (2.0 ** -54, False), (2.0 ** 107, False),
                                            (2.0 ** -55, True), (2.0 ** 108, True),
                                            (1e-35, True)])
def test_b_outside_the_preconditioners_window_is_the_general_paths(bnorm, general):
    """||b|| whose exponent (in [2^(e-1), 2^e)) lies outside a preconditioner's rhs_window
    (AMG's float32 cycle of 2-D Poisson: lo = -54 < e <= hi = 108): the general path scales b
    (``_frontend.fit_rhs``); inside it, or with no window, the fast path decides."""
    window = (-54, 108)
    code = _fast.decide(0, 5, bnorm ** 2, 1e-24 * bnorm ** 2, 1e-8 * bnorm, 100, F8, window)
    assert (code is None) == general
    assert _fast.decide(0, 5, bnorm ** 2, 1e-24 * bnorm ** 2, 1e-8 * bnorm, 100, F8) == 0


def test_b_zero_is_the_general_paths():
    """||b||^2 = 0: b = 0 or a b whose squares underflow; only the general path tells them apart
    (zeros for the one, a scaled solve for the other)."""
    assert _fast.decide(0, 0, 0.0, 0.0, 0.0, 100, F8) is None
    assert _fast.decide(0, 0, 0.0, 1e-300, 1e-8, 100, F8) is None


@pytest.mark.parametrize("v,ok", [(1e-8, True), (0, True), (3, True), (np.float32(1e-3), True),
                                  (-1.0, False), (np.nan, False), (True, False), ("1e-8", False),
                                  (None, False)])
def test_tolerances_it_takes(v, ok):
    """A plain real, non-negative number; anything else goes to the general path (its errors)."""
    assert _fast._real(v) is ok


def test_the_lane_takes_only_the_plain_cupy_cg_call(monkeypatch):
    """``lane_key`` (the default call's lane): a key for cg with a cupyx CSR and a CuPy vector
    and SciPy's arguments only; None for anything else, and without CuPy imported."""
    import sys
    import types

    class Ptr:
        def __init__(self, p):
            self.ptr = p

    class Arr:                                     # stands in for cupy.ndarray
        def __init__(self, p, size=10):
            self.data, self.size, self.dtype = Ptr(p), size, np.dtype(np.float64)

    class Csr:                                     # stands in for cupyx.scipy.sparse.csr_matrix
        def __init__(self):
            self.data, self.indices, self.indptr, self.shape = Arr(1), Arr(2), Arr(3, 5), (4, 4)

    A, b = Csr(), Arr(9, 4)
    kw = dict(method="cg", A=A, b=b, x0=None, M=None, callback=None, variant="auto",
              sync="polling", format="auto", full_output=False, energy=False, options=None)
    assert _fast.lane_key(**kw) is None or "cupy" in sys.modules     # no CuPy: no lane
    runtime = types.SimpleNamespace(getDevice=lambda: 0)
    cupy = types.SimpleNamespace(ndarray=Arr, cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupyx.scipy.sparse", types.SimpleNamespace(csr_matrix=Csr))
    key = _fast.lane_key(**kw)
    assert key == (id(A), 1, 2, 3, 10, (4, 4), "d", "auto", "auto", "polling", 0)
    assert _fast.lane_key(**{**kw, "sync": "blocking", "variant": "persistent",
                             "format": "csr-vector"}) is not None
    for change in ({"method": "bicgstab"}, {"x0": b}, {"M": "jacobi"}, {"callback": print},
                   {"full_output": True}, {"energy": True}, {"options": {"restart": 3}},
                   {"format": "ell"}, {"variant": "graph"}, {"sync": "spin"},
                   {"b": np.zeros(4)}, {"A": object()}):
        assert _fast.lane_key(**{**kw, **change}) is None, change
    assert _fast.lane_solve(key, A, b, 1e-5, 0.0, None) is None          # no lane yet


def test_clear_cache_lets_lanes_and_graphs_go(monkeypatch):
    """dpsolve.clear_cache(): the default call's lanes (their finalizers detached) and the graph
    variant's cached states, both emptied."""
    import types

    import dpsolve
    from dpsolve.backends import get_backend
    detached = []
    lane = types.SimpleNamespace(finalizer=types.SimpleNamespace(
        detach=lambda: detached.append(1)))
    monkeypatch.setattr(_fast, "_lanes", {("k",): lane})
    graph = get_backend("graph")
    monkeypatch.setattr(graph, "_cache", {"key": object()})
    dpsolve.clear_cache()
    assert _fast._lanes == {} and detached == [1] and graph._cache == {}
