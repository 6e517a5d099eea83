// precond.cu - the stream face of a pointwise preconditioner (dpsolve/precond): z = M r or
// z = M^H r as one kernel on the solve's stream, for the loops that do not fuse it (variants
// cublas and cuda, and every set-up). The arithmetic is precond.cuh's, the one the fused kernels
// inline, so the fused and unfused paths compute the same bits.
//
//   pointwise_apply<T>           z = M r      (Jacobi: reads 2n, writes n)
//   pointwise_apply_adjoint<T>   z = M^H r    (BiCG's shadow system)
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
