// batch.cu - many small systems of one sparsity pattern in one launch (dpsolve.batch, issue 31):
// a block per system (grid-stride over the systems). The pattern (indptr, indices) is shared by
// every system and read through L1 / L2; each system has its own values (nb x nnz, row-major), b
// and x (nb x n). The block keeps its vectors x, r, p, q in dynamic shared memory when 4 n values
// fit (the host sizes it), else in 4 n values of global scratch a block (`scratch` given); the
// host's report says which path ran. batch_bicgstab (below) likewise, with eight vectors.
//
//   batch_cg<T>   dpsolve/batch/reference.py's cg for each system: SciPy's CG (Jacobi: z = D^-1 r
//                 with D^-1 from `dinv`, nb x n, or none), its own tolerance tol_i, dpsolve's
//                 non-finite stop (-10). When the recurrence says converged, the true residual
//                 ||b - A x|| decides: a system whose true residual misses tol_i restarts from its
//                 x with the iterations it has left, as dpsolve.batch's host loop does; one that
//                 cannot (no iterations left, or none made) gets info = maxiter.
//
// info on entry: 0 for a system to solve; any other value (the host's own checks: -20 a NaN or
// Inf in its values or b, -21 a zero diagonal with Jacobi; b = 0 is solved by x = 0 there) skips
// the system and is kept. On exit, for every solved system: X its x, info its code (0, maxiter,
// -10), its its iterations, res its true residual norm. The inner products are block reductions
// in the order of dps::block_sum: a system's iterates match its single solve to rounding.
#include <dpsolve/common.cuh>

