#!/usr/bin/env python3
"""The set-up's split read at its first look instead of at the set-up's end, A/B in one
process (issue 30, session 75; H200 2026-12-03).

    PYTHONPATH=. python3 benchmarks/setup-times-lazy-ab-2026-12-03.py 2:1024 3:100 3:160

A ("eager"): device._Phases.times as before this change: a wait for the set-up's last event,
then the events read (`eager`), so that a re-set-up (which times no V-cycle) began its graph's
capture only once its kernels had run. B ("lazy"): as committed, a SetupTimes read at its
first look. The hierarchies are compared bit for bit; prepare and update alternated
(amg_setup_ab.run_ab). Prints a line a problem, then a CSV block."""
from amg_setup_ab import hierarchy, run_ab

from dpsolve.precond.amg import device

LAZY = device._Phases.times


def eager(self, names):
    return dict(LAZY(self, names))          # read now: the old wait at the set-up's end


def switch(key):
    device._Phases.times = LAZY if key == "lazy" else eager


if __name__ == "__main__":
    run_ab(("eager", "lazy"), switch, result=hierarchy, resetup=True)
