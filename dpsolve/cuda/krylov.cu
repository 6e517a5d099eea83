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
//   (z~ = M^H r~, BiCG's left psolve of r~: the preconditioner's stream face, precond.cu)
//   bi_axpy<T>       y += sign * a * x, a = alpha or conj(alpha); skipped when *status != 0
//                    (status may be null: never skipped)                    reads 2n*s, writes n*s
//   bi_xpay<T>       y = x + a * y, a = alpha or conj(alpha)                reads 2n*s, writes n*s
//   bicgstab_p<T>    p = r + beta * (p - omega * v)                         reads 3n*s, writes n*s
//   nrm2_final<T>    out = sqrt(|sum of the DOT partials|): stage 2 of a NRM2 whose stage 1 is
//                    blas1's dot_partial(x, x)                              reads nparts*s
// Scalar kernels (one thread; the breakdown tests one block; `first` is 1 in the recorded first
// iteration, 0 in the others):
//   krylov_start<T>     status = 0, beta = 0, omega = 0                               (set-up)
//   bicg_beta<T>        |rho| < tol or rho non-finite -> -10; beta = first ? 0 : rho / rho_prev;
//                       beta non-finite -> -10
//   bicg_alpha<T>       <p~, q> == 0 -> -11; alpha = rho / <p~, q>; <p~, q> or alpha
//                       non-finite -> -10; rho_prev = rho
//   bicgstab_beta<T>    |rho| < tol or rho non-finite -> -10; (j > 0) |omega| < tol -> -11;
//                       beta = first ? 0 : (rho / rho_prev) * (alpha / omega); non-finite -> -10
//   bicgstab_alpha<T>   <r~, v> == 0 -> -11; alpha = rho / <r~, v>; either non-finite -> -10
//   bicgstab_snorm<T>   sqrt(|<s, s>|) < atol -> status = 2 (converged mid-iteration);
//                       non-finite -> -10 (x holds x + alpha p^, as the reference returns it)
//   bicgstab_omega<T>   omega = <t, s> / <t, t>; any of the three non-finite -> -10; rho_prev = rho
// Before a breakdown test fails on a fast inner product (rho, <p~, q>, <r~, v>, or <t, s> for a
// |omega| below tol), that product is recomputed accurately (dps::dot_accurate) and replaces the
// fast one (dps_confirmed): a breakdown is reported only when it is one in the accurate sum too.
// tol is eps**2 of T (SciPy's rhotol / omegatol). A non-finite scalar stops the solve with -10
// where the reference stops (dpsolve's extension, as CG's: SciPy iterates on NaN to maxiter);
// the host stops on a non-finite tau (host_loop).
#include <dpsolve/common.cuh>

// DPS_MID_STEP (abi.cuh): CONVERGED_MID_STEP of dpsolve/backends/_gpu.py

// Vector updates round each product on its own (dps::mul_rn), as NumPy does in the reference.
// (The dots keep their FMAs: how they round is part of the reduction order anyway.)

template <typename T>
__device__ __forceinline__ bool dps_stopped(const T* __restrict__ status) {
    return status != nullptr && status[0] != T(0);
}

// ---------------------------------------------------------------------------- vector kernels

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bi_axpy(int n, const T* __restrict__ status, const T* __restrict__ alpha, T sign, int conj_alpha,
        const T* __restrict__ x, T* __restrict__ y) {
    DPS_PDL();
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
    DPS_PDL();
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
    DPS_PDL();
    const T b = beta[0], w = omega[0];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = r[i] + dps::mul_rn(b, p[i] - dps::mul_rn(w, v[i]));
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
nrm2_final(int nparts, const T* __restrict__ partials, T* __restrict__ out) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T sum = T(0);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) sum += partials[i];
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) out[0] = sqrt(fabs(sum));
}

// ---------------------------------------------------------------------------- scalar kernels

template <typename T>
__global__ void krylov_start(T* __restrict__ status, T* __restrict__ beta, T* __restrict__ omega) {
    DPS_PDL();
    status[0] = T(0);
    beta[0] = T(0);
    omega[0] = T(0);
}