namespace batch {

// q = A p over one system's values v, a thread a row (p and q: shared or global memory)
template <typename T>
__device__ __forceinline__ void spmv(int n, const int* __restrict__ indptr,
                                     const int* __restrict__ indices, const T* __restrict__ v,
                                     const T* p, T* q) {
    for (int row = threadIdx.x; row < n; row += blockDim.x) {
        T s = T(0);
        const int end = indptr[row + 1];
        for (int k = indptr[row]; k < end; ++k) s += v[k] * p[indices[k]];
        q[row] = s;
    }
}

// the block's sum of v, on every thread (smem: 32 values of V)
template <typename V>
__device__ __forceinline__ V all_sum(V v, V* smem) {
    v = dps::block_sum(v, smem);                 // thread 0 has it; ends with a barrier
    if (threadIdx.x == 0) smem[0] = v;
    __syncthreads();
    v = smem[0];
    __syncthreads();                             // smem free again
    return v;
}

// The systems of this block (grid-stride over them, uniform per block), each to its own
// tolerance: x loaded from X, then runs of `run` -- the method from the current x with the
// iterations it has left, returning stop.cuh's Stop -- until the true residual ||b - A x|| (q:
// scratch) decides. A convergence it does not confirm restarts from x while iterations are left
// and the run made some, else the system gets info = maxiter (dpsolve.batch's host rule). X,
// info, its and res are written for every system solved; one preset with info != 0 is skipped.
// __noinline__: inlined into batch_bicgstab, ptxas (CUDA 13.0, -O1 and above) made spmv read p^
// before other threads' stores to it were seen -- wrong results from the first iteration, with a
// single warp too; -Xptxas -O0 or this call boundary gives the reference's iterates. One call a
// system costs nothing against its iterations.
template <typename T, typename Run>
__device__ __noinline__ void for_systems(int nb, int n, const int* __restrict__ indptr,
                                            const int* __restrict__ indices,
                                            const T* __restrict__ values, long long nnz,
                                            const T* __restrict__ B, T* __restrict__ X,
                                            const T* __restrict__ dinv,
                                            const double* __restrict__ tol, int maxiter,
                                            int* __restrict__ info, int* __restrict__ its,
                                            double* __restrict__ res, T* x, T* q,
                                            double* s_real, Run run) {
    for (int sys = blockIdx.x; sys < nb; sys += gridDim.x) {       // uniform per block
        if (info[sys] != 0) continue;
        const T* a = values + (size_t)sys * nnz;
        const T* b = B + (size_t)sys * n;
        const T* d = dinv != nullptr ? dinv + (size_t)sys * n : nullptr;
        const double atol = tol[sys];
        for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = X[(size_t)sys * n + i];
        __syncthreads();
        int code = maxiter, total = 0, budget = maxiter;
        double true_res = 0.0;
        while (true) {
            const dps::Stop h = run(a, b, d, atol, budget);
            code = h.info;
            total += h.its;
            budget -= h.its;
            spmv(n, indptr, indices, a, x, q);
            __syncthreads();
            double rr = 0.0;
            for (int i = threadIdx.x; i < n; i += blockDim.x) rr += (double)dps::abs2(b[i] - q[i]);
            true_res = sqrt(all_sum(rr, s_real));
            if (code != 0 || !(true_res > atol)) break;
            if (budget <= 0 || h.its == 0) { code = maxiter; break; }
        }
        if (code > 0) code = maxiter;
        for (int i = threadIdx.x; i < n; i += blockDim.x) X[(size_t)sys * n + i] = x[i];
        if (threadIdx.x == 0) {
            info[sys] = code;
            its[sys] = total;
            res[sys] = true_res;
        }
        __syncthreads();
    }
}

}  // namespace batch

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
batch_cg(int nb, int n, const int* __restrict__ indptr, const int* __restrict__ indices,
         const T* __restrict__ values, long long nnz, const T* __restrict__ B, T* __restrict__ X,
         const T* __restrict__ dinv, const double* __restrict__ tol, int maxiter,
         int* __restrict__ info, int* __restrict__ its, double* __restrict__ res,
         T* __restrict__ scratch) {
    __shared__ T s_sum[DPS_WARP];
    __shared__ double s_real[DPS_WARP];
    extern __shared__ __align__(16) unsigned char s_dyn[];
    T* w = scratch != nullptr ? scratch + (size_t)blockIdx.x * 4 * n : reinterpret_cast<T*>(s_dyn);
    T* x = w;
    T* r = w + n;
    T* p = w + 2 * (size_t)n;
    T* q = w + 3 * (size_t)n;
    batch::for_systems(nb, n, indptr, indices, values, nnz, B, X, dinv, tol, maxiter, info,
                       its, res, x, q, s_real,
                       [&](const T* v, const T* b, const T* d, double atol, int budget) {
        // r = b - A x, z = D^-1 r, p = z, sigma = <r, z>, tau = ||r||
        batch::spmv(n, indptr, indices, v, x, q);
        __syncthreads();
        T part = T(0);
        double rr = 0.0;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const T ri = b[i] - q[i];
            const T zi = d != nullptr ? d[i] * ri : ri;
            r[i] = ri;
            p[i] = zi;
            part += dps::conj(ri) * zi;
            rr += (double)dps::abs2(ri);
        }
        T sigma = batch::all_sum(part, s_sum);
        double tau = sqrt(batch::all_sum(rr, s_real));
        // the loop head is stop.cuh's (the budget this run has left as its maxiter)
        dps::Stop h = dps::head_test(0, tau, atol, budget);
        while (h.go) {
            const int j = h.its;
            batch::spmv(n, indptr, indices, v, p, q);
            __syncthreads();
            part = T(0);
            for (int i = threadIdx.x; i < n; i += blockDim.x) part += dps::conj(p[i]) * q[i];
            const T alpha = sigma / batch::all_sum(part, s_sum);
            if (!dps::is_finite(alpha)) { h = {DPS_BREAKDOWN, j, false}; break; }
            part = T(0);
            rr = 0.0;
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                x[i] += dps::mul_rn(alpha, p[i]);
                const T ri = r[i] - dps::mul_rn(alpha, q[i]);
                const T zi = d != nullptr ? d[i] * ri : ri;
                r[i] = ri;
                part += dps::conj(ri) * zi;
                rr += (double)dps::abs2(ri);
            }
            const T zeta = batch::all_sum(part, s_sum);
            if (d != nullptr) rr = batch::all_sum(rr, s_real);
            const T beta = zeta / sigma;
            sigma = zeta;
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const T zi = d != nullptr ? d[i] * r[i] : r[i];
                p[i] = zi + dps::mul_rn(beta, p[i]);
            }
            __syncthreads();
            tau = d != nullptr ? sqrt(rr) : sqrt((double)fabs(zeta));   // fabs: ADL, complex
            h = dps::head_test(j + 1, tau, atol, budget);
        }
        return h;
    });
}

