"""Issue 30: the SELL copies' column indices as 16-bit offsets (device.NARROW_INDICES) against
int32 ones, on the GPU: AMG-PCG prepared on graph, x* = ones, rtol 1e-8, interleaved A B A B in one
process per problem: iterations, the V-cycle's time (the preconditioner's own timing), its
bandwidth floor's bytes, the prepared solve (median of 15), the set-up, and how many of the
SELL copies are narrow. Then, at the last problem, watts: the card warmed 8 s, 1.5 s windows
J N W J J W N J (J: Jacobi-CG, N: narrow, W: int32), each solve's ms, J and W: a second table
(kept as narrow-indices-watts-2026-11-29.csv).
Usage: python3 benchmarks/narrow-indices-ab-2026-11-29.py [2:1024,3:100,3:160]"""
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.measure import measure_window
from dpsolve.precond.amg import device

sync = cupy.cuda.Device().synchronize


def narrow_count(P):
    """"k/m": k of the cycle's m SELL copies with narrow indices."""
    h = P.precond.hierarchy
    h = h.low if h.low is not None else h
    sells = [S for lev in h.levels[:-1] for S in (lev.sell_A, lev.sell_R, lev.sell_P)
             if S is not None]
    return f"{sum(S.base is not None for S in sells)}/{len(sells)}"


spec = sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:100,3:160"
print("problem,narrow,round,iterations,vcycle_us,vcycle_MB,solve_ms,setup_ms,narrow_of_sell",
      flush=True)
for item in spec.split(","):
    dim, size = item.split(":")
    A = csp.csr_matrix(laplace_2d(int(size)) if dim == "2" else laplace_3d(int(size)))
    b = A @ cupy.ones(A.shape[0])
    keep = {}
    for rnd in range(2):
        for on in (False, True):
            device.NARROW_INDICES = on
            sync()
            t0 = time.perf_counter()
            P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
            sync()
            setup = (time.perf_counter() - t0) * 1e3
            _, info, rep = P.solve(b, rtol=1e-8, full_output=True)
            times = []
            for _ in range(15):
                sync()
                t0 = time.perf_counter()
                P.solve(b, rtol=1e-8)
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
            print(f"{dim}-D {size},{on},{rnd},{rep.iterations},"
                  f"{P.precond.vcycle_time * 1e6:.1f},{P.precond.vcycle_bytes / 1e6:.2f},"
                  f"{statistics.median(times):.3f},{setup:.1f},{narrow_count(P)}", flush=True)
            keep[on] = P
    device.NARROW_INDICES = True
print("round,kind,reps,ms,J,W", flush=True)
keep["jacobi"] = dpsolve.prepare(A, "cg", M="jacobi", variant="graph")
measure_window(lambda: keep[True].solve(b, rtol=1e-8), seconds=8.0, sync=sync)
for rnd, k in enumerate(("jacobi", True, False, "jacobi", "jacobi", False, True, "jacobi")):
    m = measure_window(lambda: keep[k].solve(b, rtol=1e-8), seconds=1.5, sync=sync)
    name = k if k == "jacobi" else ("amg-narrow" if k else "amg-int32")
    print(f"{rnd},{name},{m['reps']},{m['wall'] * 1e3:.3f},{m['gpu_energy']:.4f},"
          f"{m['gpu_power']:.0f}", flush=True)
