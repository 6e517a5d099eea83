"""The AMG set-up A/B scripts' timing (benchmarks/mis-*-ab-2026-12-02.py): prepare(A, "cg",
M="amg", variant="graph") between two device synchronisations, alternated between two settings
in rounds AB, BA, AB, ... in one process."""
import time

import cupy

import dpsolve


def ab_prepares(A, switch, keys, rounds=6, calls=5, figure=None):
    """prepare ms of each of the two ``keys``, ``rounds`` rounds (AB, then BA, ...) of ``calls``
    calls each; ``switch(key)`` sets a key's setting before its calls; ``figure(P)``: a number
    taken of each call's prepared system. Returns ({key: [ms]}, {key: [figure]})."""
    dev = cupy.cuda.Device()
    ms = {k: [] for k in keys}
    figures = {k: [] for k in keys}
    for rnd in range(rounds):
        for key in (keys if rnd % 2 == 0 else keys[::-1]):
            switch(key)
            for _ in range(calls):
                dev.synchronize()
                t0 = time.perf_counter()
                P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
                dev.synchronize()
                ms[key].append((time.perf_counter() - t0) * 1e3)
                if figure is not None:
                    figures[key].append(figure(P))
                P = None
    return ms, figures
