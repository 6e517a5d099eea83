#!/usr/bin/env python3
"""The float16 copy's scales and diagonal test from the cast's maxima, A/B in one process
(issue 30, session 75; H200 2026-12-03).

    PYTHONPATH=. python3 benchmarks/lowered-waits-ab-2026-12-03.py 2:1024 3:100 3:160

A ("waits"): device._halve as before this change: a max_abs of each cast matrix and a host
wait, then a count of the rows whose diagonal is below float16's normal range and a second
wait (`halve_waits`, the old function, which ignores the maxima it is given).
B ("maxima"): as committed: the scales and the test from the largest magnitudes that lowered
already reads in its one wait (rounding to the nearest is monotone), no wait of its own.
Every level's cycled (float16-rounded) A, P, R, RS and their powers of two are compared bit
for bit; prepare and update alternated (amg_setup_ab.run_ab). Prints a line a problem, then a
CSV block.

As run on the H200 the comparison also took the SELL copies' values and printed "the same:
False". A look per array (the .txt beside this script) found every matrix and power of two
equal, and the SELL values differing between two set-ups under one same setting too: the
slots of a last slice's rows past n, which sell_fill leaves unset and no kernel reads. The
SELL copies are left out of the comparison since."""
import cupy
from amg_setup_ab import prepare, run_ab

from dpsolve.cuda import ops
from dpsolve.precond.amg import device, reference

NEW = device._halve


def halve_waits(low, precision, maxima=None):
    mats = reference.half_matrices(low)
    tops = cupy.zeros(len(mats), cupy.uint64)
    for k, (_, _, M) in enumerate(mats):
        ops.max_abs(M.data, out=tops[k:k + 1])
    scales = [reference.half_scale(float(t)) for t in tops.view(cupy.float64).get()]
    if not reference.half_scales_fit(scales):
        text = reference.half_scale_refused(precision)
        if text:
            raise ValueError(text)
        return
    small = cupy.zeros(1, cupy.int32)
    for (index, which, _), scale in zip(mats, scales):
        if which == "A":
            ops.count_true(reference.half_small_rows(low.levels[index].inv_diag, scale),
                           out=small)
    out = int(small.get()[0])
    text = reference.half_refused(precision, out)
    if text:
        raise ValueError(text)
    if out:
        return

    def rounded(M, scale, canonical=None):
        return device._csr(device.half_round(M.data, scale), M.indices, M.indptr, M.shape,
                           canonical=canonical)
    for (index, which, M), scale in zip(mats, scales):
        lev = low.levels[index]
        if which == "A":
            lev.A = rounded(M, scale, canonical=True)
            lev.half = (scale, None)
        else:
            lev.P, lev.R = rounded(M, scale), rounded(lev.R, scale)
            lev.half = (lev.half[0], scale)
    low.half = True


def switch(key):
    device._halve = NEW if key == "maxima" else halve_waits


def cycled(A):
    """Every level's cycled A, P, R, RS values and indices, and its powers of two (host)."""
    import numpy as np
    low = prepare(A).precond.hierarchy.low
    out = [np.array([low.half], np.float64)]
    for lev in low.levels:
        for M in (lev.A, lev.P, lev.R, lev.RS):
            if M is not None:
                out += [M.data.get(), M.indices.get()]
        out.append(np.array([s or 0.0 for s in (lev.half or (None, None))], np.float64))
    return out


if __name__ == "__main__":
    run_ab(("waits", "maxima"), switch, result=cycled, resetup=True)
