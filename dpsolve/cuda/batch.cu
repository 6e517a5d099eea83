// batch.cu - many small systems of one sparsity pattern in one launch (dpsolve.batch, issue 31):
// a block per system (grid-stride over the systems). The pattern (indptr, indices) is shared by
// every system and read through L1 / L2; each system has its own values (nb x nnz, row-major; the
// `nnz` argument is their stride, 0 where every system has one matrix's values: dpsolve._block's
// right-hand sides), b and x (nb x n). The block keeps its vectors x, r, p, q in dynamic shared
// memory when 4 n values fit (the host sizes it), else in 4 n values of global scratch a block
// (`scratch` given); the host's report says which path ran. batch_bicgstab (below) likewise,
// with eight vectors; batch_cg_rows (below) holds each system in registers, and batch_cg_redo
// (last) solves again as A_i / 2^f_i a system batch_cg_rows, which takes A_i as it is, did not.
//
//   batch_cg<T>   dpsolve/batch/reference.py's cg for each system: SciPy's CG (Jacobi: z = D^-1 r
//                 with D^-1 from `dinv`, nb x n, or none), its own tolerance tol_i, dpsolve's
//                 non-finite stop (-10). When the recurrence says converged, the true residual
//                 ||b - A x|| decides: a system whose true residual misses tol_i restarts from its
//                 x with the iterations it has left, as dpsolve.batch's host loop does; one that
//                 cannot (no iterations left, or none made) gets info = maxiter.
//
// info on entry: 0 for a system to solve; any other value (the host's own checks: -20 a NaN or
// Inf in its values or b, -21 a diagonal Jacobi cannot take; b = 0 is solved by x = 0 there) skips
// the system and is kept. On exit, for every solved system: X its x, info its code (0, maxiter,
// -10), its its iterations, res its true residual norm. `exps` (nullptr: none): system i was
// scaled by the host's checks to b / 2^e_i (dpsolve.batch.row_exponents), and `fexps` (nullptr:
// none) to A_i / 2^f_i (batch_a_checks, below: its values scaled as they are read); its x is
// written times 2^(e_i - f_i) and its residual times 2^e_i (batch::round_x). batch_cg's inner
// products are block sums on one barrier each (dps::sum_everywhere, common.cuh: a 64^2 block of
// right-hand sides runs its columns as 64 blocks of 1,024 threads, where the barriers count);
// batch_bicgstab's are all_sum's (the order of dps::block_sum). A system's iterates match its
// single solve to rounding.
#include <dpsolve/common.cuh>

