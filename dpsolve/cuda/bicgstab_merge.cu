// bicgstab_merge.cu - BiCGStab's fused macro-kernels (the `merge` variant; dpsolve/backends/merge.py),
// built as the paper's Figure 2 builds CG's: kernels that share the mapping of threads to vector
// elements are merged, the first stage of each DOT is fused into the kernel that produces its
// operands, and second stages are fused with the scalar operations into one-block kernels.
//
// One iteration j of dpsolve/reference/bicgstab.py is eight launches (ten with CSR-vector):
//
//   {checks, p, psolve}  bicgstab_merge_p<T>       status = pending (-10 / -11 found by
//                                                  bicgstab_merge_rho); p = r + beta (p - omega v);
//                                                  p^ = D^-1 p (Jacobi)
//   {SpMV, DOT_ini}      bicgstab_spmv_dot<T, W>   (W: CSR-scalar or ELL, DYN_CSR_SCALAR / DYN_ELL)
//                                                  v = A p^; per-block partials of <r~, v>
//                        (CSR-vector: spmv.cu's SpMV, then blas1's dot_partial)
//   {DOT_fin, alpha}     bicg_merge.cu's bicg_merge_alpha<T>
//                                                  <r~, v> == 0 -> status = -11;
//                                                  alpha = rho / <r~, v>; either non-finite ->
//                                                  status = -10
//   {x, s, psolve, DOT_ini}
//                        bicgstab_merge_s<T>       x += alpha p^; s = r - alpha v (written over r);
//                                                  s^ = D^-1 s; partials of <s, s>
//   {SpMV, DOT_ini x2}   bicgstab_spmv_dot2<T, W>
//                                                  t = A s^; partials of <t, s> and <t, t>
//                        (CSR-vector: spmv.cu's SpMV, then bicgstab_dot2_partial<T>)
//   {DOT_fin x3, ||s|| test, omega}
//                        bicgstab_merge_omega<T>   ||s|| < atol -> status = 2 (converged mid-step:
//                                                  x already holds x + alpha p^); else
//                                                  omega = <t, s> / <t, t>; ||s||, <t, s>, <t, t>
//                                                  or omega non-finite -> status = -10 (x holds
//                                                  x + alpha p^, as the reference returns it)
//   {x, r, DOT_ini x2}   bicgstab_merge_r<T>       x += omega s^; r = s - omega t; partials of
//                                                  <r~, r> and <r, r>
//   {DOT_fin x2, tau, beta, checks}
//                        bicgstab_merge_rho<T>     rho' = <r~, r>; tau = sqrt(|<r, r>|) (the host's
//                                                  test of iteration j+1); pending = -10 if
//                                                  |rho'| < eps^2 or rho' is non-finite, else -11
//                                                  if |omega| < eps^2, else -10 if beta =
//                                                  (rho' / rho) (alpha / omega) is non-finite;
//                                                  rho = rho'
//   host: read (tau, status), 1 copy + 1 wait
//
// Why the others cannot merge (each boundary is a global barrier):
//   * p^ -> SpMV, s^ -> SpMV: (A p^)_i gathers p^_k of other rows, so every p^_k must be written.
//   * every DOT_ini -> its DOT_fin: the second stage needs every block's partial.
//   * alpha -> x/s, omega -> x/r, rho -> next p: every element needs a scalar that exists only
//     once a reduction is complete.
// The ||s|| test is the one scalar step moved: its DOT_fin could run only after a barrier of its
// own, so it is done in bicgstab_merge_omega, after the SpMV of t (which is wasted work only in the
// last iteration; x += alpha p^ was already applied by bicgstab_merge_s, as the reference does in
// both branches). The rho and omega tests belong to the next iteration, after the host's ||r||
// test: bicgstab_merge_rho only records them (pending) and the next iteration's first kernel
// raises them, so an iteration whose tau is below atol reports convergence, as the reference does.
// Set-up runs bicgstab_merge_rho with first = 1 (status = 0, beta = 0, omega = 0, only the rho
// test) over dot_partial's partials.
//
// Status: a breakdown sets SciPy's code; kernels after it are no-ops (x stays where the reference
// leaves it). A non-finite scalar is -10 at the reference's place (dpsolve's extension, as CG's;
// SciPy iterates on NaN): rho and beta through pending, <r~, v> and alpha in bicg_merge_alpha,
// ||s||, <t, s>, <t, t> and omega in bicgstab_merge_omega; a non-finite tau is the host's
// (host_loop) or graph_step's -10. Unpreconditioned, p^ is p and s^ is s (pc inactive, phat and
// shat null: no restrict-qualified aliases).
//
// Bytes per call (s = sizeof(T), n rows, nnz stored entries, nparts <= 1024 blocks, w ELL width;
// gathers counted as nnz*s, an upper bound):
//   bicgstab_merge_p      reads 3n*s (r, p, v) [+ n*s D^-1] + 3s, writes n*s [+ n*s p^]
//   bicgstab_spmv_dot     reads the matrix (CSR: nnz*(4+s) + (n+1)*4; ELL: w*n*(4+s)) + nnz*s
//                         + n*s (r~), writes n*s (v) + nparts*s
//   bicg_merge_alpha      reads nparts*s + 2s, writes 2s
//   bicgstab_merge_s      reads 4n*s (p^, v, x, r) [+ n*s D^-1] + s, writes 2n*s [+ n*s s^]
//                         + nparts*s
//   bicgstab_spmv_dot2    reads the matrix + nnz*s + n*s (s), writes n*s (t) + 2nparts*s
//   bicgstab_dot2_partial reads 2n*s, writes 2nparts*s
//   bicgstab_merge_omega  reads 3nparts*s, writes s
//   bicgstab_merge_r      reads 5n*s (s^, t, x, r, r~), writes 2n*s + 2nparts*s
//   bicgstab_merge_rho    reads 2nparts*s + 4s, writes 5s
#include <dpsolve/common.cuh>
#include <dpsolve/precond.cuh>
#include <dpsolve/spmv.cuh>

