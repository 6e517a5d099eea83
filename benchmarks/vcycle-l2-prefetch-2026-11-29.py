# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 26), with the patch beside it applied. H200
# 2026-11-29: `python3 <this>`. Not shipped: the prefetch was slower in 3-D.
"""L2 prefetch before griddepcontrol.wait in the V-cycle's kernels (DPS_VC_PREFETCH 1 / 0):
V-cycle (graph of 20 V-cycles) and prepared graph solve, interleaved A B B A, one process."""
import gc, statistics, sys, time
import cupy, cupyx.scipy.sparse as csp
import dpsolve
import dpsolve.precond.amg.device as dev
from dpsolve.matrices import laplace_2d, laplace_3d
sync = cupy.cuda.Device().synchronize
OFF = ("-DDPS_VC_PREFETCH=0",)
CONF = {"on": (), "off": OFF}

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

probs = sys.argv[1].split(",") if len(sys.argv) > 1 else ["2:1024", "3:100", "3:160"]
for pr in probs:
    d, k = pr.split(":"); k = int(k)
    A = laplace_2d(k) if d == "2" else laplace_3d(k)
    name = f"{d}-D {k}^{d}"
    dA = csp.csr_matrix(A); b = dA @ cupy.ones(A.shape[0])
    Ps, its, xs = {}, {}, {}
    for c, defs in CONF.items():
        dev.VC_DEFINES = defs
        Ps[c] = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
        x, info = Ps[c].solve(b, rtol=1e-8)
        rep = Ps[c].solve(b, rtol=1e-8, full_output=True)[-1]
        its[c] = rep.iterations; xs[c] = x
        vtime(Ps[c], reps=1)
    same = bool(cupy.array_equal(xs["on"], xs["off"]))
    vc = {c: [] for c in CONF}; so = {c: [] for c in CONF}
    for rnd in range(4):
        for c in (list(CONF) if rnd % 2 == 0 else list(CONF)[::-1]):
            dev.VC_DEFINES = CONF[c]
            vc[c].append(vtime(Ps[c]))
            for _ in range(5):
                sync(); t0 = time.perf_counter(); Ps[c].solve(b, rtol=1e-8); sync()
                so[c].append((time.perf_counter() - t0) * 1e3)
    dev.VC_DEFINES = ()
    for c in CONF:
        print(f"PREFETCH {name} {c:3s} its {its[c]} vcycle {statistics.median(vc[c]):7.2f} us {[round(v,1) for v in vc[c]]} solve {statistics.median(so[c]):.3f} ms same_x {same}", flush=True)
    print(f"PREFETCH {name} on/off vcycle {statistics.median(vc['on'])/statistics.median(vc['off']):.3f} solve {statistics.median(so['on'])/statistics.median(so['off']):.3f}", flush=True)
    del Ps; gc.collect()
