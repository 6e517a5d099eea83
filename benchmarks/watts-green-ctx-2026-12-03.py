#!/usr/bin/env python3
"""Issue 30's energy target: do prepared solves on fewer SMs spend fewer joules? Each prepared
system (graph variant, float64 CG, rtol 1e-8, x* = ones) gets its stream from a CUDA green
context of k SMs (cuDevSmResourceSplitByCount; k rounded by the driver) in place of its own
stream, so that every kernel of its graph runs on those SMs only; k = every SM (no green
context) and the splits below. Jacobi-CG and AMG-PCG at 3-D N^3, each (solver, k) a window of
WIN s under NVML's energy counter after 10 s of warming, in the order k descending then back.
The iterations and x are checked to be the same bits on every k (stderr). First a probe
(stderr): a kernel that records each block's %smid, launched on each stream and in a graph
there, counts the SMs it ran on (PROBE_ONLY=1: stop after it). Session 71 (2026-12-03): the
probe was added after the timed run and run alone; watts-green-ctx-checks-2026-12-03.csv holds
its lines and the iteration and bit checks.

    python3 benchmarks/watts-green-ctx-2026-12-03.py [N] [WIN] > out.csv
"""
import os
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
from cuda.bindings import driver as cu

import dpsolve
from dpsolve import _setup
from dpsolve.matrices import laplace_3d
from dpsolve.measure import GpuEnergyMeter, nvml_index_of

N = int(sys.argv[1]) if len(sys.argv) > 1 else 160
WIN = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0


def ok(r):
    err, *rest = r
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(str(err))
    return rest[0] if len(rest) == 1 else rest


cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1))     # the primary context current
dev = ok(cu.cuDeviceGet(cupy.cuda.runtime.getDevice()))
sms_res = ok(cu.cuDeviceGetDevResource(dev, cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
total = sms_res.sm.smCount
streams = {total: None}
keep = []
for want in (112, 96, 80, 64):
    try:
        groups, n_groups, _rest = ok(cu.cuDevSmResourceSplitByCount(1, sms_res, 0, want))
    except TypeError:
        print(cu.cuDevSmResourceSplitByCount.__doc__[:1500], file=sys.stderr)
        raise
    got = groups[0].sm.smCount
    desc = ok(cu.cuDevResourceGenerateDesc([groups[0]], 1))
    g = ok(cu.cuGreenCtxCreate(desc, dev, cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
    s = ok(cu.cuGreenCtxStreamCreate(g, cu.CUstream_flags.CU_STREAM_NON_BLOCKING, 0))
    keep.append((g, s))
    streams[got] = cupy.cuda.ExternalStream(int(s))
    print(f"green context: asked {want} SMs, got {got}", file=sys.stderr, flush=True)
KS = sorted(streams, reverse=True)
PROBE = cupy.RawKernel(r'''extern "C" __global__ void probe(unsigned* sm) {
    unsigned r; asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    if (threadIdx.x == 0) sm[blockIdx.x] = r; }''', "probe")
for k in KS:                                  # where a plain kernel and a graph's kernel run
    sm = cupy.zeros(4096, cupy.uint32)
    st = streams[k] or cupy.cuda.Stream(non_blocking=True)
    with st:
        PROBE((4096,), (256,), (sm,))
        st.synchronize()
        plain = int(cupy.unique(sm).size)
        sm.fill(0)
        st.begin_capture()
        PROBE((4096,), (256,), (sm,))
        g = st.end_capture()
        g.launch(st)
        st.synchronize()
    print(f"k={k}: a kernel ran on {plain} SMs, in a graph on {int(cupy.unique(sm).size)}",
          file=sys.stderr, flush=True)
if os.environ.get("PROBE_ONLY") == "1":
    sys.exit(0)

A = csp.csr_matrix(laplace_3d(N))
b = A @ cupy.ones(A.shape[0])
init = _setup.Resources.__init__
systems = {}
for k in KS:
    def on_green(self, k=k):
        init(self)
        if streams[k] is not None:
            self.stream = streams[k]
    _setup.Resources.__init__ = on_green
    for M in ("jacobi", "amg"):
        P = dpsolve.prepare(A, "cg", M=M, variant="graph")
        x, info, rep = P.solve(b, rtol=1e-8, full_output=True)
        systems[M, k] = (P, x)
        print(f"{M} k={k}: info {info}, iterations {rep.iterations}", file=sys.stderr,
              flush=True)
_setup.Resources.__init__ = init
for M in ("jacobi", "amg"):
    x0 = systems[M, total][1]
    for k in KS:
        same = bool((systems[M, k][1] == x0).all())
        print(f"{M} k={k}: x the same bits as on every SM: {same}", file=sys.stderr, flush=True)
idx_nv = nvml_index_of()


def window(M, k):
    P = systems[M, k][0]
    P.solve(b, rtol=1e-8)
    cupy.cuda.Device().synchronize()
    ts = []
    m = GpuEnergyMeter(idx_nv).start()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < WIN:
        t = time.perf_counter()
        P.solve(b, rtol=1e-8)
        cupy.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t)
    wall, J = time.perf_counter() - t0, m.stop()
    return dict(ms=statistics.median(ts) * 1e3, W=J / wall, J=J / len(ts))


t0 = time.perf_counter()
while time.perf_counter() - t0 < 10:
    window("jacobi", total)
res = {}
print("solver,sms,ms,W,J_a_solve", flush=True)
for k in KS + KS[::-1]:
    for M in ("jacobi", "amg"):
        r = window(M, k)
        res.setdefault((M, k), []).append(r)
        print(f"{M},{k},{r['ms']:.3f},{r['W']:.0f},{r['J']:.3f}", flush=True)
print(f"SUMMARY (3-D {N}, graph, means of 2 windows)")
for k in KS:
    line = []
    for M in ("jacobi", "amg"):
        rs = res[M, k]
        line.append("%s %.2f ms %.0f W %.3f J" % (
            M, statistics.mean(r["ms"] for r in rs), statistics.mean(r["W"] for r in rs),
            statistics.mean(r["J"] for r in rs)))
    j, a = res["jacobi", k], res["amg", k]
    print(f"  {k:4d} SMs: " + "; ".join(line) + "; joules ratio %.2fx, time ratio %.2fx" % (
        statistics.mean(r["J"] for r in j) / statistics.mean(r["J"] for r in a),
        statistics.mean(r["ms"] for r in j) / statistics.mean(r["ms"] for r in a)))