// DPS_MID_STEP (abi.cuh): CONVERGED_MID_STEP of dpsolve/backends/_gpu.py

// Vector updates round each product on its own (dps::mul_rn), as NumPy does in the reference.
// (The dots keep their FMAs: how they round is part of the reduction order anyway.)

// {checks, p, psolve}: a pending breakdown becomes the status and the iteration does nothing;
// otherwise p = r + beta (p - omega v) and, with a pointwise M (pc), p^ = M p. pending is uniform; only
// thread 0 of block 0 writes status (nothing in this kernel reads it).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_merge_p(int n, const T* __restrict__ pending, T* __restrict__ status,
                 const T* __restrict__ beta, const T* __restrict__ omega, const T* __restrict__ r,
                 const T* __restrict__ v, T* __restrict__ p, const dyn::PrecondArgs<T> pc,
                 T* __restrict__ phat) {
    DPS_PDL();
    const T flag = pending[0];
    if (flag != T(0)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) status[0] = flag;
        return;
    }
    const T b = beta[0], w = omega[0];
    const dps::Pointwise<T> m(pc);
    const bool pre = m.active();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        const T pi = r[i] + dps::mul_rn(b, p[i] - dps::mul_rn(w, v[i]));
        p[i] = pi;
        if (pre) phat[i] = m.apply(i, pi);
    }
}

// {SpMV, DOT_ini}: thread i computes y_i = (A x)_i and adds conj(w_i) y_i to its block's partial
// (BiCGStab: v = A p^, partials of <r~, v>). One thread per row in the format W names
// (dps::thread_row: DYN_CSR_SCALAR, CSR with `width` unused; DYN_ELL, column-major ELL with
// padding column -1 and `indptr` null).
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_spmv_dot(int n, int width, const int* __restrict__ indptr,
                  const int* __restrict__ indices, const T* __restrict__ data,
                  const T* __restrict__ x, T* __restrict__ y, const T* __restrict__ w,
                  T* __restrict__ partials) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T sum = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        const int row = (int)i;
        const T yi = dps::thread_row<W>(row, n, width, indptr, indices, data, x);
        y[row] = yi;
        sum += dps::conj(w[row]) * yi;
    }
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// {x, s, psolve, DOT_ini}: x += alpha p^ (p^ = p when phat is null); s = r - alpha v, written over r;
// with a pointwise M (pc), s^ = M s; partials of <s, s>. A no-op once status != 0.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_merge_s(int n, const T* __restrict__ status, const T* __restrict__ alpha,
                 const T* __restrict__ p, const T* __restrict__ phat, const T* __restrict__ v,
                 T* __restrict__ x, T* __restrict__ r, const dyn::PrecondArgs<T> pc,
                 T* __restrict__ shat, T* __restrict__ part_ss) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    if (status[0] != T(0)) return;                       // uniform over the grid
    const T a = alpha[0];
    const dps::Pointwise<T> m(pc);
    const bool pre = m.active();
    const T* __restrict__ ph = pre ? phat : p;
    T ss = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        x[i] = x[i] + dps::mul_rn(a, ph[i]);
        const T si = r[i] - dps::mul_rn(a, v[i]);
        r[i] = si;
        if (pre) shat[i] = m.apply(i, si);
        ss += dps::conj(si) * si;
    }
    ss = dps::block_sum(ss, smem);
    if (threadIdx.x == 0) part_ss[blockIdx.x] = ss;
}

