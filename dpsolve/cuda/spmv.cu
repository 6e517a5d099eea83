// spmv.cu - sparse matrix-vector products y = A x (step O1 of CG).
//
// Kernels: spmv_csr_scalar<T>, spmv_csr_vector<T, W>, spmv_ell<T>. All loop grid-stride over rows,
// so any grid size covers any n. Bytes moved per call (values of s bytes, 4-byte indices):
//   CSR:  nnz*(s+4) + (n+1)*4 for A, up to nnz*s for x (gathered), n*s for y.
//   ELL:  width*n*(s+4) for A (padding included), up to nnz*s for x, n*s for y.
#include <dpsolve/common.cuh>
#include <dpsolve/spmv.cuh>

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
spmv_csr_scalar(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                const T* __restrict__ data, const T* __restrict__ x, T* __restrict__ y) {
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        y[row] = dps::csr_row_scalar(row, indptr, indices, data, x);
}

// W lanes per row. The loop bound is uniform across each warp, as the shuffles require.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
spmv_csr_vector(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                const T* __restrict__ data, const T* __restrict__ x, T* __restrict__ y) {
    const int groups_per_block = DPS_BLOCK / W;
    const int lane = threadIdx.x % W;
    const int stride = gridDim.x * groups_per_block;
    for (int base = blockIdx.x * groups_per_block; base < n; base += stride) {
        const int row = base + threadIdx.x / W;
        const T v = dps::csr_row_vector<T, W>(row, n, lane, indptr, indices, data, x);
        if (lane == 0 && row < n) y[row] = v;
    }
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
spmv_ell(int n, int width, const int* __restrict__ indices, const T* __restrict__ data,
         const T* __restrict__ x, T* __restrict__ y) {
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        y[row] = dps::ell_row(row, n, width, indices, data, x);
}
