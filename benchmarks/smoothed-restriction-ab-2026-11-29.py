# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 26). H200 2026-11-29:
# `python3 <this> 2:1024,3:100,3:160 auto,full` (the setup script: 2:1024,3:160).
"""The smoothed restriction (device.FUSE_RESTRICTION True / False): V-cycle (graph of 20), its
floor, prepared graph solve, iterations, set-up; interleaved, one process."""
import gc, statistics, sys, time
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
import dpsolve.precond.amg.device as dev
from dpsolve.precond import AMG
from dpsolve.matrices import laplace_2d, laplace_3d
sync = cupy.cuda.Device().synchronize

def copy_bw():
    a = cupy.empty(1 << 28, cupy.float32); b = cupy.empty_like(a)
    ts = []
    for _ in range(5):
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event(); e0.record(); b[...] = a; e1.record(); e1.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(e0, e1) / 1e3)
    return 2 * a.nbytes / min(ts)

def vtime(P, reps=7, k=20):
    h = P.precond.hierarchy
    b = cupy.ones(h.levels[0].n); z = cupy.empty_like(b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        h.vcycle(b, z, s)
        s.begin_capture()
        for _ in range(k):
            h.vcycle(b, z, s)
        g = s.end_capture()
        g.launch(s); s.synchronize()
        ts = []
        for _ in range(reps):
            e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
            e0.record(s); g.launch(s); e1.record(s); e1.synchronize()
            ts.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / k)
    return statistics.median(ts)

bw = copy_bw()
print(f"copy {bw/1e12:.2f} TB/s", flush=True)
probs = sys.argv[1].split(",") if len(sys.argv) > 1 else ["2:1024", "3:100", "3:160"]
precs = sys.argv[2].split(",") if len(sys.argv) > 2 else ["auto"]
for pr in probs:
    d, k = pr.split(":"); k = int(k)
    A = laplace_2d(k) if d == "2" else laplace_3d(k)
    name = f"{d}-D {k}^{d}"
    dA = csp.csr_matrix(A); b = dA @ cupy.ones(A.shape[0])
    for prec in precs:
        Ps, info = {}, {}
        for fuse in (True, False):
            dev.FUSE_RESTRICTION = fuse
            make = lambda: dpsolve.prepare(dA, "cg", M=AMG(precision=prec), variant="graph")
            P = make(); sync(); st = []
            for _ in range(2):
                P = None; gc.collect(); sync(); t0 = time.perf_counter(); P = make(); sync(); st.append((time.perf_counter() - t0) * 1e3)
            x, inf, rep = P.solve(b, rtol=1e-8, full_output=True)
            err = float(cupy.abs(x - 1).max())
            Ps[fuse] = P
            info[fuse] = (rep.iterations, min(st), P.precond.vcycle_bytes / bw * 1e6, err)
            vtime(P, reps=1)
        vc = {f: [] for f in Ps}; so = {f: [] for f in Ps}
        for rnd in range(4):
            for f in ((True, False) if rnd % 2 == 0 else (False, True)):
                dev.FUSE_RESTRICTION = f
                vc[f].append(vtime(Ps[f]))
                for _ in range(5):
                    sync(); t0 = time.perf_counter(); Ps[f].solve(b, rtol=1e-8); sync()
                    so[f].append((time.perf_counter() - t0) * 1e3)
        dev.FUSE_RESTRICTION = True
        for f in (True, False):
            its, st, floor, err = info[f]
            v = statistics.median(vc[f])
            print(f"RS {name} {prec} fuse={f!s:5s} its {its} vcycle {v:7.1f} us floor {floor:6.1f} ({v/floor:.2f}x) solve {statistics.median(so[f]):.3f} ms setup {st:.1f} ms max|x-1| {err:.1e} {[round(t,1) for t in vc[f]]}", flush=True)
        del Ps; gc.collect()
