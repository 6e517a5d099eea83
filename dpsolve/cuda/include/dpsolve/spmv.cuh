// dpsolve/spmv.cuh - one row of y = A x in each format, as device functions, so that the SpMV
// kernels (spmv.cu) and the fused solver kernels share one implementation.
#pragma once
#include <dpsolve/common.cuh>

// Load policy of the matrix arrays (values, column indices) in the SpMV row functions (issue #7's
// cache-aware loads). x and the matrix are read through the read-only path already: they are
// `const __restrict__`, so the compiler emits ld.global.nc (LDG.E.CONSTANT) for every load.
//   DPS_SPMV_LOADS 0  plain loads everywhere
//   DPS_SPMV_LOADS 1  (default) the loads that coalesce across a warp -- ELL, CSR-vector, and
//                     csr-adaptive's warp- and block-mapped rows -- streamed, evict-first (__ldcs:
//                     ld.global.cs, LDG.E.EF in SASS), so the arrays read once per SpMV do not
//                     push the gathered x out of L2; CSR-scalar's one-thread-per-row loads stay
//                     plain (a thread walks its row through L1 lines that evict-first throws away)
//   DPS_SPMV_LOADS 2  every matrix load streamed
// Measured (H100, float64, scripts/bench-spmv --quick --loads; BENCHMARKS.md): streaming took ELL
// from 168.6 to 119.4 us on the banded matrix and 161.6 to 152.8 us on 3-D Laplace 160^3, and
// CSR-vector 1-2 %, but made CSR-scalar 2.7x slower on 160^3: policy 1 keeps what paid.
#ifndef DPS_SPMV_LOADS
#define DPS_SPMV_LOADS 1
#endif

namespace dps {

template <typename T>
__device__ __forceinline__ T ld_stream(const T* __restrict__ p) { return __ldcs(p); }
__device__ __forceinline__ complex<float> ld_stream(const complex<float>* __restrict__ p) {
    const float2 v = __ldcs(reinterpret_cast<const float2*>(p)); return {v.x, v.y};
}
__device__ __forceinline__ complex<double> ld_stream(const complex<double>* __restrict__ p) {
    const double2 v = __ldcs(reinterpret_cast<const double2*>(p)); return {v.x, v.y};
}

// A matrix load under the policy above; `coalesced`: the warp's lanes read consecutive entries.
template <bool coalesced, typename T>
__device__ __forceinline__ T ld_mat(const T* __restrict__ p) {
    if constexpr (DPS_SPMV_LOADS == 2 || (DPS_SPMV_LOADS == 1 && coalesced)) return ld_stream(p);
    else return *p;
}

// A float16's bits as a float: cvt.f32.f16, __half2float's instruction, without cuda_fp16.h.
__device__ __forceinline__ float half_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// A matrix value (a coalesced load) as T, stored as T or as the bits of a float16 (unsigned
// short: the AMG V-cycle's 2-byte copies, precision "half"; the kernel multiplies each row's sum
// by the matrix's power of two).
template <typename T>
__device__ __forceinline__ T mat_value(const T* __restrict__ p) { return ld_mat<true>(p); }
template <typename T>
__device__ __forceinline__ T mat_value(const unsigned short* __restrict__ p) {
    return T(half_to_float(ld_mat<true>(p)));
}

// CSR-scalar: one thread computes one row.
template <typename T>
__device__ __forceinline__ T csr_row_scalar(int row, const int* __restrict__ indptr,
                                            const int* __restrict__ indices,
                                            const T* __restrict__ data, const T* __restrict__ x) {
    T sum = T(0);
    const int end = indptr[row + 1];
#pragma unroll 4
    for (int k = indptr[row]; k < end; ++k)
        sum += ld_mat<false>(data + k) * x[ld_mat<false>(indices + k)];
    return sum;
}

// CSR-vector: a group of W lanes computes one row (Bell & Garland, with W chosen per matrix).
// All W lanes must call it (row may be >= n for idle groups: they contribute nothing).
// The group's first lane returns the row's value.
template <typename T, int W>
__device__ __forceinline__ T csr_row_vector(int row, int n, int lane_in_group,
                                            const int* __restrict__ indptr,
                                            const int* __restrict__ indices,
                                            const T* __restrict__ data, const T* __restrict__ x) {
    T sum = T(0);
    if (row < n) {
        const int end = indptr[row + 1];
        for (int k = indptr[row] + lane_in_group; k < end; k += W)
            sum += ld_mat<true>(data + k) * x[ld_mat<true>(indices + k)];
    }
    return group_sum<T, W>(sum);
}

// ELL, column-major: entry k of row `row` is at k*n + row; padding has column -1. Values of type
// V: T, or float16 bits (mat_value).
template <typename T, typename V>
__device__ __forceinline__ T ell_row(int row, int n, int width, const int* __restrict__ indices,
                                     const V* __restrict__ data, const T* __restrict__ x) {
    // No early exit at the first padding entry: a predicated body lets the compiler unroll and
    // keep several independent index -> x loads in flight (padding is at most 2x the nonzeros).
    T sum = T(0);
#pragma unroll 4
    for (int k = 0; k < width; ++k) {
        const size_t at = (size_t)k * n + row;
        const int c = ld_mat<true>(indices + at);
        if (c >= 0) sum += mat_value<T>(data + at) * x[c];
    }
    return sum;
}

// One row computed by one thread, in the format W names (abi.cuh's row-mapping codes, as the
// dynamic / persistent kernels take them): DYN_CSR_SCALAR (csr_row_scalar; `width` unused) or
// DYN_ELL (ell_row; `indptr` unused, null). The row loop of the merge variant's fused SpMV + DOT
// kernels, which take both formats' arguments: (width, indptr, indices, data).
template <int W, typename T>
__device__ __forceinline__ T thread_row(int row, int n, int width, const int* __restrict__ indptr,
                                        const int* __restrict__ indices,
                                        const T* __restrict__ data, const T* __restrict__ x) {
    static_assert(W == DYN_CSR_SCALAR || W == DYN_ELL, "a format with one thread per row");
    if constexpr (W == DYN_ELL) return ell_row(row, n, width, indices, data, x);
    else return csr_row_scalar(row, indptr, indices, data, x);
}

}  // namespace dps
