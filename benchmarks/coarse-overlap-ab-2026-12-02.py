#!/usr/bin/env python3
"""A/B in one process (issue 30's re-set-up <= 0.5 of a set-up; session 68, H200 2026-12-02):
the AMG set-up's coarse inverse made on the set-up's stream and waited for at once
(device.COARSE_OVERLAP False, "on-stream") against made on a side stream while the host goes on
with ``lowered`` and ``_prepare_cycle``, read at the end (True, "side-stream").

    PYTHONPATH=. python3 benchmarks/coarse-overlap-ab-2026-12-02.py 2:1024 3:100 3:160

First whether both give the same coarse inverse and its float32 copy, bit for bit; then
prepare(A, "cg", M="amg", variant="graph") in 6 rounds AB / BA of 5 calls, and P.update
(2 A, then A) in 6 rounds of 4 calls (amg_setup_ab.run_ab)."""
from amg_setup_ab import prepare, run_ab

from dpsolve.precond.amg import device


def switch(key):
    device.COARSE_OVERLAP = key == "side-stream"


def coarse(A):
    h = prepare(A).precond.hierarchy
    return [h.coarse_inv.get()] + ([] if h.low is None else [h.low.coarse_inv.get()])


if __name__ == "__main__":
    run_ab(("on-stream", "side-stream"), switch, result=coarse, resetup=True)
