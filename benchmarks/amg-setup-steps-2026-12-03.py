#!/usr/bin/env python3
"""The AMG set-up's steps timed one by one, each between two device synchronisations (session 72,
H200 2026-12-03): where a 3-D 160^3 set-up's 75 ms go, the GPU's share included.

    PYTHONPATH=. python3 benchmarks/amg-setup-steps-2026-12-03.py 3:160 3:100 2:1024
    PYTHONPATH=. python3 benchmarks/amg-setup-steps-2026-12-03.py update 3:160 3:100

With `update` first (session 74, 2026-12-03): the re-set-up's steps instead, P.update(M) of one
prepared system with M alternately 2 A and A, the steps inside _numeric_levels listed (it is not
wrapped; the products over kept patterns, spgemm_pattern, and the prolongator's smoothing,
_smooth_in_place, are).

For each problem: two untimed prepares, then 3 prepares(A, "cg", M="amg", variant="graph") with
dpsolve.precond.amg.device's steps wrapped (a synchronisation before and after each outermost
wrapped call, so a step's time is its host calls and its GPU work, with no overlap; a product
inside another step is synchronised too, listed, and counted in that step's time), then 3
plain ones. Prints the plain median, the wrapped median, each step's time a prepare (median over
the 3) and, for every product (spgemm_counted), its shape, nonzeros and time (the last prepare)."""
import functools
import gc
import statistics
import sys
import time

import cupy

from amg_setup_ab import prepared, problem
from dpsolve.precond.amg import device

STEPS = ("strength_graph", "aggregate", "tentative", "smooth_prolongator", "transpose",
         "spgemm_counted", "_canonical", "spectral_radius", "_check_level", "lowered",
         "_prepare_cycle", "CoarseInverse", "_numeric_levels")
times: dict = {}
products: list = []
depth = [0]


def wrap(name, fn):
    @functools.wraps(fn)
    def inner(*args, **kw):
        if depth[0] and name != "spgemm_counted":
            return fn(*args, **kw)
        nested = depth[0] > 0             # a product inside a step: listed, its time the step's
        dev = cupy.cuda.Device()
        dev.synchronize()
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kw)
            dev.synchronize()
        finally:
            depth[0] -= 1
        ms = (time.perf_counter() - t0) * 1e3
        if not nested:
            times[name] = times.get(name, 0.0) + ms
        if name == "spgemm_counted":
            A, B = args[0], args[1]
            C = out[0]
            products.append((A.shape, B.shape[1], A.nnz, B.nnz, C.nnz, ms))
        return out
    return inner


def timed(A, held, both=None):
    """ms of a prepare (both None) or of an update with the other of ``both``."""
    if both is None:
        held[0] = None
        gc.collect()
    t0 = time.perf_counter()
    if both is None:
        held[0] = prepared(A)
    else:
        both.reverse()
        held[0].update(both[0])
        cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t0) * 1e3


def main():
    args = sys.argv[1:]
    update = bool(args) and args[0] == "update"
    steps = (STEPS if not update else
             tuple(n for n in STEPS if n != "_numeric_levels") + ("spgemm_pattern",
                                                                  "_smooth_in_place"))
    originals = {name: getattr(device, name) for name in steps}
    for spec in args[update:] or ["3:160", "3:100", "2:1024"]:
        A = problem(spec)
        held = [None]
        both = [A * 2.0, A] if update else None
        for _ in range(2):
            held[0] = prepared(A)
        for name in steps:
            setattr(device, name, wrap(name, originals[name]))
        per, wrapped = [], []
        try:
            for _ in range(3):
                times.clear()
                products.clear()
                wrapped.append(timed(A, held, both))
                per.append(dict(times))
        finally:
            for name in steps:
                setattr(device, name, originals[name])
        plain = [timed(A, held, both) for _ in range(3)]
        print(f"== {spec}: {'update' if update else 'prepare'} {statistics.median(plain):.1f} "
              f"ms plain, "
              f"{statistics.median(wrapped):.1f} with each step synchronised", flush=True)
        for name in sorted(per[-1], key=lambda k: -per[-1][k]):
            vals = [p.get(name, 0.0) for p in per]
            print(f"   {name:20s} {statistics.median(vals):7.2f} ms")
        print(f"   (steps {statistics.median([sum(p.values()) for p in per]):.1f} ms of "
              f"{statistics.median(wrapped):.1f})")
        for shape, ncols, annz, bnnz, cnnz, ms in products:
            print(f"   product {shape[0]:>9,} x {shape[1]:>9,} . {ncols:>9,} cols: nnz A "
                  f"{annz:>11,} B {bnnz:>11,} C {cnnz:>11,}  {ms:6.2f} ms")


if __name__ == "__main__":
    main()
