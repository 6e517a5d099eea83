# ruff: noqa
# The experiment behind BENCHMARKS.md's session-22 power table (issue 30), kept as it was run: run d's
# variant list (ship, local, halfx, half, stream); runs a-c listed ship, local, l1, stream (a), +noperm,
# noperm_local, sig1, sig32 (b), chunk2/8/32 (c) in the order list below. H100, `python3 <this> 160 2.0`
# (runs a-c: 1.5 s windows).
"""Issue 30's energy target: is level 1's gather locality or its instruction rate the lever?

Level 1 of 3-D 160^3 (float32 V-cycle): the shipped SELL residual kernel against variants that
read the same matrix bytes but gather x[row] (perfect locality), x[c & 4095] (always in L1), or
no per-row work at all (vector loads, one sum): each in a CUDA graph of 40 launches replayed for
WIN s under NVML's energy counter, ABCD..DCBA; Jacobi-CG and AMG-PCG prepared solves as anchors."""
import statistics, sys, time
import numpy as np, cupy, cupyx.scipy.sparse as csp, scipy.sparse as sp
import dpsolve
from dpsolve.matrices import laplace_3d
from dpsolve.measure import GpuEnergyMeter, nvml_index_of, _nvml, nvml_handle

N = int(sys.argv[1]) if len(sys.argv) > 1 else 160
WIN = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5
A = sp.csr_array(laplace_3d(N))
dA = csp.csr_matrix(A)
b = dA @ cupy.ones(A.shape[0])
idx_nv = nvml_index_of()
nv, hnd = _nvml(), nvml_handle(idx_nv)

SRC = r'''
#include <cuda_fp16.h>
__device__ __forceinline__ float ldcs(const float* p) { return __ldcs(p); }
__device__ __forceinline__ int ldcs(const int* p) { return __ldcs(p); }
extern "C" {
#define ROWS for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < n; q += gridDim.x * blockDim.x)
#define BODY(GATHER) BODYR(GATHER, perm ? perm[q] : q)
#define BODYR(GATHER, ROW) \
    const int row = ROW; const int end = sptr[(q >> 5) + 1]; float sum = 0.f; \
    _Pragma("unroll 4") for (int at = sptr[q >> 5] + (q & 31); at < end; at += 32) { \
        const int c = ldcs(idx + at); if (c >= 0) sum += ldcs(val + at) * (GATHER); } \
    res[row] = b[row] - sum;
__global__ void __launch_bounds__(256) k_ship(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
    const float* __restrict__ val, const int* __restrict__ perm, const float* __restrict__ x,
    const float* __restrict__ b, float* __restrict__ res) { ROWS { BODY(x[c]) } }
__global__ void __launch_bounds__(256) k_local(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
    const float* __restrict__ val, const int* __restrict__ perm, const float* __restrict__ x,
    const float* __restrict__ b, float* __restrict__ res) { ROWS { BODY(x[row]) } }
__global__ void __launch_bounds__(256) k_l1(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
    const float* __restrict__ val, const int* __restrict__ perm, const float* __restrict__ x,
    const float* __restrict__ b, float* __restrict__ res) { ROWS { BODY(x[c & 4095]) } }
__global__ void __launch_bounds__(256) k_noperm(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
    const float* __restrict__ val, const int* __restrict__ perm, const float* __restrict__ x,
    const float* __restrict__ b, float* __restrict__ res) { ROWS { BODYR(x[c], q) } }
__global__ void __launch_bounds__(256) k_noperm_local(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
    const float* __restrict__ val, const int* __restrict__ perm, const float* __restrict__ x,
    const float* __restrict__ b, float* __restrict__ res) { ROWS { BODYR(x[q], q) } }
// x in half precision (2-byte gathers), values float32
__global__ void __launch_bounds__(256) k_halfx(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
    const float* __restrict__ val, const int* __restrict__ perm, const __half* __restrict__ x,
    const float* __restrict__ b, float* __restrict__ res) { ROWS { BODY(__half2float(x[c])) } }
// x and values in half precision
__global__ void __launch_bounds__(256) k_half(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
    const __half* __restrict__ val, const int* __restrict__ perm, const __half* __restrict__ x,
    const float* __restrict__ b, float* __restrict__ res) {
    ROWS { const int row = perm ? perm[q] : q; const int end = sptr[(q >> 5) + 1]; float sum = 0.f;
    _Pragma("unroll 4") for (int at = sptr[q >> 5] + (q & 31); at < end; at += 32) {
        const int c = ldcs(idx + at); if (c >= 0) sum += __half2float(val[at]) * __half2float(x[c]); }
    res[row] = b[row] - sum; } }
// each block a contiguous chunk of slots, walked in steps of blockDim.x
__global__ void __launch_bounds__(1024) k_chunk(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
    const float* __restrict__ val, const int* __restrict__ perm, const float* __restrict__ x,
    const float* __restrict__ b, float* __restrict__ res) {
    const int per = ((n + gridDim.x - 1) / gridDim.x + blockDim.x - 1) / blockDim.x * blockDim.x;
    const int q0 = blockIdx.x * per, q1 = min(n, q0 + per);
    for (int q = q0 + threadIdx.x; q < q1; q += blockDim.x) { BODY(x[c]) } }
__global__ void __launch_bounds__(256) k_stream(long long m4, const int4* __restrict__ idx,
    const float4* __restrict__ val, float* __restrict__ out) {
    float s = 0.f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m4; i += (long long)gridDim.x * blockDim.x) {
        const int4 c = __ldcs(idx + i); const float4 v = __ldcs(val + i);
        s += v.x * c.x + v.y * c.y + v.z * c.z + v.w * c.w; }
    if (s == 1.2345f) out[0] = s; }
}
'''
mod = cupy.RawModule(code=SRC, options=("-std=c++17",))
Pj = dpsolve.prepare(dA, "cg", M="jacobi", variant="graph")
Pa = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
h = Pa.precond.hierarchy
lo = h.low if h.low is not None else h
lev = lo.levels[1]
S = lev.sell_A
n1 = lev.n
print(f"level 1: n {n1}, nnz {int(lev.A.nnz)}, slots {int(S.idx.size)}, dtype {S.val.dtype}", flush=True)
from dpsolve.precond.amg import device as dev
layouts = {"ship": S}
for sig in (1, 32):
    dev.SELL_SIGMA = sig
    dev.SELL_MAX_PADDING = 10.0
    layouts[f"sig{sig}"] = dev.sell_of(lev.A)
    dev.SELL_MAX_PADDING = 2.0
    print(f"sigma {sig}: slots {int(layouts[f'sig{sig}'].idx.size)}", flush=True)
