"""The AMG set-up A/B scripts' helpers (benchmarks/*-ab-2026-12-0*.py): a call timed between
two device synchronisations, alternated between two settings in rounds AB, BA, AB, ... in one
process; a hierarchy's aggregates or its matrices, and whether two settings gave the same; the
scripts' main loop over problems (``run_ab``, each named as ``problem`` reads it); a memory
hook counting the pool's trips to cudaMalloc (``MallocCount``)."""
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
import numpy as np
from cupy.cuda import memory_hook

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d


class MallocCount(memory_hook.MemoryHook):
    """``with MallocCount() as h:`` counts in ``h.n`` the allocations that CuPy's pool passes to
    the driver (alloc_preprocess: it had no free block to give)."""
    name = "malloc_count"

    def __init__(self):
        self.n = 0

    def alloc_preprocess(self, device_id, mem_size):
        self.n += 1


def problem(spec):
    """The cupyx CSR matrix of a command line's problem: "2:1024" 2-D Poisson 1024^2, "3:100"
    3-D Laplace 100^3."""
    d, s = spec.split(":")
    return csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))


def prepare(A):
    """The prepared system the A/B scripts time: prepare(A, "cg", M="amg", variant="graph")."""
    return dpsolve.prepare(A, "cg", M="amg", variant="graph")


def prepared(A):
    """``prepare(A)``, then a device synchronisation (the set-up scripts' timed call)."""
    P = prepare(A)
    cupy.cuda.Device().synchronize()
    return P


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


def hierarchy(A):
    """Every level's A, P, R and RS of a fresh ``prepare(A)``, as host arrays (values, indices,
    row pointers)."""
    out = []
    for lev in prepare(A).precond.hierarchy.levels:
        for M in (lev.A, lev.P, lev.R, lev.RS):
            if M is not None:
                out += [M.data.get(), M.indices.get(), M.indptr.get()]
    return out


def same(a, b) -> bool:
    """Whether two lists of host arrays (``aggregates``' or the like) are equal bit for bit."""
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape
        and np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                           np.ascontiguousarray(y).view(np.uint8)) for x, y in zip(a, b))


def spread(v) -> str:
    """'median [min-max]' of a list of ms."""
    return f"{statistics.median(v):.2f} [{min(v):.1f}-{max(v):.1f}]"


def ab_updates(A, switch, keys, rounds=6, calls=4):
    """``ab_times`` of the re-set-up: ``P.update`` of one prepared system, alternately with 2 A
    and A (the same pattern: bench-amg's re-set-up)."""
    P = prepare(A)
    both = [A * 2.0, A]

    def update():
        both.reverse()
        P.update(both[0])
    return ab_times(update, switch, keys, rounds, calls)[0]


def run_ab(keys, switch, result=aggregates, note=None, resetup=False):
    """The A/B scripts' main. For each problem of the command line ("2:1024": 2-D Poisson 1024^2,
    "3:100": 3-D Laplace 100^3; default 2:1024 3:100 3:160): whether the two settings ``keys``
    give the same hierarchy (``result(A)``, a list of host arrays, under each, compared by
    ``same``), then ``ab_prepares`` in 6 rounds of 5 calls (``resetup``: and ``ab_updates``, the
    re-set-up over the set-up under each setting). Prints a line a problem (``note()``
    appended), then a CSV block; leaves the second setting on."""
    rows = []
    for spec in sys.argv[1:] or ["2:1024", "3:100", "3:160"]:
        A = problem(spec)
        got = []
        for key in keys:
            switch(key)
            got.append(result(A))
        ok = same(*got)
        ms, _ = ab_prepares(A, switch, keys, rounds=6, calls=5)
        a, b = (float(np.median(ms[k])) for k in keys)
        line = (f"{spec}: prepare {keys[0]} {spread(ms[keys[0]])} ms, {keys[1]} "
                f"{spread(ms[keys[1]])} ms, B/A {b / a:.3f}")
        extra = ()
        if resetup:
            up = ab_updates(A, switch, keys)
            ua, ub = (float(np.median(up[k])) for k in keys)
            line += (f"; update {keys[0]} {spread(up[keys[0]])} ms, {keys[1]} "
                     f"{spread(up[keys[1]])} ms, B/A {ub / ua:.3f}; re-set-up / set-up "
                     f"{ua / a:.3f} -> {ub / b:.3f}")
            extra = (ua, ub, ua / a, ub / b)
        print(line + f"; the same: {ok}" + (f"; {note()}" if note else ""), flush=True)
        rows.append((spec, a, min(ms[keys[0]]), b, min(ms[keys[1]]), b / a, ok, *extra))
    switch(keys[1])
    a, b = (k.replace("-", "_") for k in keys)
    head = f"problem,{a}_median_ms,{a}_min_ms,{b}_median_ms,{b}_min_ms,ratio,same"
    if resetup:
        head += f",{a}_update_ms,{b}_update_ms,{a}_resetup_ratio,{b}_resetup_ratio"
    print(head)
    for r in rows:
        print(f"{r[0]},{r[1]:.2f},{r[2]:.2f},{r[3]:.2f},{r[4]:.2f},{r[5]:.3f},{r[6]}"
              + "".join(f",{v:.3f}" if v < 10 else f",{v:.2f}" for v in r[7:]))
