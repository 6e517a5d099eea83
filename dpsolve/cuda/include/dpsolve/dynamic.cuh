// dpsolve/dynamic.cuh - device helpers shared by the CDP2 tail-launch chains of variant "dynamic"
// (cg_dynamic.cu, bicg_dynamic.cu, bicgstab_dynamic.cu): the status layout, the SpMV row loop
// with gather functors, the redundant DOT stage 2, and the chain's end / launch-failure records.
//
// Template scheme of every chain: kernels <T, W> with W = DYN_ELL (0), DYN_CSR_SCALAR (1), or the
// CSR-vector lane width (2, 4, 8, 16, 32).
//
// Result area (double status[8]): [0] info, [1] iterations, [2] state (0 running, 1 done, 2 a
// device launch failed), [3] the cudaError_t of a failed launch, [4] the last residual norm tested.
#pragma once

#include <dpsolve/common.cuh>

#ifndef cudaStreamTailLaunch      // cuda_device_runtime_api.h defines it for CDP2 builds
#define cudaStreamTailLaunch ((cudaStream_t)0x3)
#endif

#define DYN_ELL 0
#define DYN_CSR_SCALAR 1

#define DYN_INFO 0
#define DYN_ITERS 1
#define DYN_STATE 2
#define DYN_ERROR 3
#define DYN_TAU 4

#define DYN_RUNNING 0.0
#define DYN_DONE 1.0
#define DYN_LAUNCH_FAILED 2.0

namespace dyn {

// Gathers for the SpMV: a plain vector, or p = z + beta * p_old formed on the fly (fma, so the
// value gathered for column c is bitwise the value that row c's owner stores as p[c]).
template <typename T>
struct LoadVec {
    const T* __restrict__ x;
    __device__ __forceinline__ T operator()(int c) const { return dps::ldg(x + c); }
};

template <typename T>
struct LoadXpay {
    const T* __restrict__ z;
    const T* __restrict__ p;
    T beta;
    __device__ __forceinline__ T operator()(int c) const { return fma(beta, dps::ldg(p + c), dps::ldg(z + c)); }
};

// For every row of A (grid-stride, fixed grid): emit(row, (A y)[row]) with y given by `load`.
// CSR-vector: a group of W lanes per row; the loop bound is block-uniform, so the shuffles of
// group_sum run in warp-uniform control flow; only the group's first lane emits.
template <typename T, int W, typename Load, typename Emit>
__device__ __forceinline__ void for_rows(int n, int width, const int* __restrict__ indptr,
                                         const int* __restrict__ indices,
                                         const T* __restrict__ data, const Load& load, Emit&& emit) {
    if constexpr (W == DYN_ELL) {
        for (int row = blockIdx.x * DPS_BLOCK + threadIdx.x; row < n; row += gridDim.x * DPS_BLOCK) {
            T sum = T(0);
            for (int k = 0; k < width; ++k) {
                const size_t at = (size_t)k * n + row;
                const int c = indices[at];
                if (c < 0) break;
                sum += data[at] * load(c);
            }
            emit(row, sum);
        }
    } else if constexpr (W == DYN_CSR_SCALAR) {
        for (int row = blockIdx.x * DPS_BLOCK + threadIdx.x; row < n; row += gridDim.x * DPS_BLOCK) {
            T sum = T(0);
            const int end = indptr[row + 1];
#pragma unroll 2       // deeper unrolling of the 4-load body costs occupancy (122 registers)
            for (int k = indptr[row]; k < end; ++k) sum += data[k] * load(indices[k]);
            emit(row, sum);
        }
    } else {
        static_assert(W >= 2 && W <= DPS_WARP && (W & (W - 1)) == 0, "CSR-vector width");
        constexpr int groups = DPS_BLOCK / W;
        const int lane = threadIdx.x % W;
        for (int base = blockIdx.x * groups; base < n; base += gridDim.x * groups) {
            const int row = base + threadIdx.x / W;
            T sum = T(0);
            if (row < n) {
                const int end = indptr[row + 1];
#pragma unroll 2
                for (int k = indptr[row] + lane; k < end; k += W) sum += data[k] * load(indices[k]);
            }
            sum = dps::group_sum<T, W>(sum);
            if (lane == 0 && row < n) emit(row, sum);
        }
    }
}

// DOT stage 2, finished redundantly by every block (same order, so the same bits everywhere).
// Every thread of the block must call it; thread 0 gets the total.
template <typename T>
__device__ __forceinline__ T sum_partials(const T* __restrict__ parts, int nparts, T* smem) {
    T s = T(0);
    for (int i = threadIdx.x; i < nparts; i += DPS_BLOCK) s += parts[i];
    return dps::block_sum(s, smem);
}

__device__ __forceinline__ void finish(double* status, int info, int iterations) {
    status[DYN_INFO] = info;
    status[DYN_ITERS] = iterations;
    status[DYN_STATE] = DYN_DONE;
}

// After a device launch: a failure (pending-launch pool full, ...) ends the chain with a record.
__device__ __forceinline__ void check_launch(double* status) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        status[DYN_ERROR] = (double)e;
        status[DYN_STATE] = DYN_LAUNCH_FAILED;
    }
}

// SciPy's breakdown tolerance (rhotol = omegatol): eps**2 of the working precision, exact (2^-46
// for float, 2^-104 for double), so comparing in double gives the comparison SciPy makes in T.
template <typename T>
__device__ __forceinline__ double eps2() {
    return sizeof(dps::real_t<T>) == 4 ? 1.4210854715202004e-14 : 4.930380657631324e-32;
}

// |a| of a real scalar, as a double (complex types get an overload with complex support).
template <typename T>
__device__ __forceinline__ double mag(T a) { return (double)fabs(a); }

}  // namespace dyn