// {SpMV, DOT_ini x2}: t_i = (A s^)_i; partials of <t, s> and <t, t>. One thread per row in the
// format W names (as bicgstab_spmv_dot).
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_spmv_dot2(int n, int width, const int* __restrict__ indptr,
                   const int* __restrict__ indices, const T* __restrict__ data,
                   const T* __restrict__ x, T* __restrict__ t, const T* __restrict__ s,
                   T* __restrict__ part_ts, T* __restrict__ part_tt) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T ts = T(0), tt = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        const int row = (int)i;
        const T ti = dps::thread_row<W>(row, n, width, indptr, indices, data, x);
        t[row] = ti;
        ts += dps::conj(ti) * s[row];
        tt += dps::conj(ti) * ti;
    }
    ts = dps::block_sum(ts, smem);
    tt = dps::block_sum(tt, smem);
    if (threadIdx.x == 0) {
        part_ts[blockIdx.x] = ts;
        part_tt[blockIdx.x] = tt;
    }
}

// {DOT_ini x2} for CSR-vector (after spmv.cu's SpMV): partials of <t, s> and <t, t>, one element
// per thread (grid-stride), the same mapping as the other merge kernels.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_dot2_partial(int n, const T* __restrict__ t, const T* __restrict__ s,
                      T* __restrict__ part_ts, T* __restrict__ part_tt) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T ts = T(0), tt = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        const T ti = t[i];
        ts += dps::conj(ti) * s[i];
        tt += dps::conj(ti) * ti;
    }
    ts = dps::block_sum(ts, smem);
    tt = dps::block_sum(tt, smem);
    if (threadIdx.x == 0) {
        part_ts[blockIdx.x] = ts;
        part_tt[blockIdx.x] = tt;
    }
}

// {DOT_fin x3, ||s|| test, omega}: one block. ||s|| = sqrt(|sum of part_ss|) < atol -> status = 2;
// else omega = <t, s> / <t, t> (an |omega| below tol, the next iteration's -11, is first confirmed
// with the accurate <t, s>), and ||s||, <t, s>, <t, t> or omega non-finite (omega = 0/0 when
// t = 0, where SciPy goes on with NaN) -> status = -10. No-op once status != 0.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_merge_omega(int nparts_s, const T* __restrict__ part_ss, int nparts_t,
                     const T* __restrict__ part_ts, const T* __restrict__ part_tt,
                     const double* __restrict__ atol, dps::real_t<T> tol, int n,
                     const T* __restrict__ t, const T* __restrict__ s, T* __restrict__ omega,
                     T* __restrict__ status) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    if (status[0] != T(0)) return;
    T ss = T(0), ts = T(0), tt = T(0);
    for (int i = threadIdx.x; i < nparts_s; i += blockDim.x) ss += part_ss[i];
    for (int i = threadIdx.x; i < nparts_t; i += blockDim.x) {
        ts += part_ts[i];
        tt += part_tt[i];
    }
    ss = dps::block_sum(ss, smem);
    ts = dps::block_sum(ts, smem);
    tt = dps::block_sum(tt, smem);
    // an |omega| below tol (||s|| not converged) is confirmed with the accurate <t, s> (the
    // suspicion is thread 0's, where the sums are)
    ts = dps::confirm_dot(!((double)sqrt(fabs(ss)) < atol[0]) && fabs(ts / tt) < tol, ts, n, t, s);
    if (threadIdx.x == 0) {
        const dps::real_t<T> snorm = sqrt(fabs(ss));
        if ((double)snorm < atol[0]) {
            status[0] = T(DPS_MID_STEP);
        } else {
            const T w = ts / tt;
            const bool finite = isfinite(snorm) && dps::is_finite(ts) && dps::is_finite(tt)
                                && dps::is_finite(w);
            if (!finite) status[0] = T(-10);
            else omega[0] = w;
        }
    }
}

