#!/usr/bin/env python3
"""Issue 30's energy target, another look: does a bandwidth-bound kernel keep its bandwidth on
fewer SMs, and draw fewer watts there? Each kernel runs pinned to the SMs whose %smid is below k
(a block on another SM returns at once; the rest take chunks of rows from an atomic counter, one
counter a launch), a CUDA graph of 40 launches replayed for WIN s under NVML's energy counter,
after 10 s of warming; k from all SMs down to half of them and back. Kernels: `copy` (y = 2 x,
float4, 1 GiB each way), `ellpk` (r = b - A x over 3-D N^3's 7-point Laplacian as the V-cycle's
level 0 holds it: a word = 16-bit column offset from its 32 rows' base | float16 value, float32
vectors) and `ell64` (the same r in float64 ELL with int32 columns, as Jacobi-CG's SpMV reads it);
`grid` rows are the same kernels grid-strided over every SM without the counter (the reference).
Each kernel's answer is checked against NumPy/SciPy first (stderr). Session 71 (2026-12-03).

    python3 benchmarks/watts-by-sms-2026-12-03.py [N] [WIN] > out.csv
"""
import statistics
import sys
import time

import cupy
import numpy as np
import scipy.sparse as sp

from dpsolve.matrices import laplace_3d
from dpsolve.measure import GpuEnergyMeter, nvml_index_of

N = int(sys.argv[1]) if len(sys.argv) > 1 else 160
WIN = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5
A = sp.csr_array(laplace_3d(N))
A.sort_indices()
n, W = A.shape[0], 7
OFFS = [-N * N, -N, -1, 0, 1, N, N * N]
rows = np.repeat(np.arange(n), np.diff(A.indptr))
k_of = np.searchsorted(OFFS, A.indices - rows)
ell_idx = np.tile(np.arange(n), (W, 1)).astype(np.int32)     # column-major [k][n], padding 0
ell_val = np.zeros((W, n))
ell_idx[k_of, rows] = A.indices
ell_val[k_of, rows] = A.data
base = ell_idx.reshape(W, -1, 32).min(axis=(0, 2)).astype(np.int32)
delta = ell_idx - np.repeat(base, 32)[None, :]
assert delta.max() < 65536
words = (delta.astype(np.uint32) << 16) | ell_val.astype(np.float16).view(np.uint16)

SRC = r'''
#include <cuda_fp16.h>
#define RO(T) const T* __restrict__
#define AT(p, k) ((p) + (size_t)(k) * n + q)
__device__ __forceinline__ unsigned smid() {
    unsigned r; asm volatile("mov.u32 %0, %%smid;" : "=r"(r)); return r; }
// PIN: the block leaves unless its SM is among the first `k`; then chunks of CH items from `ctr`
// (q over the chunk, a thread an item, CH / 256 rounds). GRID: grid-strided over every SM.
#define PIN(CH, TOTAL, BODY) \
    if (k >= 0) { if (smid() >= (unsigned)k) return; __shared__ int c_s; \
      for (;;) { if (threadIdx.x == 0) c_s = atomicAdd(ctr, 1); __syncthreads(); \
        const long long c0 = (long long)c_s * CH; __syncthreads(); if (c0 >= TOTAL) break; \
        for (long long q = c0 + threadIdx.x; q < min(c0 + CH, (long long)TOTAL); q += 256) \
          { BODY } } } \
    else { for (long long q = blockIdx.x * 256ll + threadIdx.x; q < TOTAL; \
                q += (long long)gridDim.x * 256) { BODY } }
extern "C" {
__global__ void __launch_bounds__(256) k_copy(int k, int* ctr, long long n, RO(float4) x,
                                              float4* __restrict__ y) {
    PIN(2048, n, { float4 v = __ldcs(x + q); v.x *= 2.f; v.y *= 2.f; v.z *= 2.f; v.w *= 2.f;
                   __stcs(y + q, v); }) }
__global__ void __launch_bounds__(256) k_ellpk(int k, int* ctr, long long n, RO(int) base,
        RO(unsigned) w, RO(float) x, RO(float) b, float* __restrict__ r) {
    PIN(1024, n, { float s = 0.f; const int b0 = base[q >> 5];
#pragma unroll
      for (int j = 0; j < 7; ++j) { const unsigned u = __ldcs(AT(w, j));
        const float v = __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
        s += v * x[b0 + (int)(u >> 16)]; }
      r[q] = b[q] - s; }) }
__global__ void __launch_bounds__(256) k_ell64(int k, int* ctr, long long n, RO(int) idx,
        RO(double) val, RO(double) x, RO(double) b, double* __restrict__ r) {
    PIN(1024, n, { double s = 0.0;
#pragma unroll
      for (int j = 0; j < 7; ++j) s += __ldcs(AT(val, j)) * x[__ldcs(AT(idx, j))];
      r[q] = b[q] - s; }) }
}
'''
mod = cupy.RawModule(code=SRC, options=("-std=c++17",))
dev = cupy.cuda.Device()
sms = dev.attributes["MultiProcessorCount"]
resident = sms * 8                                  # 256 threads, 8 blocks an SM
rng = np.random.default_rng(0)
xh, bh = rng.random(n), rng.random(n)
ref = bh - A @ xh.astype(np.float32).astype(np.float64)
ref64 = bh - A @ xh
x32, b32 = cupy.asarray(xh, np.float32), cupy.asarray(bh, np.float32)
r32 = cupy.empty(n, np.float32)
x64, b64, r64 = cupy.asarray(xh), cupy.asarray(bh), cupy.empty(n)
n4 = (1 << 30) // 16
cx, cy = cupy.ones(n4 * 4, np.float32), cupy.empty(n4 * 4, np.float32)
ctr = cupy.zeros(40, np.int32)
nn = np.int64(n)
K = {"copy": (np.int64(n4), cx, cy),
     "ellpk": (nn, cupy.asarray(base), cupy.asarray(words), x32, b32, r32),
     "ell64": (nn, cupy.asarray(ell_idx), cupy.asarray(ell_val), x64, b64, r64)}
