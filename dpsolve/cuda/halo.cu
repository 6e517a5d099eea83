// halo.cu - the two kernels a distributed SpMV adds around the local product
// (dpsolve/distributed/gpu.py): y = A_local x + A_remote ghosts, PETSc's MATMPIAIJ split.
//
// halo_pack<T>     send[i] = x[idx[i]]: the values neighbours need, packed for the transport.
//                  Reads m*(4 + s) (gathered), writes m*s bytes.
// halo_add<T>      y[rows[i]] += sum_k data[k] ghost[indices[k]] over the m rows of the remote
//                  part that have entries (compressed rows: rows without ghost columns cost
//                  nothing). One thread per row. Reads the remote part and the ghosts once.
#include <dpsolve/common.cuh>

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
halo_pack(int m, const int* __restrict__ idx, const T* __restrict__ x, T* __restrict__ send) {
    const int i = blockIdx.x * DPS_BLOCK + threadIdx.x;
    if (i < m) send[i] = x[idx[i]];
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
halo_add(int m, const int* __restrict__ rows, const int* __restrict__ indptr,
         const int* __restrict__ indices, const T* __restrict__ data,
         const T* __restrict__ ghost, T* __restrict__ y) {
    const int i = blockIdx.x * DPS_BLOCK + threadIdx.x;
    if (i >= m) return;
    T sum = T(0);
    for (int k = indptr[i]; k < indptr[i + 1]; ++k) sum += data[k] * ghost[indices[k]];
    y[rows[i]] += sum;
}