// batch_bicgstab<T>: dpsolve/batch/reference.py's bicgstab for each system (SciPy's BiCGStab,
// right-preconditioned by D^-1 or none; -10 a rho breakdown or a non-finite scalar, -11 an
// omega or <r~, v> breakdown, each confirmed with the accurate inner product before it is
// reported, as every dpsolve variant does), the same true-residual restart as batch_cg. `bd` is
// the breakdown tolerance (reference._util.breakdown_tol: eps^2 of the working precision). Eight
// vectors a block: x, r (s in place), r~, p, v, t, p^ and s^.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
batch_bicgstab(int nb, int n, const int* __restrict__ indptr, const int* __restrict__ indices,
               const T* __restrict__ values, long long nnz, const T* __restrict__ B,
               T* __restrict__ X, const T* __restrict__ dinv, const double* __restrict__ tol,
               int maxiter, double bd, int* __restrict__ info, int* __restrict__ its,
               double* __restrict__ res, T* __restrict__ scratch) {
    __shared__ T s_sum[DPS_WARP];
    __shared__ double s_real[DPS_WARP];
    extern __shared__ __align__(16) unsigned char s_dyn[];
    T* w = scratch != nullptr ? scratch + (size_t)blockIdx.x * 8 * n : reinterpret_cast<T*>(s_dyn);
    T* x = w;
    T* r = w + n;
    T* rt = w + 2 * (size_t)n;
    T* p = w + 3 * (size_t)n;
    T* v = w + 4 * (size_t)n;
    T* t = w + 5 * (size_t)n;
    T* ph = w + 6 * (size_t)n;
    T* sh = w + 7 * (size_t)n;
    batch::for_systems(nb, n, indptr, indices, values, nnz, B, X, dinv, tol, maxiter, info,
                       its, res, x, t, s_real,
                       [&](const T* a, const T* b, const T* d, double atol, int budget) {
        batch::spmv(n, indptr, indices, a, x, t);                   // t = A x (a temporary)
        __syncthreads();
        double rr = 0.0;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const T ri = b[i] - t[i];
            r[i] = ri;
            rt[i] = ri;
            rr += (double)dps::abs2(ri);
        }
        double tau = sqrt(batch::all_sum(rr, s_real));
        T rho_prev = T(1), omega = T(1), alpha = T(1);
        dps::Stop h = dps::head_test(0, tau, atol, budget);
        while (h.go) {
            const int j = h.its;
            T part = T(0);
            for (int i = threadIdx.x; i < n; i += blockDim.x) part += dps::conj(rt[i]) * r[i];
            T rho = batch::all_sum(part, s_sum);
            rho = dps::confirm_dot<T, false>(fabs(rho) < bd, rho, n, rt, r);
            if (fabs(rho) < bd || !dps::is_finite(rho)) {
                h = {DPS_BREAKDOWN, j, false};
                break;
            }
            if (j > 0) {
                if (fabs(omega) < bd) { h = {-11, j, false}; break; }
                const T beta = (rho / rho_prev) * (alpha / omega);
                if (!dps::is_finite(beta)) { h = {DPS_BREAKDOWN, j, false}; break; }
                for (int i = threadIdx.x; i < n; i += blockDim.x)
                    p[i] = r[i] + dps::mul_rn(beta, p[i] - dps::mul_rn(omega, v[i]));
            } else {
                for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = r[i];
            }
            for (int i = threadIdx.x; i < n; i += blockDim.x)
                ph[i] = d != nullptr ? d[i] * p[i] : p[i];
            __syncthreads();
            batch::spmv(n, indptr, indices, a, ph, v);
            __syncthreads();
            part = T(0);
            for (int i = threadIdx.x; i < n; i += blockDim.x) part += dps::conj(rt[i]) * v[i];
            T rv = batch::all_sum(part, s_sum);
            rv = dps::confirm_dot<T, false>(rv == T(0), rv, n, rt, v);
            if (rv == T(0)) { h = {-11, j, false}; break; }
            const T alpha_new = rho / rv;
            if (!dps::is_finite(rv) || !dps::is_finite(alpha_new)) {
                h = {DPS_BREAKDOWN, j, false};
                break;
            }
            alpha = alpha_new;
            rr = 0.0;
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const T si = r[i] - dps::mul_rn(alpha, v[i]);             // s, in r's place
                r[i] = si;
                rr += (double)dps::abs2(si);
            }
            const double snorm = sqrt(batch::all_sum(rr, s_real));
            if (snorm < atol) {                                   // x = x + alpha p^, done
                for (int i = threadIdx.x; i < n; i += blockDim.x)
                    x[i] += dps::mul_rn(alpha, ph[i]);
                __syncthreads();
                h = {0, j + 1, false};
                break;
            }
            for (int i = threadIdx.x; i < n; i += blockDim.x)
                sh[i] = d != nullptr ? d[i] * r[i] : r[i];
            __syncthreads();
            batch::spmv(n, indptr, indices, a, sh, t);
            __syncthreads();
            T pts = T(0), ptt = T(0);
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                pts += dps::conj(t[i]) * r[i];
                ptt += dps::conj(t[i]) * t[i];
            }
            T ts = batch::all_sum(pts, s_sum);
            const T tt = batch::all_sum(ptt, s_sum);
            ts = dps::confirm_dot<T, false>(fabs(ts / tt) < bd, ts, n, t, r);
            const T om = ts / tt;
            for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] += dps::mul_rn(alpha, ph[i]);
            if (!isfinite(snorm) || !dps::is_finite(ts) || !dps::is_finite(tt) ||
                !dps::is_finite(om)) {
                __syncthreads();
                h = {DPS_BREAKDOWN, j, false};
                break;
            }
            omega = om;
            rr = 0.0;
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                x[i] += dps::mul_rn(omega, sh[i]);
                const T ri = r[i] - dps::mul_rn(omega, t[i]);
                r[i] = ri;
                rr += (double)dps::abs2(ri);
            }
            rho_prev = rho;
            tau = sqrt(batch::all_sum(rr, s_real));
            h = dps::head_test(j + 1, tau, atol, budget);
        }
        return h;
    });
}

