"""BiCG and BiCGStab stop with info = -10 when a scalar turns non-finite, on every variant, where
the reference stops (dpsolve/reference/bicg.py, bicgstab.py) and with the reference's x.

The systems are tests/nonfinite_cases.py's (gross overflows and a 0/0, stable under summation
order). GPU tests are marked ``gpu`` (they skip without a device); the host-driven loop they share
(dpsolve/backends/_gpu.py, host_loop) is also tested here on the CPU with scripted steps.
"""
from __future__ import annotations

import math

import pytest

from dpsolve.backends._gpu import CONVERGED_MID_STEP, OK, host_cg_loop, host_loop


# ------------------------------------------------------------------------------- host_loop (CPU)
def _scripted(outcomes, tau0=1.0):
    """start() and step() of a host-driven variant replaying (tau, status) pairs."""
    it = iter(outcomes)
    return (lambda: next(it)), (lambda: (tau0, OK))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_host_loop_stops_on_a_nonfinite_tau_after_the_callback(bad):
    """Every method (not only CG, as before): a non-finite tau after step j is -10 at j + 1, after
    that iteration's callback, as the reference solvers return it."""
    calls = []
    step, start = _scripted([(0.5, OK), (0.25, OK), (bad, OK), (0.1, OK)])
    info, its = host_loop(step, start, 1e-3, 10, lambda x: calls.append(x), "x")
    assert (info, its) == (-10, 3) and len(calls) == 3
    # also on the last iteration allowed: -10, not maxiter
    step, start = _scripted([(0.5, OK), (bad, OK)])
    assert host_loop(step, start, 1e-3, 2, None, "x") == (-10, 2)
    step, start = _scripted([(0.5, OK), (bad, 0)])
    assert host_cg_loop(step, start, 1e-3, 5, None, "x") == (-10, 2)


def test_host_loop_codes_from_the_step_come_first():
    """A step's own -10 / -11 (x untouched by that step) is reported at j, before its tau is
    looked at; BiCGStab's mid-step exit is convergence at j + 1."""
    for status in (-10, -11):
        step, start = _scripted([(0.5, OK), (math.nan, status)])
        assert host_loop(step, start, 1e-3, 10, None, "x") == (status, 1)
    step, start = _scripted([(0.5, OK), (math.nan, CONVERGED_MID_STEP)])
    assert host_loop(step, start, 1e-3, 10, None, "x") == (0, 2)
    step, start = _scripted([(0.5, OK), (math.nan, 1)])              # CG's non-finite alpha
    assert host_cg_loop(step, start, 1e-3, 10, None, "x") == (-10, 1)
    step, start = _scripted([(0.5, OK), (1e-4, OK)])
    assert host_loop(step, start, 1e-3, 10, None, "x") == (0, 2)
