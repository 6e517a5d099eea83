// precond.cu - the stream face of a pointwise preconditioner (dpsolve/precond): z = M r or
// z = M^H r as one kernel on the solve's stream, for the loops that do not fuse it (variants
// cublas and cuda, and every set-up). The arithmetic is precond.cuh's, the one the fused kernels
// inline, so the fused and unfused paths compute the same bits.
//
//   pointwise_apply<T>           z = M r      (Jacobi: reads 2n, writes n)
//   pointwise_apply_adjoint<T>   z = M^H r    (BiCG's shadow system)
//   inverse_diagonal<T>          D^-1 of a CSR matrix with sorted rows, and the count of rows
//                                where it is not safe to keep (Jacobi's bind on the device:
//                                precond/jacobi.py; reads A's rows' diagonals, writes n)
#include <dpsolve/common.cuh>
#include <dpsolve/precond.cuh>

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
pointwise_apply(int n, const dyn::PrecondArgs<T> pc, const T* __restrict__ r, T* __restrict__ z) {
    DPS_PDL();
    const dps::Pointwise<T> m(pc);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        z[i] = m.apply(i, r[i]);
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
pointwise_apply_adjoint(int n, const dyn::PrecondArgs<T> pc, const T* __restrict__ r,
                        T* __restrict__ z) {
    DPS_PDL();
    const dps::Pointwise<T> m(pc);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        z[i] = m.apply_adjoint(i, r[i]);
}

// inv_i = 1 / a_ii (a row that stores no a_ii: 1 / 0), IEEE-rounded in T, and into *bad the
// count of rows whose inv_i is not finite or is 0. A real quotient here has the bits of NumPy's
// (1.0 / d).astype(T) wherever it is neither: CuPy compiles with -ftz=true, so a float32 a_ii
// below 2^-126 reads as 0 (inv_i = Inf) and a quotient below 2^-126 is written as 0, and those
// rows -- with every zero, NaN or Inf diagonal and every reciprocal past T's range -- are
// counted, and the caller takes the host's path for them (its answer or its refusal's words).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
inverse_diagonal(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                 const T* __restrict__ data, T* __restrict__ inv, int* __restrict__ bad) {
    DPS_PDL();
    int mine = 0;
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n;
         row += gridDim.x * blockDim.x) {
        const int at = dps::find_sorted(indices, indptr[row], indptr[row + 1], row);
        const T q = T(1) / (at < 0 ? T(0) : data[at]);
        inv[row] = q;
        mine += !dps::is_finite(q) || q == T(0);
    }
    mine = __reduce_add_sync(0xffffffffu, mine);
    if (threadIdx.x % DPS_WARP == 0 && mine) atomicAdd(bad, mine);
}