// ---------------------------------------------------------------------------------------------
// batch_cg_rows<T, NZ>: batch_cg for systems of n <= blockDim rows whose rows hold at most NZ
// entries (the host picks NZ = 8, 16 or 32 and a block of n threads rounded up to a warp): a row a
// thread, the row's NZ values and columns in registers for all the system's iterations (read from
// global memory once, where batch_cg reads them every iteration), x, r and z in registers, only p
// in shared memory (n values). An iteration has three barriers: one for each of its two block
// sums (warp sums into a slot a warp, then every warp sums the slots in the same order, so every
// thread holds the same bits and takes the same branches) and one after p is stored. The same
// algorithm, tests and codes as batch_cg, its sums in another order.
namespace batch {

template <typename T>
__device__ __forceinline__ T lane0(T v) { return __shfl_sync(DPS_FULL_MASK, v, 0); }
template <typename R>
__device__ __forceinline__ dps::complex<R> lane0(dps::complex<R> v) {
    return {__shfl_sync(DPS_FULL_MASK, v.re, 0), __shfl_sync(DPS_FULL_MASK, v.im, 0)};
}

// the block's sum of v on every thread, one barrier; `slots` (32 values) must not be written
// again before every thread has passed another barrier
template <typename V>
__device__ __forceinline__ V sum_everywhere(V v, V* slots) {
    const int lane = threadIdx.x % DPS_WARP, warp = threadIdx.x / DPS_WARP;
    v = dps::warp_sum(v);
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    V s = lane < (int)(blockDim.x / DPS_WARP) ? slots[lane] : V(0);
    return lane0(dps::warp_sum(s));
}

// two sums under one barrier
template <typename V, typename W>
__device__ __forceinline__ void sum2_everywhere(V& v, W& w, V* vslots, W* wslots) {
    const int lane = threadIdx.x % DPS_WARP, warp = threadIdx.x / DPS_WARP;
    v = dps::warp_sum(v);
    w = dps::warp_sum(w);
    if (lane == 0) {
        vslots[warp] = v;
        wslots[warp] = w;
    }
    __syncthreads();
    const bool in = lane < (int)(blockDim.x / DPS_WARP);
    v = lane0(dps::warp_sum(in ? vslots[lane] : V(0)));
    w = lane0(dps::warp_sum(in ? wslots[lane] : W(0)));
}

}  // namespace batch

