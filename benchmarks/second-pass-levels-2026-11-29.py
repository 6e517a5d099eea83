# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 25). H200 2026-11-29: `python3 <this> 1.5 3`.
"""The aggregation's second pass level by level: second_pass 1 everywhere (the old default),
(2, 1) (the new default: distance 2 on the finest level, 1 below) and (2, 2, 1), at 3-D 160^3,
100^3 and 2-D 1024^2. Prepared AMG-PCG (graph): iterations, V-cycle, levels, set-up and re-set-up
(medians of REPS, after a first untimed one), solve time and power / joules a solve against
Jacobi-CG in WIN s windows, order J a b c c b a J."""
import gc, statistics, sys, time
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.measure import GpuEnergyMeter, nvml_index_of
from dpsolve.precond import AMG
WIN = float(sys.argv[1]) if len(sys.argv) > 1 else 1.5
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
CONFIGS = [(1,), (2, 1), (2, 2, 1)]
idx = nvml_index_of()
sync = cupy.cuda.Device().synchronize

def window(P, b):
    P.solve(b, rtol=1e-8); sync(); ts = []
    m = GpuEnergyMeter(idx); m.start(); t0 = time.perf_counter()
    while time.perf_counter() - t0 < WIN:
        t = time.perf_counter(); P.solve(b, rtol=1e-8); sync(); ts.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0; J = m.stop()
    return statistics.median(ts) * 1e3, J / wall, J / len(ts)

def timed(f):
    gc.collect(); sync(); t0 = time.perf_counter(); out = f(); sync()
    return out, (time.perf_counter() - t0) * 1e3

for name, A in (("160^3", laplace_3d(160)), ("100^3", laplace_3d(100)), ("1024^2", laplace_2d(1024))):
    dA = csp.csr_matrix(A); b = dA @ cupy.ones(A.shape[0]); A2 = dA * 2.0
    Ps = {"jacobi": dpsolve.prepare(dA, "cg", M="jacobi", variant="graph")}
    info = {}
    for sp_ in CONFIGS:
        make = lambda: dpsolve.prepare(dA, "cg", M=AMG(second_pass=sp_), variant="graph")
        P = make(); sync()                                   # compiles
        setups = []
        for _ in range(REPS):
            P = None; P, t = timed(make); setups.append(t)
        re = []
        for _ in range(REPS):
            for M_ in (A2, dA):
                re.append(timed(lambda: P.update(M_))[1])
        out = P.solve(b, rtol=1e-8, full_output=True)
        x, rep = out[0], out[-1]
        pc = rep.preconditioner
        st, rs = statistics.median(setups), statistics.median(re)
        info[sp_] = (rep.iterations, pc["vcycle_time"] * 1e3, pc["operator_complexity"], pc["levels"], st, rs,
                     float(cupy.linalg.norm(x - 1) / np.sqrt(A.shape[0])), pc.get("setup_times"))
        Ps[sp_] = P
    order = ["jacobi", *CONFIGS]
    res = {k: [] for k in order}
    for k in order + order[::-1]:
        res[k].append(window(Ps[k], b))
    mean = lambda k, i: statistics.mean(r[i] for r in res[k])
    jt, jw, jj = mean("jacobi", 0), mean("jacobi", 1), mean("jacobi", 2)
    print(f"SPL {name} jacobi {jt:.2f} ms {jw:.0f} W {jj:.3f} J", flush=True)
    for k in CONFIGS:
        t, w, j = mean(k, 0), mean(k, 1), mean(k, 2)
        its, vc, oc, lv, st, rs, err, split = info[k]
        print(f"SPL {name} second_pass={k} its {its} vcycle {vc:.3f} ms opc {oc:.2f} setup {st:.1f} ms "
              f"resetup {rs:.1f} ms ({rs / st:.2f}) | solve {t:.2f} ms {w:.0f} W {j:.3f} J | "
              f"time ratio {jt / t:.2f} J ratio {jj / j:.2f} | err {err:.1e} (W {', '.join(f'{r[1]:.0f}' for r in res[k])})",
              flush=True)
        print(f"SPL-levels {name} {k} {lv} split {split}", flush=True)
