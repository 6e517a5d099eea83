# ruff: noqa
"""Issue 30: AMG set-up and update() (same pattern, numeric re-set-up; median of 7, alternately
2A and A) at 3-D 100^3 and 2-D 1024^2, for the four combinations of reference.ROOT_ORDER and
device.NARROW_INDICES, two rounds in one process.
Usage: python3 benchmarks/resetup-root-order-narrow-2026-11-29.py"""
import sys, time, statistics, cupy, cupyx.scipy.sparse as csp, dpsolve
from dpsolve.matrices import laplace_3d, laplace_2d
from dpsolve.precond.amg import device, reference
sync = cupy.cuda.Device().synchronize
for spec in ("3:100", "2:1024"):
    d, s = spec.split(":")
    A = csp.csr_matrix(laplace_3d(int(s)) if d == "3" else laplace_2d(int(s))); A2 = A * 2.0
    cfgs = {"now": (True, True), "int32": (True, False), "passes": (False, True), "passes-int32": (False, False)}
    for rnd in range(2):
        for name, (ro, nw) in cfgs.items():
            reference.ROOT_ORDER, device.NARROW_INDICES = ro, nw
            sync(); t0 = time.perf_counter(); P = dpsolve.prepare(A, "cg", M="amg", variant="graph"); sync(); st = time.perf_counter() - t0
            ts = []
            for k in range(7):
                sync(); t0 = time.perf_counter(); P.update(A2 if k % 2 == 0 else A); sync(); ts.append(time.perf_counter() - t0)
            print(f"UPD {spec} {name} {rnd} setup {st*1e3:.1f} update med {statistics.median(ts)*1e3:.1f} min {min(ts)*1e3:.1f} resetup {P.precond.hierarchy.resetup}", flush=True)
            P = None
reference.ROOT_ORDER, device.NARROW_INDICES = True, True
