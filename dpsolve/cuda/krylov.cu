// krylov.cu - BiCG and BiCGStab kernels of the host-driven `cuda` variant: one kernel per operation,
// scalars kept on the device (GpuState.scal), breakdown tests on the device.
//
// The host replays one recorded iteration and reads (tau, status) once per iteration
// (dpsolve/backends/cuda.py). A breakdown sets the status slot to SciPy's code (-10, -11);
// BiCGStab's mid-iteration ||s|| < atol exit sets it to 2 (CONVERGED_MID_STEP in _gpu.py). Every
// scalar kernel is a no-op once status != 0, and the status-guarded vector kernels (bi_axpy with a
// status pointer) are no-ops too, so the launches that follow a breakdown in the same recorded
// iteration leave x where the reference leaves it (dpsolve/reference/bicg.py, bicgstab.py).
//
// Vector kernels (s = sizeof(T), n elements):
//   jacobi_conj<T>   z = conj(D^-1) r                      (BiCG's left psolve of r~) reads 2n*s, writes n*s
//   bi_axpy<T>       y += sign * a * x, a = alpha or conj(alpha); skipped when *status != 0
//                    (status may be null: never skipped)                    reads 2n*s, writes n*s
//   bi_xpay<T>       y = x + a * y, a = alpha or conj(alpha)                reads 2n*s, writes n*s
//   bicgstab_p<T>    p = r + beta * (p - omega * v)                         reads 3n*s, writes n*s
//   nrm2_final<T>    out = sqrt(|sum of the DOT partials|): stage 2 of a NRM2 whose stage 1 is
//                    blas1's dot_partial(x, x)                              reads nparts*s
// Scalar kernels (one thread; `first` is 1 in the recorded first iteration, 0 in the others):
//   krylov_start<T>     status = 0, beta = 0, omega = 0                               (set-up)
//   bicg_beta<T>        |rho| < tol -> -10; beta = first ? 0 : rho / rho_prev
//   bicg_alpha<T>       <p~, q> == 0 -> -11; alpha = rho / <p~, q>; rho_prev = rho
//   bicgstab_beta<T>    |rho| < tol -> -10; (j > 0) |omega| < tol -> -11;
//                       beta = first ? 0 : (rho / rho_prev) * (alpha / omega)
//   bicgstab_alpha<T>   <r~, v> == 0 -> -11; alpha = rho / <r~, v>
//   bicgstab_snorm<T>   sqrt(|<s, s>|) < atol -> status = 2 (converged mid-iteration)
//   bicgstab_omega<T>   omega = <t, s> / <t, t>; rho_prev = rho
// tol is eps**2 of T (SciPy's rhotol / omegatol). Non-finite scalars are not a breakdown: SciPy
// iterates on with them, and so does dpsolve (|NaN| < tol and NaN == 0 are false).
#include <dpsolve/common.cuh>

#define DPS_MID_STEP 2      // CONVERGED_MID_STEP of dpsolve/backends/_gpu.py

// Vector updates round each product on its own (dps::mul_rn), as NumPy does in the reference.
// (The dots keep their FMAs: how they round is part of the reduction order anyway.)

template <typename T>
__device__ __forceinline__ bool dps_stopped(const T* __restrict__ status) {
    return status != nullptr && status[0] != T(0);
}

