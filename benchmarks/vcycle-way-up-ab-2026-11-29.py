# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 27), on the tree of vcycle-way-up-one-product-2026-11-29.patch
# (device.FUSE_UP). H200 2026-11-29: `python3 <this> 2:1024,3:100,3:160`.
# FUSE_UP on/off interleaved in one process: V-cycle (graph of 20), floor, prepared solve, its, set-up, re-set-up
import gc, statistics, sys, time
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
import dpsolve.precond.amg.device as dev
from dpsolve.matrices import laplace_2d, laplace_3d
def vtime(P, reps=9, k=20):
    h = P.precond.hierarchy
    b = cupy.ones(h.levels[0].n); z = cupy.empty_like(b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        h.vcycle(b, z, s); s.begin_capture()
        for _ in range(k): h.vcycle(b, z, s)
        g = s.end_capture(); g.launch(s); s.synchronize(); ts = []
        for _ in range(reps):
            e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
            e0.record(s); g.launch(s); e1.record(s); e1.synchronize()
            ts.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / k)
    return statistics.median(ts), z
def copy_bw():
    a = cupy.empty(1 << 28, cupy.float32); b = cupy.empty_like(a); ts = []
    for _ in range(5):
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event(); e0.record(); b[...] = a; e1.record(); e1.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(e0, e1) / 1e3)
    return 2 * a.nbytes / min(ts)
sync = cupy.cuda.Device().synchronize
bw = copy_bw()
flags = [x == "1" for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [True, False, True, False]
for pr in sys.argv[1].split(","):
    d, k = pr.split(":"); k = int(k)
    A = laplace_2d(k) if d == "2" else laplace_3d(k)
    dA = csp.csr_matrix(A); b = dA @ cupy.ones(A.shape[0]); A2 = dA * 2.0
    for up in flags:
        dev.FUSE_UP = up
        P = dpsolve.prepare(dA, "cg", M="amg", variant="graph"); P = None; gc.collect()
        st = []
        for _ in range(3):
            P = None; gc.collect(); sync(); t0 = time.perf_counter()
            P = dpsolve.prepare(dA, "cg", M="amg", variant="graph"); sync(); st.append((time.perf_counter() - t0) * 1e3)
        ut = []
        for _ in range(2):
            for M in (A2, dA):
                gc.collect(); sync(); t0 = time.perf_counter(); P.update(M); sync(); ut.append((time.perf_counter() - t0) * 1e3)
        t, z = vtime(P)
        x, info, rep = P.solve(b, rtol=1e-8, full_output=True); sync()
        ss = []
        for _ in range(7):
            sync(); t0 = time.perf_counter(); P.solve(b, rtol=1e-8); sync(); ss.append((time.perf_counter() - t0) * 1e3)
        h = P.precond.hierarchy; lo = h.low or h
        fl = P.precond.vcycle_bytes / bw * 1e6
        forms = [(lo.up_form(i) if l.up else ("rs" if l.RS is not None else "-")) for i, l in enumerate(lo.levels[:-1])]
        print(f"AB {pr} up={int(up)} vcycle {t:.1f} us floor {fl:.1f} ratio {t/fl:.3f} solve {statistics.median(ss):.2f} ms its {rep.iterations} info {info} err {float(cupy.abs(x-1).max()):.1e} setup {statistics.median(st):.1f} update {statistics.median(ut):.1f} ({statistics.median(ut)/statistics.median(st):.3f}) forms {forms}", flush=True)
        P = None; gc.collect()