// {x, r, DOT_ini x2}: x += omega s^ (s^ = s, held in r, when shat is null); r = s - omega t;
// partials of <r~, r> and <r, r>. A no-op once status != 0. Each thread reads its s_i before it
// overwrites r_i.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_merge_r(int n, const T* __restrict__ status, const T* __restrict__ omega,
                 const T* __restrict__ shat, const T* __restrict__ t, T* __restrict__ x,
                 T* __restrict__ r, const T* __restrict__ rt, T* __restrict__ part_rho,
                 T* __restrict__ part_rr) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    if (status[0] != T(0)) return;                       // uniform over the grid
    const T w = omega[0];
    const bool pre = (shat != nullptr);
    T rho = T(0), rr = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        const T si = r[i];
        x[i] = x[i] + dps::mul_rn(w, pre ? shat[i] : si);
        const T ri = si - dps::mul_rn(w, t[i]);
        r[i] = ri;
        rho += dps::conj(rt[i]) * ri;
        rr += dps::conj(ri) * ri;
    }
    rho = dps::block_sum(rho, smem);
    rr = dps::block_sum(rr, smem);
    if (threadIdx.x == 0) {
        part_rho[blockIdx.x] = rho;
        part_rr[blockIdx.x] = rr;
    }
}

// {DOT_fin x2, tau, beta, checks}: one block. rho' = sum of part_rho, rr = sum of part_rr;
// tau = sqrt(|rr|); pending = -10 if |rho'| < tol (a fast rho' below tol is first replaced by the
// accurate <r~, r>, dps::confirm_dot) or rho' is non-finite, else (not first) -11 if
// |omega| < tol, else -10 if beta = (rho' / rho) * (alpha / omega) (the reference's order) is
// non-finite; rho = rho'. first = 1 at set-up:
// status = 0, beta = 0, omega = 0 (so that p = r + 0 (0 - 0 v) = r with p and v zeroed).
// Otherwise a no-op once status != 0.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_merge_rho(int nparts, const T* __restrict__ part_rho, const T* __restrict__ part_rr,
                   int first, dps::real_t<T> tol, int n, const T* __restrict__ rt,
                   const T* __restrict__ r, T* __restrict__ rho, const T* __restrict__ alpha,
                   T* __restrict__ omega, T* __restrict__ beta, T* __restrict__ tau,
                   T* __restrict__ pending, T* __restrict__ status) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    if (!first && status[0] != T(0)) return;
    T s_rho = T(0), s_rr = T(0);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        s_rho += part_rho[i];
        s_rr += part_rr[i];
    }
    s_rho = dps::block_sum(s_rho, smem);
    s_rr = dps::block_sum(s_rr, smem);
    s_rho = dps::confirm_dot(fabs(s_rho) < tol, s_rho, n, rt, r);   // accurate <r~, r> if tiny
    if (threadIdx.x == 0) {
        tau[0] = sqrt(fabs(s_rr));
        if (first) {
            status[0] = T(0);
            omega[0] = T(0);
            beta[0] = T(0);
            pending[0] = (fabs(s_rho) < tol || !dps::is_finite(s_rho)) ? T(-10) : T(0);
        } else {
            const T w = omega[0];
            const T b = (s_rho / rho[0]) * (alpha[0] / w);
            pending[0] = (fabs(s_rho) < tol || !dps::is_finite(s_rho)) ? T(-10)
                       : (fabs(w) < tol) ? T(-11)
                       : !dps::is_finite(b) ? T(-10) : T(0);
            beta[0] = b;
        }
        rho[0] = s_rho;
    }
}
