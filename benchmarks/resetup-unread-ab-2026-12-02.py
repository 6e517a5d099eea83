#!/usr/bin/env python3
"""A/B in one process (issue 30's re-set-up <= 0.5 of a set-up; session 68, H200 2026-12-02):
the numeric re-set-up a level at a time, each level waiting for its diagonal's check, its rho and
its two products' pattern checks (device.RESETUP_UNREAD False, "level-by-level"), against every
level launched with no host wait until one read at the end, rho left on the device for the
prolongator's smoothing (True, "read-once").

    PYTHONPATH=. python3 benchmarks/resetup-unread-ab-2026-12-02.py 2:1024 3:100 3:160

First whether both re-set-ups give the same hierarchy (every level's A, D^-1, P and R values, the
rho values and the coarse inverse), bit for bit; then prepare(A, "cg", M="amg",
variant="graph") in 6 rounds AB / BA of 5 calls (the set-up does not change: a control), and
P.update (2 A, then A) in 6 rounds of 4 calls (amg_setup_ab.run_ab)."""
import numpy as np
from amg_setup_ab import prepare, run_ab

from dpsolve.precond.amg import device


def switch(key):
    device.RESETUP_UNREAD = key == "read-once"


def resetup(A):
    P = prepare(A)
    P.update(A * 2.0)
    h = P.precond.hierarchy
    assert h.resetup == "numeric"
    out = [h.coarse_inv.get(), np.array([lev.rho for lev in h.levels])]
    for lev in h.levels:
        out += [lev.A.data.get(), lev.inv_diag.get()]
        out += [] if lev.P is None else [lev.P.data.get(), lev.R.data.get()]
    return out


if __name__ == "__main__":
    run_ab(("level-by-level", "read-once"), switch, result=resetup, resetup=True)