// The breakdown tests' confirmation, by one block: when `suspect` holds for the fast value in
// val[0], the accurate <a, b> (dps::dot_accurate) replaces it there. Every thread of the block
// must call it; every thread gets the value in use.
template <typename T, typename Suspect>
__device__ __forceinline__ T dps_confirmed(T* __restrict__ val, Suspect suspect, int n,
                                           const T* __restrict__ a, const T* __restrict__ b) {
    const T v = val[0];
    if (!suspect(v)) return v;                           // block-uniform: the same v everywhere
    const T acc = dps::dot_accurate(n, a, b);
    if (threadIdx.x == 0) val[0] = acc;
    return acc;
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_beta(int first, dps::real_t<T> tol, int n, const T* __restrict__ rt, const T* __restrict__ z,
          T* __restrict__ rho, const T* __restrict__ rho_prev, T* __restrict__ beta,
          T* __restrict__ status) {
    DPS_PDL();
    if (status[0] != T(0)) return;
    const T r = dps_confirmed(rho, [&](T v) { return fabs(v) < tol; }, n, rt, z);
    if (threadIdx.x != 0) return;
    if (fabs(r) < tol || !dps::is_finite(r)) {           // rho breakdown, or non-finite
        status[0] = T(-10);
        return;
    }
    const T b = first ? T(0) : r / rho_prev[0];
    if (!dps::is_finite(b)) {
        status[0] = T(-10);
        return;
    }
    beta[0] = b;
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_alpha(int n, const T* __restrict__ pt, const T* __restrict__ q, const T* __restrict__ rho,
           T* __restrict__ rv, T* __restrict__ alpha, T* __restrict__ rho_prev,
           T* __restrict__ status) {
    DPS_PDL();
    if (status[0] != T(0)) return;
    const T d = dps_confirmed(rv, [](T v) { return v == T(0); }, n, pt, q);
    if (threadIdx.x != 0) return;
    if (d == T(0)) {                                     // <p~, A p> == 0
        status[0] = T(-11);
        return;
    }
    const T a = rho[0] / d;
    if (!dps::is_finite(d) || !dps::is_finite(a)) {      // non-finite: x, r, r~ untouched
        status[0] = T(-10);
        return;
    }
    alpha[0] = a;
    rho_prev[0] = rho[0];
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_beta(int first, dps::real_t<T> tol, int n, const T* __restrict__ rt,
              const T* __restrict__ r, T* __restrict__ rho, const T* __restrict__ rho_prev,
              const T* __restrict__ alpha, const T* __restrict__ omega, T* __restrict__ beta,
              T* __restrict__ status) {
    DPS_PDL();
    if (status[0] != T(0)) return;
    const T rh = dps_confirmed(rho, [&](T v) { return fabs(v) < tol; }, n, rt, r);
    if (threadIdx.x != 0) return;
    if (fabs(rh) < tol || !dps::is_finite(rh)) {         // rho breakdown, or non-finite
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
    const T b = (rh / rho_prev[0]) * (alpha[0] / omega[0]);
    if (!dps::is_finite(b)) {
        status[0] = T(-10);
        return;
    }
    beta[0] = b;
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_alpha(int n, const T* __restrict__ rt, const T* __restrict__ v, const T* __restrict__ rho,
               T* __restrict__ rv, T* __restrict__ alpha, T* __restrict__ status) {
    DPS_PDL();
    if (status[0] != T(0)) return;
    const T d = dps_confirmed(rv, [](T x) { return x == T(0); }, n, rt, v);
    if (threadIdx.x != 0) return;
    if (d == T(0)) {                                     // <r~, v> == 0
        status[0] = T(-11);
        return;
    }
    const T a = rho[0] / d;
    if (!dps::is_finite(d) || !dps::is_finite(a)) {      // non-finite: x and r untouched
        status[0] = T(-10);
        return;
    }
    alpha[0] = a;
}

template <typename T>
__global__ void bicgstab_snorm(const T* __restrict__ ss, double atol, T* __restrict__ status) {
    DPS_PDL();
    if (status[0] != T(0)) return;
    const dps::real_t<T> snorm = sqrt(fabs(ss[0]));
    if ((double)snorm < atol) status[0] = T(DPS_MID_STEP);
    else if (!isfinite(snorm)) status[0] = T(-10);       // x holds x + alpha p^ (the reference's)
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_omega(dps::real_t<T> tol, int n, const T* __restrict__ t, const T* __restrict__ s,
               T* __restrict__ ts, const T* __restrict__ tt, const T* __restrict__ rho,
               T* __restrict__ omega, T* __restrict__ rho_prev, T* __restrict__ status) {
    DPS_PDL();
    if (status[0] != T(0)) return;
    const T den = tt[0];
    const T num = dps_confirmed(ts, [&](T v) { return fabs(v / den) < tol; }, n, t, s);
    if (threadIdx.x != 0) return;
    const T w = num / den;
    if (!dps::is_finite(num) || !dps::is_finite(den) || !dps::is_finite(w)) {
        status[0] = T(-10);                              // x holds x + alpha p^ (the reference's)
        return;
    }
    omega[0] = w;
    rho_prev[0] = rho[0];
}
