// dpsolve/spmv.cuh - one row of y = A x in each format, as device functions, so that the SpMV
// kernels (spmv.cu) and the fused solver kernels share one implementation.
#pragma once
#include <dpsolve/common.cuh>

namespace dps {

// CSR-scalar: one thread computes one row.
template <typename T>
__device__ __forceinline__ T csr_row_scalar(int row, const int* __restrict__ indptr,
                                            const int* __restrict__ indices,
                                            const T* __restrict__ data, const T* __restrict__ x) {
    T sum = T(0);
    const int end = indptr[row + 1];
#pragma unroll 4
    for (int k = indptr[row]; k < end; ++k) sum += data[k] * x[indices[k]];
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
        for (int k = indptr[row] + lane_in_group; k < end; k += W) sum += data[k] * x[indices[k]];
    }
    return group_sum<T, W>(sum);
}

// ELL, column-major: entry k of row `row` is at k*n + row; padding has column -1.
template <typename T>
__device__ __forceinline__ T ell_row(int row, int n, int width, const int* __restrict__ indices,
                                     const T* __restrict__ data, const T* __restrict__ x) {
    // No early exit at the first padding entry: a predicated body lets the compiler unroll and
    // keep several independent index -> x loads in flight (padding is at most 2x the nonzeros).
    T sum = T(0);
#pragma unroll 4
    for (int k = 0; k < width; ++k) {
        const size_t at = (size_t)k * n + row;
        const int c = indices[at];
        if (c >= 0) sum += data[at] * x[c];
    }
    return sum;
}

}  // namespace dps
