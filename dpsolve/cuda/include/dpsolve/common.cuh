// dpsolve/common.cuh - types, block sizes and reductions shared by every dpsolve kernel.
//
// Every kernel is templated on the value type T (float, double) and instantiated from Python with
// NVRTC name expressions (see dpsolve/cuda/_loader.py). No CUDA runtime headers are needed.
#pragma once

#define DPS_BLOCK 256          // threads per block of every element-wise and SpMV kernel
#define DPS_WARP 32
#define DPS_FULL_MASK 0xffffffffu

namespace dps {

// The conjugate of a (identity for real types); complex overloads come with complex support.
template <typename T> __device__ __forceinline__ T conj(T a) { return a; }

// Sum over a warp with shuffles; every lane of the warp must call it. Lane 0 gets the total.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int off = DPS_WARP / 2; off > 0; off >>= 1)
        v += __shfl_down_sync(DPS_FULL_MASK, v, off);
    return v;
}

// Sum over a group of W consecutive lanes (W a power of two <= 32); the group's first lane gets it.
template <typename T, int W>
__device__ __forceinline__ T group_sum(T v) {
#pragma unroll
    for (int off = W / 2; off > 0; off >>= 1)
        v += __shfl_down_sync(DPS_FULL_MASK, v, off, W);
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024). Thread 0 gets the total.
// `smem` needs 32 elements. Every thread of the block must call it.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* smem) {
    const int lane = threadIdx.x % DPS_WARP, warp = threadIdx.x / DPS_WARP;
    v = warp_sum(v);
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    const int nwarps = blockDim.x / DPS_WARP;
    v = (threadIdx.x < nwarps) ? smem[lane] : T(0);
    if (warp == 0) v = warp_sum(v);
    __syncthreads();   // smem may be reused by the caller right after
    return v;
}

}  // namespace dps
