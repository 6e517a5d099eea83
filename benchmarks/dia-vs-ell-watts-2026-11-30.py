#!/usr/bin/env python3
"""Issue 30's energy target, a ninth look: does a stencil's matrix read as diagonals (no column
indices, no gathers through them) draw fewer watts than ELL with indices (int32, or 16-bit
offsets packed with float16 values, as the V-cycle's level-0 copy is)? r = b - A x over 3-D
160^3's 7-point Laplacian in six forms (float32: ell32, ellpk, dia32, dia16; float64: ell64,
dia64), each kernel a CUDA graph of 40 launches replayed for WIN s under NVML's energy counter,
after 12 s of warming, in the order jacobi, amg, kernels, back, and again, with Jacobi-CG and
AMG-PCG prepared solves (graph, rtol 1e-8, x* = ones) as anchors. Each kernel's answer is checked
against SciPy's first (stderr). The six kernels are written out as they ran, not as templates:
dia16 reads its values with plain loads, the others with __ldcs (streaming). Session 51
(2026-11-30), H200: the csv dia-vs-ell-watts-2026-11-30.csv is its stdout.

    python3 benchmarks/dia-vs-ell-watts-2026-11-30.py [N] [WIN] > out.csv
"""
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp
import numpy as np
import scipy.sparse as sp

import dpsolve
from dpsolve.matrices import laplace_3d
from dpsolve.measure import GpuEnergyMeter, nvml_index_of

N = int(sys.argv[1]) if len(sys.argv) > 1 else 160
WIN = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
A = sp.csr_array(laplace_3d(N))
A.sort_indices()
n, W = A.shape[0], 7
OFFS = [-N * N, -N, -1, 0, 1, N, N * N]
rows = np.repeat(np.arange(n), np.diff(A.indptr))
k_of = np.searchsorted(OFFS, A.indices - rows)
assert (np.array(OFFS)[k_of] == A.indices - rows).all()
dia = np.zeros((W, n))
dia[k_of, rows] = A.data                                   # row-indexed diagonals
# ELL, column-major [k][n]: a row's entries in its diagonals' order, padding (0, own row)
ell_idx = np.tile(np.arange(n), (W, 1)).astype(np.int32)
ell_val = np.zeros((W, n))
ell_idx[k_of, rows] = A.indices
ell_val[k_of, rows] = A.data
# packed: each 32 rows' base column, a word = (col - base) << 16 | float16 bits of the value
base = ell_idx.reshape(W, -1, 32).min(axis=(0, 2)).astype(np.int32)
delta = ell_idx - np.repeat(base, 32)[None, :]
assert delta.max() < 65536
half_bits = ell_val.astype(np.float16).view(np.uint16).astype(np.uint32)
words = (delta.astype(np.uint32) << 16) | half_bits

SRC = r'''
#include <cuda_fp16.h>
#define RO(T) const T* __restrict__
#define ROWS for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < n; q += gridDim.x * blockDim.x)
#define AT(p, k) ((p) + (size_t)(k) * n + q)
#define OFFS const int o[7] = {-o0, -o1, -o2, 0, o2, o1, o0}
#define COL(k) min(max(q + o[k], 0), n - 1)
extern "C" {
__global__ void __launch_bounds__(256) k_ell32(int n, RO(int) idx, RO(float) val, RO(float) x,
                                               RO(float) b, float* __restrict__ r) {
    ROWS { float s = 0.f;
#pragma unroll
      for (int k = 0; k < 7; ++k) s += __ldcs(AT(val, k)) * x[__ldcs(AT(idx, k))];
      r[q] = b[q] - s; } }
__global__ void __launch_bounds__(256) k_ellpk(int n, RO(int) base, RO(unsigned) w, RO(float) x,
                                               RO(float) b, float* __restrict__ r) {
    ROWS { float s = 0.f; const int b0 = base[q >> 5];
#pragma unroll
      for (int k = 0; k < 7; ++k) { const unsigned u = __ldcs(AT(w, k));
        const float v = __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
        s += v * x[b0 + (int)(u >> 16)]; }
      r[q] = b[q] - s; } }
__global__ void __launch_bounds__(256) k_dia32(int n, int o0, int o1, int o2, RO(float) val,
                                               RO(float) x, RO(float) b, float* __restrict__ r) {
    OFFS;
    ROWS { float s = 0.f;
#pragma unroll
      for (int k = 0; k < 7; ++k) s += __ldcs(AT(val, k)) * x[COL(k)];
      r[q] = b[q] - s; } }
__global__ void __launch_bounds__(256) k_dia16(int n, int o0, int o1, int o2, RO(__half) val,
                                               RO(float) x, RO(float) b, float* __restrict__ r) {
    OFFS;
    ROWS { float s = 0.f;
#pragma unroll
      for (int k = 0; k < 7; ++k) s += __half2float(*AT(val, k)) * x[COL(k)];
      r[q] = b[q] - s; } }
__global__ void __launch_bounds__(256) k_ell64(int n, RO(int) idx, RO(double) val, RO(double) x,
                                               RO(double) b, double* __restrict__ r) {
    ROWS { double s = 0.0;
#pragma unroll
      for (int k = 0; k < 7; ++k) s += __ldcs(AT(val, k)) * x[__ldcs(AT(idx, k))];
      r[q] = b[q] - s; } }
__global__ void __launch_bounds__(256) k_dia64(int n, int o0, int o1, int o2, RO(double) val,
                                               RO(double) x, RO(double) b, double* __restrict__ r) {
    OFFS;
    ROWS { double s = 0.0;
#pragma unroll
      for (int k = 0; k < 7; ++k) s += __ldcs(AT(val, k)) * x[COL(k)];
      r[q] = b[q] - s; } }
}
'''
mod = cupy.RawModule(code=SRC, options=("-std=c++17",))
rng = np.random.default_rng(0)
xh, bh = rng.random(n), rng.random(n)
ref = bh - A @ xh.astype(np.float32).astype(np.float64)
x32, b32 = cupy.asarray(xh, np.float32), cupy.asarray(bh, np.float32)
r32 = cupy.empty(n, np.float32)
x64, b64, r64 = cupy.asarray(xh), cupy.asarray(bh), cupy.empty(n)
o = (np.int32(N * N), np.int32(N), np.int32(1))
nn = np.int32(n)
K = {
    "ell32": (nn, cupy.asarray(ell_idx), cupy.asarray(ell_val, np.float32), x32, b32, r32),
    "ellpk": (nn, cupy.asarray(base), cupy.asarray(words), x32, b32, r32),
    "dia32": (nn, *o, cupy.asarray(dia, np.float32), x32, b32, r32),
    "dia16": (nn, *o, cupy.asarray(dia, np.float16), x32, b32, r32),
    "ell64": (nn, cupy.asarray(ell_idx), cupy.asarray(ell_val), x64, b64, r64),
    "dia64": (nn, *o, cupy.asarray(dia), x64, b64, r64),
}
BYTES = {"ell32": W * n * 8 + 12 * n, "ellpk": W * n * 4 + n // 8 + 12 * n,    # x, b, r once
         "dia32": W * n * 4 + 12 * n, "dia16": W * n * 2 + 12 * n,
         "ell64": W * n * 12 + 24 * n, "dia64": W * n * 8 + 24 * n}
sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
grid = min((n + 255) // 256, sms * 32)
stream = cupy.cuda.Stream(non_blocking=True)
graphs = {}
for name, args in K.items():
    f = mod.get_function("k_" + name)
    with stream:
        f((grid,), (256,), args)
        stream.synchronize()
        out = cupy.asnumpy(args[-1]).astype(np.float64)
        err = np.abs(out - ref).max() / np.abs(ref).max()
        print(f"check {name}: max rel err {err:.1e}", file=sys.stderr, flush=True)
        assert err < 1e-5
        stream.begin_capture()
        for _ in range(40):
            f((grid,), (256,), args)
        graphs[name] = stream.end_capture()
    stream.synchronize()
idx_nv = nvml_index_of()


def window_kernel(name):
    gr = graphs[name]
    gr.launch(stream)
    stream.synchronize()
    m = GpuEnergyMeter(idx_nv).start()
    t0, k = time.perf_counter(), 0
    ev0, ev1 = cupy.cuda.Event(), cupy.cuda.Event()
    ev0.record(stream)
    while time.perf_counter() - t0 < WIN:
        gr.launch(stream)
        k += 1
        if k % 8 == 0:
            stream.synchronize()
    ev1.record(stream)
    stream.synchronize()
    wall, J = time.perf_counter() - t0, m.stop()
    per = cupy.cuda.get_elapsed_time(ev0, ev1) * 1e-3 / (40 * k)
    return dict(us=per * 1e6, W=J / wall, GBs=BYTES[name] / per * 1e-9)


dA = csp.csr_matrix(A)
bs = dA @ cupy.ones(n)
Pj = dpsolve.prepare(dA, "cg", M="jacobi", variant="graph")
Pa = dpsolve.prepare(dA, "cg", M="amg", variant="graph")


def window_solve(P):
    P.solve(bs, rtol=1e-8)
    cupy.cuda.Device().synchronize()
    ts = []
    m = GpuEnergyMeter(idx_nv).start()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < WIN:
        t = time.perf_counter()
        P.solve(bs, rtol=1e-8)
        cupy.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t)
    wall, J = time.perf_counter() - t0, m.stop()
    return dict(us=statistics.median(ts) * 1e6, W=J / wall, GBs=0.0)


order = ["jacobi", "amg", "ell32", "ellpk", "dia32", "dia16", "ell64", "dia64"]
res = {k: [] for k in order}
print("window,name,us,W,GBs", flush=True)
for _ in range(6):                       # 12 s of warming, then the order, back, and again
    window_kernel("ell64")
for i, name in enumerate(order + order[::-1] + order, 1):
    r = (window_solve(Pj) if name == "jacobi" else window_solve(Pa) if name == "amg"
         else window_kernel(name))
    res[name].append(r)
    print(f"{i},{name},{r['us']:.1f},{r['W']:.0f},{r['GBs']:.0f}", flush=True)
print(f"SUMMARY (3-D {N}, r = b - A x, 7 entries a row; W: mean of 3 windows)", file=sys.stderr)
for k in order:
    rs = res[k]
    us, watts = statistics.mean(r["us"] for r in rs), statistics.mean(r["W"] for r in rs)
    print(f"  {k:7s} {us:10.1f} us  {watts:6.0f} W  {us * watts * 1e-3:9.2f} mJ a call",
          file=sys.stderr)