dev.SELL_SIGMA = 256
x1 = cupy.random.rand(n1).astype(np.float32)
b1 = cupy.random.rand(n1).astype(np.float32)
r1 = cupy.empty(n1, np.float32)
x16 = x1.astype(np.float16)
val16 = S.val.astype(np.float16)
sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
grid = min((n1 + 255) // 256, sms * 32)
slots = int(S.idx.size)
m4 = slots // 4
stream = cupy.cuda.Stream(non_blocking=True)
bytes_rows = slots * 8 + n1 * 4 * 3 + (n1 + 31) // 32 * 4 + (n1 * 4 if S.perm is not None else 0)

def kargs(name):
    if name == "stream":
        return (np.int64(m4), S.idx, S.val, r1), m4 * 32
    if name in ("halfx", "half"):
        v = S.val if name == "halfx" else val16
        nb = int(S.idx.size) * (8 if name == "halfx" else 6) + n1 * 12 + ((n1 + 31) // 32) * 4 + n1 * 4
        return (np.int32(n1), S.sptr, S.idx, v, S.perm, x16, b1, r1), nb
    L = layouts.get(name, S)
    nb = int(L.idx.size) * 8 + n1 * 12 + ((n1 + 31) // 32) * 4 + (n1 * 4 if L.perm is not None else 0)
    return (np.int32(n1), L.sptr, L.idx, L.val, L.perm if L.perm is not None else np.uint64(0), x1, b1, r1), nb

graphs = {}
KERN = {"sig1": "ship", "sig32": "ship", "chunk2": "chunk", "chunk8": "chunk", "chunk32": "chunk"}
GEOM = {"stream": (sms * 8, 256), "chunk2": (sms * 2, 1024), "chunk8": (sms * 8, 256), "chunk32": (sms * 32, 256)}
for name in ("ship", "local", "noperm_local", "halfx", "half", "stream"):
    f = mod.get_function("k_" + KERN.get(name, name))
    args, nbytes = kargs(name)
    g, bl = GEOM.get(name, (grid, 256))
    with stream:
        f((g,), (bl,), args)
        stream.begin_capture()
        for _ in range(40):
            f((g,), (bl,), args)
        graphs[name] = (stream.end_capture(), nbytes)
    stream.synchronize()

def window_kernel(name):
    gr, nbytes = graphs[name]
    gr.launch(stream); stream.synchronize()
    m = GpuEnergyMeter(idx_nv); m.start(); t0 = time.perf_counter(); k = 0
    ev0 = cupy.cuda.Event(); ev1 = cupy.cuda.Event(); ev0.record(stream)
    while time.perf_counter() - t0 < WIN:
        gr.launch(stream); k += 1
        if k % 8 == 0: stream.synchronize()
    ev1.record(stream); stream.synchronize()
    wall = time.perf_counter() - t0; J = m.stop()
    gpu = cupy.cuda.get_elapsed_time(ev0, ev1) * 1e-3
    per = gpu / (40 * k)
    return dict(us=per * 1e6, W=J / wall, GBs=nbytes / per * 1e-9, T=nv.nvmlDeviceGetTemperature(hnd, 0))

def window_solve(P):
    P.solve(b, rtol=1e-8); cupy.cuda.Device().synchronize()
    ts = []
    m = GpuEnergyMeter(idx_nv); m.start(); t0 = time.perf_counter()
    while time.perf_counter() - t0 < WIN:
        t = time.perf_counter(); P.solve(b, rtol=1e-8); cupy.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0; J = m.stop()
    return dict(us=statistics.median(ts) * 1e6, W=J / wall, GBs=0.0, T=nv.nvmlDeviceGetTemperature(hnd, 0))

order = ["jacobi", "amg", "ship", "local", "halfx", "half", "stream"]
# check the chunked kernels compute what ship does
outs = {}
for name in ("ship",):
    f = mod.get_function("k_" + KERN.get(name, name)); args, _ = kargs(name); g, bl = GEOM.get(name, (grid, 256))
    r1.fill(0); f((g,), (bl,), args); cupy.cuda.Device().synchronize(); outs[name] = r1.copy()

res = {k: [] for k in order}
for name in order + order[::-1]:
    r = window_solve(Pj) if name == "jacobi" else window_solve(Pa) if name == "amg" else window_kernel(name)
    res[name].append(r)
    print(f"  {name:7s} {r['us']:10.1f} us {r['W']:6.0f} W {r['GBs']:7.0f} GB/s {r['T']} C", flush=True)
print("SUMMARY power22 (level 1 of 3-D %d, float32 SELL; W pooled over 2 windows)" % N)
for k in order:
    rs = res[k]
    print(f"  {k:7s} {statistics.mean(r['us'] for r in rs):10.1f} us  {statistics.mean(r['W'] for r in rs):6.0f} W  {statistics.mean(r['GBs'] for r in rs):7.0f} GB/s")
