"""The AMG set-up A/B scripts' helpers (benchmarks/mis-*-ab-2026-12-02.py): a call timed between
two device synchronisations, alternated between two settings in rounds AB, BA, AB, ... in one
process; a hierarchy's aggregates, and whether two settings gave the same."""
import statistics
import time

import cupy
import numpy as np

import dpsolve


def prepare(A):
    """The prepared system the A/B scripts time: prepare(A, "cg", M="amg", variant="graph")."""
    return dpsolve.prepare(A, "cg", M="amg", variant="graph")


def ab_times(call, switch, keys, rounds=6, calls=5, figure=None):
    """ms of ``call()`` under each of the two ``keys``, ``rounds`` rounds (AB, then BA, ...) of
    ``calls`` calls each; ``switch(key)`` sets a key's setting before its calls; ``figure(out)``:
    a number taken of each call's result. Returns ({key: [ms]}, {key: [figure]})."""
    dev = cupy.cuda.Device()
    ms = {k: [] for k in keys}
    figures = {k: [] for k in keys}
    for rnd in range(rounds):
        for key in (keys if rnd % 2 == 0 else keys[::-1]):
            switch(key)
            for _ in range(calls):
                dev.synchronize()
                t0 = time.perf_counter()
                out = call()
                dev.synchronize()
                ms[key].append((time.perf_counter() - t0) * 1e3)
                if figure is not None:
                    figures[key].append(figure(out))
                out = None
    return ms, figures


def ab_prepares(A, switch, keys, rounds=6, calls=5, figure=None):
    """``ab_times`` of ``prepare(A)``; ``figure(P)`` taken of each prepared system."""
    return ab_times(lambda: prepare(A), switch, keys, rounds, calls, figure)


def aggregates(A):
    """Every level's aggregates (host arrays) of a fresh ``prepare(A)``."""
    return [lev.aggregates.get() for lev in prepare(A).precond.hierarchy.levels
            if lev.aggregates is not None]


def same(a, b) -> bool:
    """Whether two ``aggregates`` lists are equal, level by level."""
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def spread(v) -> str:
    """'median [min-max]' of a list of ms."""
    return f"{statistics.median(v):.2f} [{min(v):.1f}-{max(v):.1f}]"