// ---------------------------------------------------------------------------- vector kernels

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
jacobi_conj(int n, const T* __restrict__ inv_diag, const T* __restrict__ r, T* __restrict__ z) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        z[i] = dps::conj(inv_diag[i]) * r[i];
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bi_axpy(int n, const T* __restrict__ status, const T* __restrict__ alpha, T sign, int conj_alpha,
        const T* __restrict__ x, T* __restrict__ y) {
    if (dps_stopped(status)) return;                     // uniform over the grid
    const T a = sign * (conj_alpha ? dps::conj(alpha[0]) : alpha[0]);
    const int chunk = 2 * gridDim.x * blockDim.x;
    for (int i = blockIdx.x * 2 * blockDim.x + threadIdx.x; i < n; i += chunk) {
        y[i] = y[i] + dps::mul_rn(a, x[i]);
        if (i + (int)blockDim.x < n)
            y[i + blockDim.x] = y[i + blockDim.x] + dps::mul_rn(a, x[i + blockDim.x]);
    }
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bi_xpay(int n, const T* __restrict__ x, const T* __restrict__ alpha, int conj_alpha,
        T* __restrict__ y) {
    const T a = conj_alpha ? dps::conj(alpha[0]) : alpha[0];
    const int chunk = 2 * gridDim.x * blockDim.x;
    for (int i = blockIdx.x * 2 * blockDim.x + threadIdx.x; i < n; i += chunk) {
        y[i] = x[i] + dps::mul_rn(a, y[i]);
        if (i + (int)blockDim.x < n)
            y[i + blockDim.x] = x[i + blockDim.x] + dps::mul_rn(a, y[i + blockDim.x]);
    }
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_p(int n, const T* __restrict__ r, const T* __restrict__ beta, const T* __restrict__ omega,
           const T* __restrict__ v, T* __restrict__ p) {
    const T b = beta[0], w = omega[0];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = r[i] + dps::mul_rn(b, p[i] - dps::mul_rn(w, v[i]));
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
nrm2_final(int nparts, const T* __restrict__ partials, T* __restrict__ out) {
    __shared__ T smem[DPS_WARP];
    T sum = T(0);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) sum += partials[i];
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) out[0] = sqrt(fabs(sum));
}

// ---------------------------------------------------------------------------- scalar kernels

template <typename T>
__global__ void krylov_start(T* __restrict__ status, T* __restrict__ beta, T* __restrict__ omega) {
    status[0] = T(0);
    beta[0] = T(0);
    omega[0] = T(0);
}

template <typename T>
__global__ void bicg_beta(int first, dps::real_t<T> tol, const T* __restrict__ rho, const T* __restrict__ rho_prev,
                          T* __restrict__ beta, T* __restrict__ status) {
    if (status[0] != T(0)) return;
    const T r = rho[0];
    if (fabs(r) < tol) {                                 // rho breakdown
        status[0] = T(-10);
        return;
    }
    beta[0] = first ? T(0) : r / rho_prev[0];
}

template <typename T>
__global__ void bicg_alpha(const T* __restrict__ rho, const T* __restrict__ rv, T* __restrict__ alpha,
                           T* __restrict__ rho_prev, T* __restrict__ status) {
    if (status[0] != T(0)) return;
    if (rv[0] == T(0)) {                                 // <p~, A p> == 0
        status[0] = T(-11);
        return;
    }
    alpha[0] = rho[0] / rv[0];
    rho_prev[0] = rho[0];
}

template <typename T>
__global__ void bicgstab_beta(int first, dps::real_t<T> tol, const T* __restrict__ rho,
                              const T* __restrict__ rho_prev, const T* __restrict__ alpha,
                              const T* __restrict__ omega, T* __restrict__ beta,
                              T* __restrict__ status) {
    if (status[0] != T(0)) return;
    const T r = rho[0];
    if (fabs(r) < tol) {                                 // rho breakdown
        status[0] = T(-10);
        return;
    }
    if (first) {
        beta[0] = T(0);
        return;
    }
    if (fabs(omega[0]) < tol) {                          // omega breakdown (previous iteration's)
        status[0] = T(-11);
        return;
    }
    beta[0] = (r / rho_prev[0]) * (alpha[0] / omega[0]);
}

template <typename T>
__global__ void bicgstab_alpha(const T* __restrict__ rho, const T* __restrict__ rv,
                               T* __restrict__ alpha, T* __restrict__ status) {
    if (status[0] != T(0)) return;
    if (rv[0] == T(0)) {                                 // <r~, v> == 0
        status[0] = T(-11);
        return;
    }
    alpha[0] = rho[0] / rv[0];
}

template <typename T>
__global__ void bicgstab_snorm(const T* __restrict__ ss, double atol, T* __restrict__ status) {
    if (status[0] != T(0)) return;
    const dps::real_t<T> snorm = sqrt(fabs(ss[0]));
    if ((double)snorm < atol) status[0] = T(DPS_MID_STEP);
}

template <typename T>
__global__ void bicgstab_omega(const T* __restrict__ ts, const T* __restrict__ tt,
                               const T* __restrict__ rho, T* __restrict__ omega,
                               T* __restrict__ rho_prev, T* __restrict__ status) {
    if (status[0] != T(0)) return;
    omega[0] = ts[0] / tt[0];
    rho_prev[0] = rho[0];
}
