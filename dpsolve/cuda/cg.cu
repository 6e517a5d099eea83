// cg.cu - CG-specific kernels of the host-driven `cuda` variant: the scalar steps (one thread each,
// scalars stay on the device). The vector steps are blas1.cu's DOT, AXPY and XPAY, spmv.cu's
// SpMV and the preconditioner's stream face (precond.cu for Jacobi), one kernel per operation.
//
//   cg_start<T>   sigma = <r,z>, tau = sqrt(<r,r>), status = 0             (set-up)
//   cg_alpha<T>   alpha = sigma / <p,v>; a non-finite alpha sets status = DPS_BREAKDOWN (-10,
//                 as every method's step) and alpha = 0, so the AXPYs that follow leave x and r
//                 untouched                                               (O2, scalar part)
//   cg_beta<T>    beta = zeta / sigma; sigma = zeta; tau = sqrt(<r,r>)     (O6, O7, O9)
#include <dpsolve/common.cuh>

template <typename T>
__global__ void cg_start(const T* __restrict__ rz, const T* __restrict__ rr, T* __restrict__ sigma,
                         T* __restrict__ tau, T* __restrict__ status) {
    sigma[0] = rz[0];
    tau[0] = sqrt(fabs(rr[0]));
    status[0] = T(0);
}

template <typename T>
__global__ void cg_alpha(const T* __restrict__ sigma, const T* __restrict__ pv,
                         T* __restrict__ alpha, T* __restrict__ status) {
    T a = sigma[0] / pv[0];
    if (!isfinite(a)) {
        status[0] = T(DPS_BREAKDOWN);
        a = T(0);
    }
    alpha[0] = a;
}

template <typename T>
__global__ void cg_beta(const T* __restrict__ zeta, const T* __restrict__ rr, T* __restrict__ sigma,
                        T* __restrict__ beta, T* __restrict__ tau) {
    beta[0] = zeta[0] / sigma[0];
    sigma[0] = zeta[0];
    tau[0] = sqrt(fabs(rr[0]));
}
