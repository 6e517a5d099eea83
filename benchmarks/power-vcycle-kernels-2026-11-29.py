# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24). H200 2026-11-29: `python3 <this> 160 1.0`; its table is power-vcycle-kernels-2026-11-29-h200.csv.
"""Issue 30's energy target: the power of each V-cycle kernel at 3-D 160^3 (graph's hierarchy,
float16 matrices), each replayed alone in a CUDA graph of 40 launches for WIN s under NVML's
energy counter, windows in order then reversed; the whole V-cycle, Jacobi-CG and AMG-PCG
prepared solves as anchors. Prints a table: us a launch, W, W x us / 1e3 (mJ a launch)."""
import statistics, sys, time
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_3d
from dpsolve.measure import GpuEnergyMeter, nvml_index_of
from dpsolve.precond.amg import device

N = int(sys.argv[1]) if len(sys.argv) > 1 else 160
WIN = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
A = laplace_3d(N, N, N)
dA = csp.csr_matrix(A)
b = dA @ cupy.ones(A.shape[0])
idx = nvml_index_of()
Pj = dpsolve.prepare(dA, "cg", M="jacobi", variant="graph")
Pa = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
h = Pa.precond.hierarchy
rec = []
real = device.launch
device.launch = lambda k, g, bl, args, stream=None, shared_mem=0: rec.append((k, g, bl, args))
s = cupy.cuda.Stream(non_blocking=True)
z = cupy.empty_like(b)
h.vcycle(b, z, s)
device.launch = real
names = []
for k, g, bl, args in rec:
    raw = getattr(k, "raw", k)
    names.append(str(getattr(raw, "name", raw)))
graphs = {}
for i, (k, g, bl, args) in enumerate(rec):
    with s:
        k(g, bl, args, stream=s); s.synchronize()
        s.begin_capture()
        for _ in range(40):
            k(g, bl, args, stream=s)
        graphs[i] = s.end_capture()
with s:
    s.begin_capture()
    for _ in range(10):
        h.vcycle(b, z, s)
    graphs["vcycle"] = s.end_capture()
s.synchronize()
PER = {"vcycle": 10}

def window_graph(key):
    gr = graphs[key]; gr.launch(s); s.synchronize()
    m = GpuEnergyMeter(idx); m.start(); t0 = time.perf_counter(); n = 0
    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event(); e0.record(s)
    while time.perf_counter() - t0 < WIN:
        gr.launch(s); n += 1
        if n % 8 == 0: s.synchronize()
    e1.record(s); s.synchronize()
    wall = time.perf_counter() - t0; J = m.stop()
    us = cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / (PER.get(key, 40) * n)
    return us, J / wall

def window_solve(P):
    P.solve(b, rtol=1e-8); cupy.cuda.Device().synchronize(); ts = []
    m = GpuEnergyMeter(idx); m.start(); t0 = time.perf_counter()
    while time.perf_counter() - t0 < WIN:
        t = time.perf_counter(); P.solve(b, rtol=1e-8); cupy.cuda.Device().synchronize(); ts.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0; J = m.stop()
    return statistics.median(ts) * 1e6, J / wall

order = ["jacobi", "amg", "vcycle"] + list(range(len(rec)))
res = {k: [] for k in order}
for key in order + order[::-1]:
    r = window_solve(Pj) if key == "jacobi" else window_solve(Pa) if key == "amg" else window_graph(key)
    res[key].append(r)
print(f"SUMMARY per-kernel power, 3-D {N}^3, graph hierarchy, {WIN} s windows x 2")
tot = 0.0
for key in order:
    us = statistics.mean(r[0] for r in res[key]); W = statistics.mean(r[1] for r in res[key])
    nm = key if isinstance(key, str) else f"{key:2d} {names[key][:58]} grid {rec[key][1][0]}"
    if isinstance(key, int): tot += us * W / 1e3
    print(f"  {nm:78s} {us:10.1f} us {W:6.0f} W {us * W / 1e3:8.2f} mJ  (W: {', '.join(f'{r[1]:.0f}' for r in res[key])})")
print(f"  sum of the kernels' mJ a launch: {tot:.2f}")
