# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24). H200 2026-11-29: `python3 <this> 1.5`.
"""AMG's second aggregation pass (second_pass 1, the default; 2: the MIS-2 of the leftovers,
larger aggregates; 0: none) at 3-D 160^3, 100^3 and 2-D 1024^2: prepared AMG-PCG (graph) time,
iterations, V-cycle, operator complexity, set-up, and power / joules a solve against Jacobi-CG,
WIN s windows J a b c c b a J."""
import statistics, sys, time
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.measure import GpuEnergyMeter, nvml_index_of
from dpsolve.precond import AMG
WIN = float(sys.argv[1]) if len(sys.argv) > 1 else 1.5
idx = nvml_index_of()

def window(P, b):
    P.solve(b, rtol=1e-8); cupy.cuda.Device().synchronize(); ts = []
    m = GpuEnergyMeter(idx); m.start(); t0 = time.perf_counter()
    while time.perf_counter() - t0 < WIN:
        t = time.perf_counter(); P.solve(b, rtol=1e-8); cupy.cuda.Device().synchronize(); ts.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0; J = m.stop()
    return statistics.median(ts) * 1e3, J / wall, J / len(ts)

for name, A in (("160^3", laplace_3d(160)), ("100^3", laplace_3d(100)), ("1024^2", laplace_2d(1024))):
    dA = csp.csr_matrix(A); b = dA @ cupy.ones(A.shape[0])
    Ps = {"jacobi": dpsolve.prepare(dA, "cg", M="jacobi", variant="graph")}
    info = {}
    for sp_ in (1, 2, 0):
        t0 = time.perf_counter()
        P = dpsolve.prepare(dA, "cg", M=AMG(second_pass=sp_), variant="graph"); cupy.cuda.Device().synchronize()
        st = (time.perf_counter() - t0) * 1e3
        out = P.solve(b, rtol=1e-8, full_output=True)
        x, rep = out[0], out[-1]
        pc = rep.preconditioner
        info[sp_] = (rep.iterations, pc["vcycle_time"] * 1e3, pc["operator_complexity"], len(pc["levels"]), st,
                     float(cupy.linalg.norm(x - 1) / np.sqrt(A.shape[0])))
        Ps[sp_] = P
    order = ["jacobi", 1, 2, 0]
    res = {k: [] for k in order}
    for k in order + order[::-1]:
        res[k].append(window(Ps[k], b))
    jt = statistics.mean(r[0] for r in res["jacobi"]); jw = statistics.mean(r[1] for r in res["jacobi"]); jj = statistics.mean(r[2] for r in res["jacobi"])
    print(f"SP {name} jacobi {jt:.2f} ms {jw:.0f} W {jj:.3f} J", flush=True)
    for k in (1, 2, 0):
        t = statistics.mean(r[0] for r in res[k]); w = statistics.mean(r[1] for r in res[k]); j = statistics.mean(r[2] for r in res[k])
        its, vc, oc, nl, st, err = info[k]
        print(f"SP {name} second_pass={k} its {its} vcycle {vc:.3f} ms opc {oc:.2f} levels {nl} setup {st:.1f} ms | solve {t:.2f} ms {w:.0f} W {j:.3f} J | "
              f"time ratio {jt / t:.2f} J ratio {jj / j:.2f} | err {err:.1e} (W {', '.join(f'{r[1]:.0f}' for r in res[k])})", flush=True)