BYTES = {"copy": 2 * n4 * 16, "ellpk": W * n * 4 + n // 8 + 12 * n, "ell64": W * n * 12 + 24 * n}
CHECK = {"copy": (lambda: float(cupy.abs(cy - 2).max()), 0.0),
         "ellpk": (lambda: float(np.abs(cupy.asnumpy(r32) - ref).max() / np.abs(ref).max()), 1e-3),
         "ell64": (lambda: float(np.abs(cupy.asnumpy(r64) - ref64).max()
                                 / np.abs(ref64).max()), 1e-12)}
KS = [sms, sms * 9 // 10, sms * 8 // 10, sms * 7 // 10, sms * 6 // 10, sms // 2]
stream = cupy.cuda.Stream(non_blocking=True)
graphs = {}
for name, args in K.items():
    f = mod.get_function("k_" + name)
    for k in KS + [-1]:
        with stream:
            ctr.fill(0)
            (cy if name == "copy" else args[-1]).fill(0)
            f((resident,), (256,), (np.int32(k), ctr[:1]) + args)
            stream.synchronize()
            err = CHECK[name][0]()
            print(f"check {name} k={k}: {err:.1e}", file=sys.stderr, flush=True)
            assert err <= CHECK[name][1] + 1e-7, (name, k, err)
            stream.begin_capture()
            ctr.fill(0)
            for i in range(40):
                f((resident,), (256,), (np.int32(k), ctr[i:i + 1]) + args)
            graphs[name, k] = stream.end_capture()
        stream.synchronize()
idx_nv = nvml_index_of()


def window(name, k):
    gr = graphs[name, k]
    gr.launch(stream)
    stream.synchronize()
    m = GpuEnergyMeter(idx_nv).start()
    t0, reps = time.perf_counter(), 0
    ev0, ev1 = cupy.cuda.Event(), cupy.cuda.Event()
    ev0.record(stream)
    while time.perf_counter() - t0 < WIN:
        gr.launch(stream)
        reps += 1
        if reps % 4 == 0:
            stream.synchronize()
    ev1.record(stream)
    stream.synchronize()
    wall, J = time.perf_counter() - t0, m.stop()
    per = cupy.cuda.get_elapsed_time(ev0, ev1) * 1e-3 / (40 * reps)
    return dict(us=per * 1e6, W=J / wall, GBs=BYTES[name] / per * 1e-9, uJ=J / (40 * reps) * 1e6)


t0 = time.perf_counter()
while time.perf_counter() - t0 < 10:
    window("copy", -1)
res = {}
print("name,sms,us,W,GBs,uJ_a_call", flush=True)
for name in K:
    for k in [-1] + KS + KS[::-1] + [-1]:
        r = window(name, k)
        res.setdefault((name, k), []).append(r)
        print(f"{name},{'grid' if k < 0 else k},{r['us']:.1f},{r['W']:.0f},{r['GBs']:.0f},"
              f"{r['uJ']:.0f}", flush=True)
print(f"SUMMARY (H: {dev.compute_capability}, {sms} SMs; 3-D {N}; means of 2 windows)")
for name in K:
    for k in [-1] + KS:
        rs = res[name, k]
        us, watts = statistics.mean(r["us"] for r in rs), statistics.mean(r["W"] for r in rs)
        print(f"  {name:6s} {'grid' if k < 0 else k:>4} SMs {us:9.1f} us {watts:5.0f} W "
              f"{statistics.mean(r['GBs'] for r in rs):6.0f} GB/s "
              f"{statistics.mean(r['uJ'] for r in rs):8.0f} uJ a call")