namespace batch {

// q = A p over one system's values v, a thread a row (p and q: shared or global memory). A row's
// entries go 8 at a time (dps::gather_dot): their index and value loads (L1 / L2: the pattern,
// and the values where the systems share them) together, then their p loads, so a row costs one
// round of load latency per 8 entries (64 blocks of 1,024 threads on a 64^2 block of right-hand
// sides: the SpMV was a chain of dependent L2 loads). The sum in the entries' order, as before.
template <typename T>
__device__ __forceinline__ void spmv(int n, const int* __restrict__ indptr,
                                     const int* __restrict__ indices, const T* __restrict__ v,
                                     const T* p, T* q) {
    for (int row = threadIdx.x; row < n; row += blockDim.x)
        q[row] = dps::gather_dot<8>(indptr[row], indptr[row + 1], indices, v,
                                    [&](int c) { return p[c]; });
}

// v * 2^k, exactly, where the result is known to be normal (A's values scaled by matrix_shift's
// f: every nonzero value lands at 2^-W or more), k = h + (k - h) as two powers of two (``pow2s``,
// each in range where 2^k is not: a double's k reaches 1074): a float read through its bits (its
// subnormals too) and scaled in double, a double by two products
struct Pow2s { double p, q; };
__device__ __forceinline__ Pow2s pow2s(int k) { return {ldexp(1.0, k / 2), ldexp(1.0, k - k / 2)}; }
__device__ __forceinline__ float scaled_normal(float v, Pow2s k) {
    return (float)(dps::wide(v) * (k.p * k.q));
}
__device__ __forceinline__ double scaled_normal(double v, Pow2s k) { return v * k.p * k.q; }
template <typename R>
__device__ __forceinline__ dps::complex<R> scaled_normal(dps::complex<R> v, Pow2s k) {
    return {scaled_normal(v.re, k), scaled_normal(v.im, k)};
}

// One system's values as batch_cg and batch_bicgstab solve them: A_i / 2^f (f = 0: A_i as it is;
// dpsolve.batch.matrix_shifts' rule, found by batch_a_checks)
template <typename T> struct Scaled {
    const T* v;
    int f;
};
// q = (A / 2^f) p: spmv where f = 0 (a uniform branch); else each value scaled as it is read,
// the products summed in spmv's order (gather_dot's: the entries' order), so that the iterates
// are the scale-1 system's times powers of two, bit for bit
template <typename T>
__device__ __forceinline__ void spmv(int n, const int* __restrict__ indptr,
                                     const int* __restrict__ indices, Scaled<T> a, const T* p,
                                     T* q) {
    if (a.f == 0) {
        spmv(n, indptr, indices, a.v, p, q);
        return;
    }
    const Pow2s k = pow2s(-a.f);
    for (int row = threadIdx.x; row < n; row += blockDim.x) {
        T sum = T(0);
        for (int j = indptr[row]; j < indptr[row + 1]; ++j)
            sum += scaled_normal(a.v[j], k) * p[indices[j]];
        q[row] = sum;
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

constexpr int BAD_INPUT = -20, ZERO_DIAGONAL = -21;        // dpsolve.batch's codes (tested)

// Whether Jacobi cannot take the diagonal entry v (ZERO_DIAGONAL): 0, or 1 / v past the largest
// float. For a real v one compare, as cheap as v == 0's (a test of 1 / v in batch_cg_rows's load
// loop made ptxas spill): 1 / v rounds to Inf exactly where |v| <= 2^-128 (float) or 2^-1024
// (double); NaN is caught by the finite checks first. A float is read through its bits
// (dps::magnitude: CuPy's -ftz=true reads a float below 2^-126 as 0, and refused a subnormal v
// in (2^-128, 2^-126) whose reciprocal the host, and the single solves, take). A complex v's
// test reads `inv`, reciprocal(v) below, computed once for both
__device__ __forceinline__ bool no_reciprocal(float v, float) {
    return !(dps::magnitude(v) > 0x1p-128);
}
__device__ __forceinline__ bool no_reciprocal(double v, double) { return !(fabs(v) > 0x1p-1024); }
template <typename R>
__device__ __forceinline__ bool no_reciprocal(dps::complex<R>, dps::complex<R> inv) {
    return !dps::is_finite(inv);
}

// 1 / v, D^-1's entry, where no_reciprocal(v) is false: NumPy's, to the bit. A float through
// double (dps::wide, dps::narrow: -ftz=true would read a subnormal v as 0, and write a result
// below 2^-126, of a v past 2^126, as 0; a float's quotient rounded twice through double is the
// float's correctly rounded one)
__device__ __forceinline__ float reciprocal(float v) { return dps::narrow(1.0 / dps::wide(v)); }
__device__ __forceinline__ double reciprocal(double v) { return 1.0 / v; }
template <typename R>
__device__ __forceinline__ dps::complex<R> reciprocal(dps::complex<R> v) {
    return dps::complex<R>{R(1), R(0)} / v;
}

// v * 2^e, exactly, rounded to nearest where the result is below the normal range: the scaled
// right-hand sides of dpsolve.batch.row_exponents and their solutions. A float goes through
// double with its bits read and written by hand (dps::wide, dps::narrow: CuPy's -ftz=true reads
// and writes a float below 2^-126 as 0). Before, a float32 b below 2^-126 was solved as b = 0
// (x = 0, info 0).
__device__ __forceinline__ float times_pow2(float v, int e) {
    return dps::narrow(scalbn(dps::wide(v), e));
}
__device__ __forceinline__ double times_pow2(double v, int e) { return scalbn(v, e); }
template <typename R>
__device__ __forceinline__ dps::complex<R> times_pow2(dps::complex<R> v, int e) {
    return {times_pow2(v.re, e), times_pow2(v.im, e)};
}

// A system solved as b / 2^e (e != 0, uniform in the block) ends with x rounded as the caller
// gets it: `for_x(f)` calls f on a reference to each of this thread's entries of x as solved,
// which becomes x 2^e (times_pow2: rounded below the normal range) put back at the solved scale,
// exactly. Returns whether any entry of the block changed, so that the true residual of the x
// the caller gets decides its code (the kernels compute it once more); `lost`: x 2^e is past the
// largest float somewhere (not converged, a NaN residual). dpsolve.batch.scaled_back does the
// same on the host.
template <typename ForX>
__device__ __forceinline__ bool round_x(int e, ForX for_x, bool& lost) {
    bool rounded = false, gone = false;
    for_x([&](auto& xi) {
        const auto back = times_pow2(times_pow2(xi, e), -e);
        rounded |= back != xi;
        gone |= !dps::is_finite(back);
        xi = back;
    });
    lost = __syncthreads_or(gone);
    return __syncthreads_or(rounded) && !lost;
}

// One system as batch_cg_redo solves it (RedoRun::pick): A_i / 2^f (a), b_i / 2^er as solved
// (b), D^-1 or nullptr (d), the tolerance at that scale (atol)
template <typename T> struct System {
    Scaled<T> a;
    const T* b;
    const T* d;
    double atol;
    int er;
};

// The systems of this block (grid-stride over them, uniform per block), each to its own
// tolerance: x loaded from X, then runs of `run` -- the method from the current x with the
// iterations it has left, returning stop.cuh's Stop -- until the true residual ||b - A x|| (q:
// scratch) decides. A convergence it does not confirm restarts from x while iterations are left
// and the run made some, else the system gets info = maxiter (dpsolve.batch's host rule). A
// system scaled to b / 2^e (`exps`) ends with x rounded as the caller gets it (round_x) and, where
// that changed x, one more true residual, of that x, which decides. X (x 2^e), info, its and res
// (times 2^e) are written for every system solved; one preset with info != 0 is skipped (REDO:
// batch_cg_redo's run.pick(sys, s) says which it solves, and how).
// __noinline__: inlined into batch_bicgstab, ptxas (CUDA 13.0, -O1 and above) made spmv read p^
// before other threads' stores to it were seen -- wrong results from the first iteration, with a
// single warp too; -Xptxas -O0 or this call boundary gives the reference's iterates. One call a
// system costs nothing against its iterations.
template <typename T, typename Run, bool REDO = false>
__device__ __noinline__ void for_systems(int nb, int n, const int* __restrict__ indptr,
                                            const int* __restrict__ indices,
                                            const T* __restrict__ values, long long nnz,
                                            const T* __restrict__ B, T* __restrict__ X,
                                            const T* __restrict__ dinv,
                                            const double* __restrict__ tol, int maxiter,
                                            int* __restrict__ info, int* __restrict__ its,
                                            double* __restrict__ res,
                                            const int* __restrict__ exps,
                                            const int* __restrict__ fexps, T* x, T* q,
                                            double* s_real, Run run) {
    for (int sys = blockIdx.x; sys < nb; sys += gridDim.x) {       // uniform per block
        // A_i / 2^f (fexps: batch_a_checks'), b / 2^e (exps): x goes back times 2^(e - f), its
        // residual times 2^e
        Scaled<T> a;
        const T* b;
        const T* d;
        double atol;
        int er;                                               // the residual's exponent
        if constexpr (REDO) {                     // batch_cg_redo: run.pick says (RedoRun)
            System<T> s;
            if (!run.pick(sys, s)) continue;
            a = s.a, b = s.b, d = s.d, atol = s.atol, er = s.er;
        } else {
            if (info[sys] != 0) continue;
            a = {values + (size_t)sys * nnz, fexps != nullptr ? fexps[sys] : 0};
            b = B + (size_t)sys * n;
            d = dinv != nullptr ? dinv + (size_t)sys * n : nullptr;
            atol = tol[sys];
            er = exps != nullptr ? exps[sys] : 0;
        }
        for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = X[(size_t)sys * n + i];
        __syncthreads();
        const int e = er - a.f;                               // x's
        int code = maxiter, total = 0, budget = maxiter, made = 0;
        double true_res = 0.0;
        bool rounded = false, lost = false;
        while (true) {
            if (!rounded) {
                const dps::Stop h = run(a, b, d, atol, budget);
                code = h.info;
                total += h.its;
                budget -= h.its;
                made = h.its;
            }
            spmv(n, indptr, indices, a, x, q);
            __syncthreads();
            double rr = 0.0;
            for (int i = threadIdx.x; i < n; i += blockDim.x) rr += (double)dps::abs2(b[i] - q[i]);
            true_res = sqrt(all_sum(rr, s_real));
            if (rounded) {                        // the x the caller gets decides
                if (code == 0 && !(true_res <= atol)) code = maxiter;
                break;
            }
            if (code == 0 && true_res > atol) {   // a restart from x, or not converged
                if (budget > 0 && made > 0) continue;
                code = maxiter;
            }
            if (e == 0 || !(rounded = round_x(e, [&](auto f) {
                    for (int i = threadIdx.x; i < n; i += blockDim.x) f(x[i]);
                }, lost)))
                break;
        }
        if (code > 0) code = maxiter;
        if (lost) {                               // x 2^e past the largest float
            if (code == 0) code = maxiter;
            true_res = nan("");
        }
        true_res = ldexp(true_res, er);
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            X[(size_t)sys * n + i] = e != 0 ? times_pow2(x[i], e) : x[i];
        if (threadIdx.x == 0) {
            info[sys] = code;
            its[sys] = total;
            res[sys] = true_res;
        }
        __syncthreads();
    }
}

// batch_cg's method, from the current x with `budget` iterations left (batch_cg_redo runs it
// too): SciPy's CG, z = D^-1 r (d: D^-1, or nullptr), the loop head stop.cuh's; x, r, p, q: the
// block's vectors (n each). A lambda over the kernel's own variables (references to them) and
// its block sums' slots, function-static shared memory it reads by name (passed in, they were
// generic pointers: batch_cg's block sums went through generic loads), set to 0 here (slots
// past the last warp stay 0): called by every thread of the block, once, before the systems.
template <typename T>
__device__ __forceinline__ auto cg_method(const int& n, const int* __restrict__ const& indptr,
                                          const int* __restrict__ const& indices, T* const& x,
                                          T* const& r, T* const& p, T* const& q) {
    __shared__ T s_pq[DPS_WARP], s_rz[DPS_WARP];
    __shared__ double s_rr[DPS_WARP];
    if (threadIdx.x < DPS_WARP) {
        s_pq[threadIdx.x] = T(0);
        s_rz[threadIdx.x] = T(0);
        s_rr[threadIdx.x] = 0.0;
    }
    __syncthreads();
    return [&](Scaled<T> v, const T* b, const T* d, double atol, int budget) {
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
        dps::sum2_everywhere(part, rr, s_rz, s_rr);   // one barrier (p, r written before)
        T sigma = part;
        double tau = sqrt(rr);
        // the loop head is stop.cuh's (the budget this run has left as its maxiter)
        dps::Stop h = dps::head_test(0, tau, atol, budget);
        while (h.go) {
            const int j = h.its;
            batch::spmv(n, indptr, indices, v, p, q);
            __syncthreads();
            part = T(0);
            for (int i = threadIdx.x; i < n; i += blockDim.x) part += dps::conj(p[i]) * q[i];
            const T alpha = sigma / dps::sum_everywhere(part, s_pq);
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
            if (d != nullptr) dps::sum2_everywhere(part, rr, s_rz, s_rr);
            else part = dps::sum_everywhere(part, s_rz);
            const T zeta = part;
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
    };
}
}  // namespace batch

template <typename T>
__global__ void __launch_bounds__(1024)
batch_cg(int nb, int n, const int* __restrict__ indptr, const int* __restrict__ indices,
         const T* __restrict__ values, long long nnz, const T* __restrict__ B, T* __restrict__ X,
         const T* __restrict__ dinv, const double* __restrict__ tol, int maxiter,
         int* __restrict__ info, int* __restrict__ its, double* __restrict__ res,
         const int* __restrict__ exps, const int* __restrict__ fexps, T* __restrict__ scratch) {
    __shared__ double s_real[DPS_WARP];
    extern __shared__ __align__(16) unsigned char s_dyn[];
    T* w = scratch != nullptr ? scratch + (size_t)blockIdx.x * 4 * n : reinterpret_cast<T*>(s_dyn);
    T* x = w;
    T* r = w + n;
    T* p = w + 2 * (size_t)n;
    T* q = w + 3 * (size_t)n;
    batch::for_systems(nb, n, indptr, indices, values, nnz, B, X, dinv, tol, maxiter, info,
                       its, res, exps, fexps, x, q, s_real,
                       batch::cg_method<T>(n, indptr, indices, x, r, p, q));
}

// batch_bicgstab<T>: dpsolve/batch/reference.py's bicgstab for each system (SciPy's BiCGStab,
// right-preconditioned by D^-1 or none; -10 a rho breakdown or a non-finite scalar, -11 an
// omega or <r~, v> breakdown, each confirmed with the accurate inner product before it is
// reported, as every dpsolve variant does), the same true-residual restart as batch_cg. `bd` is
// the breakdown tolerance (reference._util.breakdown_tol: eps^2 of the working precision). Eight
// vectors a block: x, r (s in place), r~, p, v, t, p^ and s^.
template <typename T>
__global__ void __launch_bounds__(1024)
batch_bicgstab(int nb, int n, const int* __restrict__ indptr, const int* __restrict__ indices,
               const T* __restrict__ values, long long nnz, const T* __restrict__ B,
               T* __restrict__ X, const T* __restrict__ dinv, const double* __restrict__ tol,
               int maxiter, double bd, int* __restrict__ info, int* __restrict__ its,
               double* __restrict__ res, const int* __restrict__ exps,
               const int* __restrict__ fexps, T* __restrict__ scratch) {
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
                       its, res, exps, fexps, x, t, s_real,
                       [&](batch::Scaled<T> a, const T* b, const T* d, double atol, int budget) {
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

namespace batch {
// f of dpsolve._system.exponent_shift from csr_check's exponent words (hi, lo; 0: no nonzero
// value): 0 inside the window (dps::in_matrix_window); else max|A| into [1/2, 1) where A is
// small, and where it is large as near as keeps every nonzero value at 2^-W or more
template <typename T>
__device__ __forceinline__ int matrix_shift(int hi_word, int lo_word) {
    if (dps::in_matrix_window<T>(hi_word)) return 0;
    constexpr int w = sizeof(dps::real_t<T>) == 4 ? DPS_MATRIX_WINDOW_F32 : DPS_MATRIX_WINDOW_F64;
    const int hi = hi_word - DPS_EXP_BIAS, lo = DPS_EXP_BIAS - lo_word;
    return hi < 0 ? hi : max(0, min(hi, lo + w));
}

// One system's f (matrix_shift's, from the exponent words of its nnz values v), by the whole
// block: `bad` (every thread's) whether a value is NaN or Inf (f is then 0). `words`: two ints
// of shared memory, read by all on return: the caller's next barrier frees them.
template <typename T>
__device__ __forceinline__ int system_shift(const T* __restrict__ v, long long nnz, int* words,
                                            bool& bad) {
    if (threadIdx.x == 0) words[0] = words[1] = 0;
    dps::real_t<T> hi = 0, lo = 0;
    bool nonfinite = false;
    for (long long k = threadIdx.x; k < nnz; k += blockDim.x) {
        const T a = v[k];
        nonfinite |= !dps::is_finite(a);
        dps::magnitude_range(a, hi, lo);
    }
    int ehi, elo;
    dps::exponent_words(hi, lo, ehi, elo);
    ehi = __reduce_max_sync(DPS_FULL_MASK, ehi);
    elo = __reduce_max_sync(DPS_FULL_MASK, elo);
    bad = __syncthreads_or(nonfinite);          // the words cleared before the atomics
    if (threadIdx.x % DPS_WARP == 0 && ehi != 0) {
        atomicMax(&words[0], ehi);
        atomicMax(&words[1], elo);
    }
    __syncthreads();
    return bad ? 0 : matrix_shift<T>(words[0], words[1]);
}

// Jacobi's D^-1 of A_i / 2^f into out[0, n) (diag_pos: the position of row r's diagonal entry
// among the values v, -1 where it has none), the host's to the bit (subnormals kept; 0 where
// no_reciprocal refuses an entry); whether this thread's rows hold one it refuses
template <typename T>
__device__ __forceinline__ bool scaled_dinv(const T* __restrict__ v,
                                            const int* __restrict__ diag_pos, int n, int f,
                                            T* out) {
    bool zero = false;
    for (int r = threadIdx.x; r < n; r += blockDim.x) {
        const int pos = diag_pos[r];
        T d = pos >= 0 ? v[pos] : T(0);
        if (f != 0) d = times_pow2(d, -f);
        const T inv = reciprocal(d);
        const bool none = no_reciprocal(d, inv);
        zero |= none;
        out[r] = none ? T(0) : inv;
    }
    return zero;
}
}  // namespace batch

// batch_a_checks<T>: A's checks of dpsolve.batch before batch_cg and batch_bicgstab, a block a
// system (grid-stride), one pass over its values where CuPy took a dozen launches: code[i] =
// BAD_INPUT where a value of A_i is NaN or Inf, else ZERO_DIAGONAL where Jacobi (`diag_pos`: the
// position of row r's diagonal entry among a system's values, -1 where it has none) finds a zero
// diagonal entry of A_i / 2^f_i or one whose reciprocal is past the largest float, else 0;
// fexps[i] = f_i, A_i solved as A_i / 2^f_i (dpsolve.batch.matrix_shifts' rule, from
// csr_check's exponent words of its values: a float's subnormals read through their bits; 0 for
// a bad system), and with Jacobi dinv (nb x n) the reciprocals of A_i / 2^f_i's diagonal, the
// host's to the bit (0 where no_reciprocal refuses an entry). Before, the GPU took A_i as it
// was: a float32 A_i of 2^-120 broke BiCGStab down (info -10) where the single solve converged.
template <typename T>
__global__ void __launch_bounds__(256)
batch_a_checks(int nb, int n, long long nnz, const T* __restrict__ values,
               const int* __restrict__ diag_pos, int* __restrict__ code, int* __restrict__ fexps,
               T* __restrict__ dinv) {
    __shared__ int s_words[2];
    for (int sys = blockIdx.x; sys < nb; sys += gridDim.x) {       // uniform per block
        const T* v = values + (size_t)sys * nnz;
        bool bad;
        const int f = batch::system_shift(v, nnz, s_words, bad);
        const bool zero = diag_pos != nullptr
                          && batch::scaled_dinv(v, diag_pos, n, f, dinv + (size_t)sys * n);
        const bool refused = __syncthreads_or(zero);    // the words read by all
        if (threadIdx.x == 0) {
            code[sys] = bad ? batch::BAD_INPUT : refused ? batch::ZERO_DIAGONAL : 0;
            fexps[sys] = f;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// batch_cg_rows<T, NZ, R, JAC, DIA, FULL>: batch_cg for systems whose n rows fit a block at R
// rows a thread (thread t holds rows t, t + blockDim, ...) and hold at most NZ entries each. The
// host picks NZ (5, 7, 8, 16 or 32), R and a block of whole warps; JAC: Jacobi (D^-1, taken from
// the row's own entry, in shared memory after p: n values) or none. Each row's values and columns
// sit in registers for the whole solve (read from global memory once, where batch_cg reads them
// every iteration), x, r, z and p in registers too, and p in shared memory (n values) for the
// products. The checks of dpsolve.batch run here, a system at a time, so that the call is this
// one launch: a NaN or Inf in a system's values or b (BAD_INPUT), a zero diagonal entry with
// Jacobi, or one whose reciprocal is past the largest float (ZERO_DIAGONAL), the tolerance
// max(rtol ||b||, atol) (in float64; written to `tol`), b = 0 (x = 0, info 0), and a b whose
// ||b||^2 leaves [sq_lo, sq_hi] (dpsolve.batch.row_exponents: solved as b / 2^e, e from a block
// max of ilogb |b|, its x, residual and tolerance multiplied back; an x past the largest float
// is then not converged).
// X0: the starts (nullptr: zeros; may be X). Every system's info, its, res (NaN for a bad one)
// and tol are written.
//
// DIA (a pattern of at most NZ / 2 diagonals below the main one and NZ / 2 above: 2-D and 3-D
// stencils; batch::Diagonals): slot k of every row is the diagonal off_k, a kernel argument, so
// the columns take no registers, and the main diagonal's p comes from the row's own register.
// Its sums are the rows' form's (sorted columns, an empty slot adding 0). H100, 10,000 x 3-D
// 10^3, kernel alone, one run (scratch A/B, 2026-11-27): rows' form 2.36-2.40 ms, DIA 2.05-2.19
// (Jacobi 3.09-3.10 -> 2.69-2.84); 1,000 x 2-D 32^2 0.33-0.34 -> 0.30-0.32. The steps before
// it (one earlier run): the block sums over NW slots unrolled (3.41 -> 3.08 ms without Jacobi),
// JAC a template argument and D^-1 in shared memory, so fewer registers spilt (3.08 -> 2.40).
// Not kept: x in shared memory (2.19 -> 2.32 ms), a head test on ||r||^2 against atol^2 with
// sqrt only near it (2.19 -> 2.16, within spread). ptxas still spills (88-150 B) but not in the
// iteration loop (cuobjdump: no LDL / STL between its barriers).
//
// A dead row (row >= n) runs the product too, with no branch around it: its entries are 0 and
// its places a live row's (the rows' form: row 0; DIA: row 0, or FULL's own zeros), so the R
// rows' chains interleave where a branch each kept them apart (the SASS had a BSSY / BSYNC
// pair a row). FULL (DIA only; the host launches exactly the launch bound's NT threads, where
// the rows' own block would be over half of it): thread t's rows are t + s NT, a compile-time
// stride, so p's R NZ places are NZ registers plus immediate offsets, not R NZ registers that
// ptxas spilt and reloaded in the loop (17 LDL an iteration); p's area holds R NT places, the
// dead rows' zeros. H100, kernel alone, min of 3 rounds' medians of 5 (scratch/ab20b.py,
// 2026-11-27): 10,000 x 3-D 10^3 2.20 -> 1.71 ms (Jacobi 2.70 -> 2.10), the no-branch product
// alone 1.99; 1,000 x 2-D 32^2 0.313 -> 0.289 (0.381 -> 0.338); 20,000 x 2-D 16^2 (a block of
// 64: not FULL) 0.849 -> 0.843; the rows' form within spread (2.37 -> 2.31, 3.11 -> 3.14). Tried
// and not kept, the same day: Chronopoulos and Gear's CG (2.20 -> 2.35 ms), R = 2 at two
// 512-thread blocks an SM (3.20), the values staged in shared memory by cp.async (2.43; with the
// next system's prefetched by a grid of two blocks an SM, 2.62), the DIA values in shared memory
// at three blocks an SM (2.45).
//
// R = 4 asks for two blocks an SM (128 registers a thread): 10,000 systems of 3-D 10^3 on an
// H100 took 3.99 ms so, 4.51 at one block an SM, 5.24 at R = 2 (16 warps a block: their block
// sums cost more) and 8.0 at R = 1 (spills at 64 registers).
//
// Registers decide the speed: at NZ = 8, R = 4 the values alone take 64 (float64) and ptxas
// spills (ncu: 14.6 GB of local loads in that solve; 46 % issue active at 16 warps an SM, the
// stalls on shared-memory and fixed latency). So NZ = 5 and 7 exist (2-D and 3-D stencils: no
// empty slot) and the columns are packed byte offsets, two a register: 10,000 x 3-D 10^3 at
// (NZ, R) = (8, 4) unpacked 4.36 ms, (7, 4) unpacked 4.03, (7, 4) packed 3.77; 1,000 x 2-D 32^2
// 0.73 -> 0.54 ms. An empty slot holds a = 0 at the row's own column, so the product needs no
// test of the row's length (0 times a finite w[row] adds nothing; a non-finite one has already
// stopped the solve): 3.93 -> 3.70 ms, 0.57 -> 0.55. Tried and not kept: Chronopoulos and
// Gear's CG (one block sum an iteration, s = A p by recurrence: more registers, 4.09-4.85 ms),
// x and D^-1 in shared memory (3.82 ms), the values in shared memory (another machine: 3.90 ->
// 3.68 ms at two blocks an SM, 4.15 at three, where 80 registers spill 292 B).
//
// An iteration has three barriers: one for each of its two block sums and one after p is stored.
// A block sum (dps::sum_everywhere): warp sums into a slot a warp, a barrier, then every thread
// sums the slots in one fixed order, so every thread holds the same bits and takes the same
// branches without a broadcast. The same algorithm, stops and codes as batch_cg, its sums in
// another order.
//
// NZ = 0: the rows' entries are read from global memory at each product (through L1: the block
// keeps only p in shared memory, so most of L1 is left to the pattern and values), for systems
// of more rows than the register kernels hold: a block of right-hand sides of 2-D 64^2 (4,096
// rows) took 10-11 us an iteration in batch_cg (vectors in shared memory, the matrix from L2;
// block 0's clock: 9,000 of 20,500 cycles in the SpMV, 6,500 in the vector loops), 8-10 us here
// at R = 4 (1,024 threads; R = 8 at 512 threads was slower).
namespace batch {
// DIA = true: the pattern's diagonals, the same for every row (dpsolve.batch.device.diagonals):
// slot k of every row is the entry at column row + off_k, off_k = bytes[k] / sizeof(T), the
// offsets ascending with 0 at slot NZ / 2; `slot_pos` (NZ x n, slot-major) says where each
// slot's value is in a system's values (-1: none, a = 0). A kernel argument, so the offsets are
// read from the constant bank and take no registers.
struct Diagonals {
    int bytes[8];
};

constexpr int NO_EXP = -(1 << 30);             // below every ilogb of a nonzero value

// batch_cg_rows's launch bound: the most threads a block of it has (dpsolve/cuda/_loader.py's
// BATCH_ROWS gives the host the same numbers)
template <int NZ, int R>
constexpr int ROWS_THREADS = NZ == 0 ? 1024 : NZ * R <= 8 ? 1024 : NZ * R <= 16 ? 512 : 256;
}  // namespace batch

template <typename T, int NZ, int R, bool JAC, bool DIA = false, bool FULL = false>
__global__ void __launch_bounds__(batch::ROWS_THREADS<NZ, R>, NZ == 0 ? 1 : R == 4 ? 2 : 1)
batch_cg_rows(int nb, int n, const int* __restrict__ indptr, const int* __restrict__ indices,
              const T* __restrict__ values, long long nnz, const T* __restrict__ B,
              const T* X0, T* X, double rtol, double atol, int maxiter,      // X0 may be X
              int* __restrict__ info, int* __restrict__ its, double* __restrict__ res,
              double* __restrict__ tol, const int* __restrict__ slot_pos, batch::Diagonals dia,
              int pad, double sq_lo, double sq_hi) {
    static_assert(!DIA || (NZ > 0 && NZ % 2 == 1 && NZ <= 8), "DIA: an odd NZ, 0 in its middle");
    static_assert(!FULL || DIA, "FULL: the DIA form's");
    // the launch bound: the most threads a block has (FULL: the block's own size)
    constexpr int NT = batch::ROWS_THREADS<NZ, R>;
    const int stride = FULL ? NT : (int)blockDim.x;   // thread t's rows: t, t + stride, ...
    const int span = FULL ? R * NT : n;               // rows p's area holds (FULL: dead ones too)
    extern __shared__ __align__(16) unsigned char s_dyn[];
    // p, or x where A x is needed: n values (DIA: after `pad` zeros, and `pad` zeros after them,
    // so that row + off_k is always a place to read; FULL: the dead rows' places zeros too)
    T* sp = reinterpret_cast<T*>(s_dyn) + (DIA ? pad : 0);
    if constexpr (DIA) {
        for (int i = threadIdx.x; i < pad; i += blockDim.x) sp[i - pad] = T(0);
        for (int i = n + threadIdx.x; i < span + pad; i += blockDim.x) sp[i] = T(0);
    }
    __shared__ __align__(16) T s_pq[DPS_WARP], s_rz[DPS_WARP];
    __shared__ __align__(16) double s_rr[DPS_WARP], s_true[DPS_WARP];
    // b is solved as b / 2^s_exp (0 but on the rare path below, which sets it and puts it back
    // to 0 after the system; in shared memory, not a register live across the iteration loop),
    // s_top the rare path's block max of ilogb |b|
    __shared__ int s_exp, s_top;
    // the most warps a block has (its launch bound): block sums over that many slots, unrolled
    constexpr int NW = NT / DPS_WARP;
    if (threadIdx.x < DPS_WARP) {                 // slots past the last warp stay 0
        s_pq[threadIdx.x] = T(0);
        s_rz[threadIdx.x] = T(0);
        s_rr[threadIdx.x] = 0.0;
        s_true[threadIdx.x] = 0.0;
        if (threadIdx.x == 0) s_exp = 0;
    }
    __syncthreads();
    constexpr int NR = NZ > 0 ? NZ : 1;           // entries a row in registers (NZ = 0: none)
    T* sd = sp + span + (DIA ? pad : 0);          // JAC: D^-1, n values after p's
    int row[R], start[R], len[R];
    // the columns as byte offsets into sp, two 16-bit halves a register (n <= 1,024 here:
    // offsets < 16,384 even for complex<double>): 16 registers at NZ = 8, R = 4, not 32
    unsigned colp[R][DIA ? 1 : (NR + 1) / 2];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        row[s] = threadIdx.x + s * stride;
        start[s] = row[s] < n ? indptr[row[s]] : 0;
        len[s] = row[s] < n ? indptr[row[s] + 1] - start[s] : 0;
#pragma unroll
        for (int k = 0; k < (DIA ? 0 : NZ); k += 2) {   // an empty slot: the row's own (a = 0)
            const unsigned own = row[s] < n ? row[s] * sizeof(T) : 0u;
            const unsigned lo = k < len[s] ? indices[start[s] + k] * sizeof(T) : own;
            const unsigned hi = k + 1 < len[s] ? indices[start[s] + k + 1] * sizeof(T) : own;
            colp[s][k / 2] = lo | (hi << 16);
        }
    }
    auto offset = [&](int s, int k) -> int {    // of w[col] from w, in bytes
        if constexpr (DIA) return (FULL || row[s] < n ? row[s] : 0) * (int)sizeof(T) + dia.bytes[k];
        else return (colp[s][k / 2] >> (16 * (k & 1))) & 0xffffu;
    };
    auto col_of = [&](int s, int k) { return offset(s, k) / (int)sizeof(T); };
    auto at = [&](const T* w, int s, int k) -> T {      // w[col], w in shared memory
        const unsigned char* base = reinterpret_cast<const unsigned char*>(w);
        return *reinterpret_cast<const T*>(base + offset(s, k));
    };
    for (int sys = blockIdx.x; sys < nb; sys += gridDim.x) {       // uniform per block
        const T* b = B + (size_t)sys * n;             // read where needed: fewer registers
        T a[R][NR], xi[R], ri[R], pi[R];
        const T* vals = values + (size_t)sys * nnz;
        bool bad = false, zero = false;
        double bb = 0.0;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            const bool live = row[s] < n;
            const T* v = vals + start[s];
            T dg = T(0);
            if constexpr (DIA) {                        // every entry has its slot
#pragma unroll
                for (int k = 0; k < NZ; ++k) {
                    const int pos = live ? slot_pos[k * n + row[s]] : -1;
                    a[s][k] = pos >= 0 ? vals[pos] : T(0);
                    bad |= !dps::is_finite(a[s][k]);
                }
                dg = a[s][NZ / 2];
            } else if constexpr (NZ > 0) {
#pragma unroll
                for (int k = 0; k < NZ; ++k) {
                    a[s][k] = k < len[s] ? v[k] : T(0);
                    bad |= !dps::is_finite(a[s][k]);
                    if (k < len[s] && col_of(s, k) == row[s]) dg = a[s][k];
                }
            } else {
                for (int k = 0; k < len[s]; ++k) {
                    bad |= !dps::is_finite(v[k]);
                    if (indices[start[s] + k] == row[s]) dg = v[k];
                }
            }
            const T bs = live ? b[row[s]] : T(0);
            bad |= !dps::is_finite(bs);
            bb += (double)dps::abs2(bs);
            const T inv = batch::reciprocal(dg);                // a ZERO_DIAGONAL one: unused
            zero |= JAC && live && batch::no_reciprocal(dg, inv);
            if (JAC && live) sd[row[s]] = inv;
            xi[s] = live && X0 != nullptr ? X0[(size_t)sys * n + row[s]] : T(0);
        }
        bad = __syncthreads_or(bad);
        zero = __syncthreads_or(zero) && !bad;
        double bsq = dps::sum_everywhere<NW>(bb, s_true);                // after 2 barriers
        double atol_s = bad ? atol : fmax(rtol * sqrt(bsq), atol), tol_out = atol_s;
        // b outside the safe range (its squares under- or overflow: dpsolve.batch.row_exponents,
        // the single solves' rule): the system is solved as b / 2^e, e the exponent of max|b|,
        // exactly, and x, its residual and its tolerance multiplied back. A rare path, uniform
        // in the block (every thread has bsq's bits), that b = 0 takes too (no nonzero entry: e
        // stays 0): the scaled b is written to this system's rows of X, which hold x only at
        // the end, each thread its own rows, and read from there. Before, b of 2^-900 in
        // float64 had ||b|| = 0 and was answered x = 0 with info 0, and so was a float32 b
        // below 2^-126 (its squares, sums and comparisons flushed: dps::wide).
        if (!bad && !zero && !(bsq >= sq_lo && bsq <= sq_hi)) {
            if (threadIdx.x == 0) s_top = batch::NO_EXP;
            __syncthreads();
            int top = batch::NO_EXP;
#pragma unroll
            for (int s = 0; s < R; ++s) {
                const double m = row[s] < n ? dps::magnitude(b[row[s]]) : 0.0;
                if (m != 0.0) top = max(top, ilogb(m));       // a float's subnormals count
            }
            if (top != batch::NO_EXP) atomicMax(&s_top, top);
            __syncthreads();
            if (s_top != batch::NO_EXP) {              // b is not 0
                const int e = s_top + 1;              // frexp's: max|b| / 2^e in [1/2, 1)
                T* bx = X + (size_t)sys * n;
                bb = 0.0;
#pragma unroll
                for (int s = 0; s < R; ++s) {
                    if (row[s] < n) {
                        const T bs = batch::times_pow2(b[row[s]], -e);
                        bx[row[s]] = bs;
                        bb += (double)dps::abs2(bs);
                    }
                    if (X0 != nullptr) xi[s] = batch::times_pow2(xi[s], -e);
                }
                b = bx;
                if (threadIdx.x == 0) s_exp = e;
                bsq = dps::sum_everywhere<NW>(bb, s_true);    // its barrier publishes s_exp
                atol_s = fmax(rtol * sqrt(bsq), ldexp(atol, -e));     // may be Inf: any x
                tol_out = fmax(ldexp(rtol * sqrt(bsq), e), atol);      // the caller's
            }
        }
        const double bnorm = sqrt(bsq);
        if (threadIdx.x == 0) tol[sys] = tol_out;
        if (bad || zero || bnorm == 0.0) {        // nothing to solve: x = 0
#pragma unroll
            for (int s = 0; s < R; ++s)
                if (row[s] < n) X[(size_t)sys * n + row[s]] = T(0);
            if (threadIdx.x == 0) {
                info[sys] = bad ? batch::BAD_INPUT : zero ? batch::ZERO_DIAGONAL : 0;
                its[sys] = 0;
                res[sys] = bad || zero ? nan("") : 0.0;
            }
            __syncthreads();                      // s_true read by all before it is reused
            continue;
        }
        // this row of A w, w in shared memory, `own` its w[row] (batch::spmv's order of the sum;
        // DIA: the diagonals', the same for sorted columns, the diagonal's w from the register)
        auto row_times = [&](int s, const T* w, T own) {
            T acc = T(0);
            if constexpr (DIA) {
#pragma unroll
                for (int k = 0; k < NZ; ++k) acc += a[s][k] * (k == NZ / 2 ? own : at(w, s, k));
            } else if constexpr (NZ > 0) {
#pragma unroll
                for (int k = 0; k < NZ; ++k) acc += a[s][k] * at(w, s, k);   // empty: 0 w[row]
            } else {                                  // the entries through L1, in k's order
                acc = dps::gather_dot<8>(start[s], start[s] + len[s], indices, vals,
                                         [&](int c) { return w[c]; });
            }
            return acc;
        };
        auto dinv_times = [&](int s, T v) -> T {  // (D^-1 v) of this row: Jacobi or none
            if constexpr (JAC) return row[s] < n ? sd[row[s]] * v : v;
            else return v;
        };
        auto store = [&](const T* v) {
#pragma unroll
            for (int s = 0; s < R; ++s)
                if (row[s] < n) sp[row[s]] = v[s];
        };
        int code = maxiter, total = 0, budget = maxiter;
        double true_res = 0.0;
        while (true) {
            // r = b - A x, z = D^-1 r, p = z, sigma = <r, z>, tau = ||r||
            store(xi);
            __syncthreads();
            T sigma = T(0);
            double rr = 0.0;
#pragma unroll
            for (int s = 0; s < R; ++s) {
                const T ax = row_times(s, sp, xi[s]);             // a dead row: 0
                ri[s] = row[s] < n ? b[row[s]] - ax : T(0);
                pi[s] = dinv_times(s, ri[s]);                 // z = D^-1 r
                sigma += dps::conj(ri[s]) * pi[s];
                rr += (double)dps::abs2(ri[s]);
            }
            dps::sum2_everywhere<NW>(sigma, rr, s_rz, s_rr);    // its barrier: sp read by all
            store(pi);
            __syncthreads();
            dps::Stop h = dps::head_test(0, sqrt(rr), atol_s, budget);
            while (h.go) {
                const int j = h.its;
                T qi[R], part = T(0);
#pragma unroll
                for (int s = 0; s < R; ++s) {
                    qi[s] = row_times(s, sp, pi[s]);           // no branch: a dead row's 0
                    part += dps::conj(pi[s]) * qi[s];
                }
                const T alpha = sigma / dps::sum_everywhere<NW>(part, s_pq);
                if (!dps::is_finite(alpha)) { h = {DPS_BREAKDOWN, j, false}; break; }
                T zeta = T(0);
                rr = 0.0;
#pragma unroll
                for (int s = 0; s < R; ++s) {
                    xi[s] += dps::mul_rn(alpha, pi[s]);
                    ri[s] = ri[s] - dps::mul_rn(alpha, qi[s]);
                    zeta += dps::conj(ri[s]) * dinv_times(s, ri[s]);
                    rr += (double)dps::abs2(ri[s]);
                }
                if constexpr (JAC) {
                    dps::sum2_everywhere<NW>(zeta, rr, s_rz, s_rr);
                } else {
                    zeta = dps::sum_everywhere<NW>(zeta, s_rz);
                }
                const T beta = zeta / sigma;
                sigma = zeta;
#pragma unroll
                for (int s = 0; s < R; ++s) pi[s] = dinv_times(s, ri[s]) + dps::mul_rn(beta, pi[s]);
                const double tau = JAC ? sqrt(rr) : sqrt((double)fabs(zeta));      // fabs: ADL
                store(pi);                                     // sp's readers passed 2 barriers
                __syncthreads();
                h = dps::head_test(j + 1, tau, atol_s, budget);
            }
            code = h.info;
            total += h.its;
            budget -= h.its;
            // the true residual ||b - A x|| decides, as in batch::for_systems; on the rare path
            // (b / 2^e) that of x as the caller gets it: x 2^e, rounded below the normal range
            // (batch::times_pow2), back at the solved scale. A rounded x that misses the
            // tolerance restarts from x, as any miss does, and where x itself meets it the run
            // makes no iteration: not converged. The rounding here, not a second product after
            // the loop as batch::for_systems has it: that made ptxas spill in the iteration loop
            // (float64 3-D 10^3 with Jacobi: 8 -> 144 bytes, 2.09 -> 2.26 ms on an H200), and
            // so did e held in a register across the loop: it is read from shared memory here.
            const int e = s_exp;
            T xr[R];
#pragma unroll
            for (int s = 0; s < R; ++s)
                xr[s] = e != 0 ? batch::times_pow2(batch::times_pow2(xi[s], e), -e) : xi[s];
            store(xr);
            __syncthreads();
            double e2 = 0.0;
#pragma unroll
            for (int s = 0; s < R; ++s) {
                const T ax = row_times(s, sp, xr[s]);
                if (row[s] < n) e2 += (double)dps::abs2(b[row[s]] - ax);
            }
            true_res = sqrt(dps::sum_everywhere<NW>(e2, s_true));
            if (code != 0 || !(true_res > atol_s)) break;
            if (budget <= 0 || h.its == 0) { code = maxiter; break; }
        }
        if (code > 0) code = maxiter;
        const int e = s_exp;
        if (e != 0) {                             // x to the caller's scale (uniform branch)
            bool lost = false;
#pragma unroll
            for (int s = 0; s < R; ++s) {
                xi[s] = batch::times_pow2(xi[s], e);
                lost |= row[s] < n && !dps::is_finite(xi[s]);
            }
            if (__syncthreads_or(lost)) {         // past the largest float: not converged
                if (code == 0) code = maxiter;
                true_res = nan("");
            }
        }
        true_res = ldexp(true_res, e);
#pragma unroll
        for (int s = 0; s < R; ++s)
            if (row[s] < n) X[(size_t)sys * n + row[s]] = xi[s];
        if (threadIdx.x == 0) {
            info[sys] = code;
            its[sys] = total;
            res[sys] = true_res;
        }
        __syncthreads();                          // s_true (and s_exp) read by all before reuse
        if (e != 0 && threadIdx.x == 0) s_exp = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// batch_cg_redo<T>: the launch after batch_cg_rows, which takes A_i as it is (finding A_i's
// scale in its load loop cost it 4-15 %: BENCHMARKS.md). A system it did not solve -- info
// neither 0 nor BAD_INPUT: broken down, not converged, or a diagonal it refused -- whose A_i is
// far from 1 (f_i != 0, batch_a_checks' rule from the exponent words of its values) is solved
// again as A_i / 2^f_i, as batch_cg solves it after batch_a_checks: Jacobi's D^-1 of A_i / 2^f_i
// (ZERO_DIAGONAL, x = 0, where it refuses an entry), b_i / 2^e_i by batch_cg_rows's rule (e_i
// from max|b_i| where ||b_i||^2 leaves [sq_lo, sq_hi]), x from 0, batch_cg's cg_method. Every other
// system keeps what batch_cg_rows wrote. Before, a float32 A_i of 2^-120 with its b broke down
// (-10), and one whose every value is a float32 subnormal was refused with Jacobi (-21), where
// the host batch and the single solves converge.
//
// The grid is small (the host: two blocks an SM); block k takes systems k, k + grid, ..., and
// reads their codes first, a thread each: a block with nothing to solve again ends there, so that
// a batch with nothing to solve again costs a launch and a load a thread (H200, BENCHMARKS.md:
// 1,000 x 2-D 32^2 +6-8 us a call, 1-3 %, against main's tree in one process; 10,000 x 3-D 10^3
// level with the redo off; before that exit, +4 % at 1,000 x 32^2); a block that goes on reads
// each code again (RedoRun::pick), and finds f_i and D^-1 as batch_a_checks does (system_shift,
// scaled_dinv).
// The block's vectors x, r, p, q, b_i / 2^e_i and D^-1 (6 n values) sit in dynamic shared
// memory, or in global scratch (`scratch`: 6 n values a block).
namespace batch {
// batch_cg_redo's run for for_systems<..., REDO = true>: CG (cg_method's lambda) and pick, which
// chooses the systems to solve again and sets each up (System)
template <typename T, typename Cg> struct RedoRun {
    Cg cg;                                        // cg_method's
    int n;
    const T* __restrict__ values;
    long long nnz;
    const T* __restrict__ B;
    T* X;
    const int* __restrict__ diag_pos;
    double rtol, atol, sq_lo, sq_hi;
    int *info, *its;
    double* res;
    T *bs, *ds;                                   // b_i / 2^e_i, D^-1 of A_i / 2^f_i
    int* s_words;                                 // hi and lo exponent words, max ilogb |b|
    double* s_real;
    __device__ __forceinline__ dps::Stop operator()(Scaled<T> v, const T* b, const T* d,
                                                    double tol, int budget) const {
        return cg(v, b, d, tol, budget);
    }
    // whether system sys is solved again, and how (s)
    __device__ bool pick(int sys, System<T>& s) const {
        const int code = info[sys];
        if (code == 0 || code == BAD_INPUT) return false;          // solved, or bad
        const T* v = values + (size_t)sys * nnz;
        if (threadIdx.x == 0) s_words[2] = NO_EXP;      // b's max ilogb: system_shift's barriers
        bool bad;                                 // false: batch_cg_rows checked the values
        const int f = system_shift(v, nnz, s_words, bad);
        if (f == 0) {                             // A_i in range: batch_cg_rows's answer stands
            __syncthreads();                      // the words read by all before the next reset
            return false;
        }
        bool zero = diag_pos != nullptr && scaled_dinv(v, diag_pos, n, f, ds);
        // b: batch_cg_rows's rule; x from 0, in this system's row of X
        const T* b = B + (size_t)sys * n;
        double bb = 0.0;
        int top = NO_EXP;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            bb += (double)dps::abs2(b[i]);
            const double m = dps::magnitude(b[i]);
            if (m != 0.0) top = max(top, ilogb(m));   // a float's subnormals count
            X[(size_t)sys * n + i] = T(0);
        }
        if (top != NO_EXP) atomicMax(&s_words[2], top);
        zero = __syncthreads_or(zero);
        double bsq = all_sum(bb, s_real);         // s_words[2] read by all after it
        const int top_b = s_words[2];
        const int e = !(bsq >= sq_lo && bsq <= sq_hi) && top_b != NO_EXP ? top_b + 1 : 0;
        bb = 0.0;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const T bi = e != 0 ? times_pow2(b[i], -e) : b[i];
            bs[i] = bi;
            bb += (double)dps::abs2(bi);
        }
        if (e != 0) bsq = all_sum(bb, s_real);
        __syncthreads();                          // bs, ds and x's row written; words read
        if (zero) {                               // nothing solved: x = 0
            if (threadIdx.x == 0) {
                info[sys] = ZERO_DIAGONAL;
                its[sys] = 0;
                res[sys] = nan("");
            }
            return false;
        }
        s = {{v, f}, bs, diag_pos != nullptr ? ds : nullptr,
             fmax(rtol * sqrt(bsq), ldexp(atol, -e)), e};                // ldexp(atol, 0): atol
        return true;
    }
};
}  // namespace batch

template <typename T>
__global__ void __launch_bounds__(1024)
batch_cg_redo(int nb, int n, const int* __restrict__ indptr, const int* __restrict__ indices,
              const T* __restrict__ values, long long nnz, const T* __restrict__ B,
              T* __restrict__ X, const int* __restrict__ diag_pos, double rtol, double atol,
              int maxiter, int* __restrict__ info, int* __restrict__ its,
              double* __restrict__ res, double sq_lo, double sq_hi, T* __restrict__ scratch) {
    // nothing to solve again among this block's systems (the common case): a load a thread
    bool any = false;
    for (long long sys = blockIdx.x + (long long)threadIdx.x * gridDim.x; sys < nb;
         sys += (long long)blockDim.x * gridDim.x) {
        const int code = info[sys];
        any |= code != 0 && code != batch::BAD_INPUT;
    }
    if (!__syncthreads_or(any)) return;
    __shared__ double s_real[DPS_WARP];
    __shared__ int s_words[3];
    extern __shared__ __align__(16) unsigned char s_dyn[];
    T* w = scratch != nullptr ? scratch + (size_t)blockIdx.x * 6 * n : reinterpret_cast<T*>(s_dyn);
    T* x = w;
    T* r = w + n;
    T* p = w + 2 * (size_t)n;
    T* q = w + 3 * (size_t)n;
    const auto cg = batch::cg_method<T>(n, indptr, indices, x, r, p, q);
    batch::for_systems<T, batch::RedoRun<T, decltype(cg)>, true>(
        nb, n, indptr, indices, values, nnz, B, X, nullptr, nullptr, maxiter, info, its, res,
        nullptr, nullptr, x, q, s_real,
        batch::RedoRun<T, decltype(cg)>{cg, n, values, nnz, B, X, diag_pos, rtol, atol,
                                        sq_lo, sq_hi, info, its, res, w + 4 * (size_t)n,
                                        w + 5 * (size_t)n, s_words, s_real});
}
