"""FOLD_PROLONGATION on / off: the same operator to rounding, V-cycle us (graph-captured, ABAB),
prepared solve ms and iterations, the floor (report's vcycle_bytes / copy bandwidth).
Runs on a tree with vcycle-fold-prolongation-2026-12-01.patch applied (not kept in dpsolve)."""
import sys
import statistics
import time
sys.path.insert(0, "benchmarks")
import numpy as np
import cupy
import dpsolve
from dpsolve.precond.amg import device
import vcycle_ab

spec = sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:100,3:160"
rows = []
for item, A, b in vcycle_ab.systems(spec):
    Ps = {}
    for fold in (False, True):
        device.FOLD_PROLONGATION = fold
        t = time.perf_counter()
        Ps[fold] = dpsolve.prepare(A, "cg", M="amg", variant="graph")
        cupy.cuda.Device().synchronize()
        print(item, "fold" if fold else "apart", "prepare",
              round((time.perf_counter() - t) * 1e3, 1), "ms", flush=True)
    device.FOLD_PROLONGATION = True
    h = Ps[True].precond.hierarchy
    hl = h.low or h
    print("  levels", [(lev.n, lev.sell_U is not None, lev.RS is not None)
                       for lev in hl.levels[:-1]], flush=True)
    r = cupy.random.default_rng(3).random(A.shape[0])
    zs = {}
    for fold, P in Ps.items():
        st = P._state
        with st.stream:
            z = cupy.full(A.shape[0], np.nan)
            st.pc.apply(st.ex, r, z)
            st.stream.synchronize()
            zs[fold] = z
    rel = float(cupy.linalg.norm(zs[True] - zs[False]) / cupy.linalg.norm(zs[False]))
    # symmetry <M x, y> vs <x, M y>
    y = cupy.random.default_rng(4).random(A.shape[0])
    P = Ps[True]
    st = P._state
    with st.stream:
        My = cupy.full(A.shape[0], np.nan)
        st.pc.apply(st.ex, y, My)
        st.stream.synchronize()
    sym = float(abs(cupy.dot(zs[True], y) - cupy.dot(r, My)) / abs(cupy.dot(zs[True], y)))
    print(f"  |z_fold - z_apart| / |z| = {rel:.2e}; symmetry {sym:.2e}", flush=True)
    us = {False: [], True: []}
    ms = {False: [], True: []}
    its = {}
    for k in range(6):
        for fold in ((False, True) if k % 2 == 0 else (True, False)):
            us[fold].append(vcycle_ab.vcycle_us(Ps[fold]))
            t, it = vcycle_ab.solve_ms(Ps[fold], b)
            ms[fold].append(t)
            its[fold] = it
    for fold in (False, True):
        P = Ps[fold]
        rep = P.solve(b, rtol=1e-8, full_output=True)[2]
        vb = P.precond.vcycle_bytes if hasattr(P.precond, "vcycle_bytes") else None
        print(f"  {'fold ' if fold else 'apart'} vcycle {statistics.median(us[fold]):7.1f} us "
              f"[{min(us[fold]):.1f}-{max(us[fold]):.1f}]  "
              f"solve {statistics.median(ms[fold]):7.2f} ms "
              f"it {its[fold]}  vcycle_bytes {vb}", flush=True)
