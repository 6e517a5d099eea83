// blas1.cu - vector kernels: the two-stage DOT and the paired AXPY / XPAY of the paper (Figs. 3-6).
//
// dot_partial<T>  stage 1: each block reduces its pairs of elements to one partial sum.
//                 Each thread takes two entries of every chunk of 2*gridDim.x*blockDim.x
//                 (at i and i + blockDim.x), so the loads coalesce. Reads 2*n*s bytes.
// dot_final<T>    stage 2: one block reduces the nparts partials to out[0].
// dot_accurate<T> out[0] = <x, y> by one block, accurate (dps::dot_accurate): the confirmation of
//                 a breakdown test that failed on cuBLAS's dot, for variant cublas. Reads 2*n*s.
// axpy<T>         y = y + sign*alpha*x, alpha read from device memory. Reads 2*n*s, writes n*s.
// xpay<T>         y = x + alpha*y (CG step O8), alpha read from device memory.
// AXPY and XPAY process pairs of elements per thread per chunk, as in the paper's Figure 6.
#include <dpsolve/common.cuh>

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
dot_partial(int n, const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ partials) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    const int chunk = 2 * gridDim.x * blockDim.x;
    T sum = T(0);
    for (int i = blockIdx.x * 2 * blockDim.x + threadIdx.x; i < n; i += chunk) {
        sum += dps::conj(x[i]) * y[i];
        if (i + (int)blockDim.x < n) sum += dps::conj(x[i + blockDim.x]) * y[i + blockDim.x];
    }
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
dot_final(int nparts, const T* __restrict__ partials, T* __restrict__ out) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T sum = T(0);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) sum += partials[i];
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) out[0] = sum;
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
dot_accurate(int n, const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out) {
    DPS_PDL();
    const T s = dps::dot_accurate(n, x, y);
    if (threadIdx.x == 0) out[0] = s;
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
axpy(int n, const T* __restrict__ alpha, T sign, const T* __restrict__ x, T* __restrict__ y) {
    DPS_PDL();
    const T a = sign * alpha[0];
    const int chunk = 2 * gridDim.x * blockDim.x;
    for (int i = blockIdx.x * 2 * blockDim.x + threadIdx.x; i < n; i += chunk) {
        y[i] += a * x[i];
        if (i + (int)blockDim.x < n) y[i + blockDim.x] += a * x[i + blockDim.x];
    }
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
xpay(int n, const T* __restrict__ x, const T* __restrict__ alpha, T* __restrict__ y) {
    DPS_PDL();
    const T a = alpha[0];
    const int chunk = 2 * gridDim.x * blockDim.x;
    for (int i = blockIdx.x * 2 * blockDim.x + threadIdx.x; i < n; i += chunk) {
        y[i] = x[i] + a * y[i];
        if (i + (int)blockDim.x < n) y[i + blockDim.x] = x[i + blockDim.x] + a * y[i + blockDim.x];
    }
}