template <typename T, int NZ>
__global__ void __launch_bounds__(NZ <= 8 ? 1024 : NZ <= 16 ? 512 : 256)
batch_cg_rows(int nb, int n, const int* __restrict__ indptr, const int* __restrict__ indices,
              const T* __restrict__ values, long long nnz, const T* __restrict__ B,
              T* __restrict__ X, const T* __restrict__ dinv, const double* __restrict__ tol,
              int maxiter, int* __restrict__ info, int* __restrict__ its,
              double* __restrict__ res) {
    extern __shared__ __align__(16) unsigned char s_dyn[];
    T* sp = reinterpret_cast<T*>(s_dyn);          // p, or x where A x is needed: n values
    __shared__ T s_pq[DPS_WARP], s_rz[DPS_WARP];
    __shared__ double s_rr[DPS_WARP], s_true[DPS_WARP];
    const int row = threadIdx.x;
    const bool live = row < n;
    const bool pre = dinv != nullptr;
    int start = 0, len = 0;
    if (live) {
        start = indptr[row];
        len = indptr[row + 1] - start;
    }
    int col[NZ];
#pragma unroll
    for (int k = 0; k < NZ; ++k) col[k] = k < len ? indices[start + k] : 0;
    for (int sys = blockIdx.x; sys < nb; sys += gridDim.x) {       // uniform per block
        if (info[sys] != 0) continue;
        T a[NZ];
        const T* v = values + (size_t)sys * nnz + start;
#pragma unroll
        for (int k = 0; k < NZ; ++k) a[k] = k < len ? v[k] : T(0);
        // this row of A w, w in shared memory (batch::spmv's order of the sum)
        auto row_times = [&](const T* w) {
            T s = T(0);
#pragma unroll
            for (int k = 0; k < NZ; ++k)
                if (k < len) s += a[k] * w[col[k]];
            return s;
        };
        const size_t at = (size_t)sys * n + row;
        const T bi = live ? B[at] : T(0);
        const T di = pre && live ? dinv[at] : T(1);
        T xi = live ? X[at] : T(0);
        const double atol = tol[sys];
        int code = maxiter, total = 0, budget = maxiter;
        double true_res = 0.0;
        while (true) {
            // r = b - A x, z = D^-1 r, p = z, sigma = <r, z>, tau = ||r||
            if (live) sp[row] = xi;
            __syncthreads();
            T ri = live ? bi - row_times(sp) : T(0);
            T zi = pre ? di * ri : ri;
            T pi = zi;
            T sigma = dps::conj(ri) * zi;
            double rr = (double)dps::abs2(ri);
            batch::sum2_everywhere(sigma, rr, s_rz, s_rr);    // its barrier: sp read by all
            if (live) sp[row] = pi;
            __syncthreads();
            dps::Stop h = dps::head_test(0, sqrt(rr), atol, budget);
            while (h.go) {
                const int j = h.its;
                const T qi = live ? row_times(sp) : T(0);
                const T alpha = sigma / batch::sum_everywhere(dps::conj(pi) * qi, s_pq);
                if (!dps::is_finite(alpha)) { h = {DPS_BREAKDOWN, j, false}; break; }
                xi += dps::mul_rn(alpha, pi);
                ri = ri - dps::mul_rn(alpha, qi);
                zi = pre ? di * ri : ri;
                T zeta = dps::conj(ri) * zi;
                if (pre) {
                    rr = (double)dps::abs2(ri);
                    batch::sum2_everywhere(zeta, rr, s_rz, s_rr);
                } else {
                    zeta = batch::sum_everywhere(zeta, s_rz);
                }
                const T beta = zeta / sigma;
                sigma = zeta;
                pi = zi + dps::mul_rn(beta, pi);
                if (live) sp[row] = pi;                        // sp's readers passed 2 barriers
                __syncthreads();
                const double tau = pre ? sqrt(rr) : sqrt((double)fabs(zeta));   // fabs: ADL
                h = dps::head_test(j + 1, tau, atol, budget);
            }
            code = h.info;
            total += h.its;
            budget -= h.its;
            // the true residual ||b - A x|| decides, as in batch::for_systems
            if (live) sp[row] = xi;
            __syncthreads();
            const double e = live ? (double)dps::abs2(bi - row_times(sp)) : 0.0;
            true_res = sqrt(batch::sum_everywhere(e, s_true));
            if (code != 0 || !(true_res > atol)) break;
            if (budget <= 0 || h.its == 0) { code = maxiter; break; }
        }
        if (code > 0) code = maxiter;
        if (live) X[at] = xi;
        if (threadIdx.x == 0) {
            info[sys] = code;
            its[sys] = total;
            res[sys] = true_res;
        }
    }
}
