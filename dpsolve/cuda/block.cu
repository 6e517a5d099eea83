// block.cu - CG on k right-hand sides at once, A read once an iteration for all of them
// (dpsolve/_block_fused.py drives these kernels; its HostBlockCG is the same algorithm in NumPy).
//
// X, R, P and Q are n x k arrays stored row-interleaved (C order: entry (i, j) at i * k + j; a
// C-ordered (n, k) B is already so). A row is taken by a group of G lanes (G the power of two
// >= k, at most 32: the driver splits wider blocks into passes of at most 32 columns); lane c of
// the group takes column c, so the row's entries (indptr, indices, data) are read once for the k
// columns (the group's lanes load the same addresses: one broadcast) and the k values of P's row
// j are contiguous. Each column has its own scalars on the device and is frozen once it has
// converged or broken down (active[j] = 0): its lanes then do nothing. Per-column sums are
// two-stage and deterministic: each block writes partials[j * blocks + block] (a column's
// partials contiguous, so the block that sums a column reads them coalesced), a block per column
// sums them in a fixed order.
//
//   block_start<T, G>      R = B - Q (Q = A X0, or no Q: X0 = 0); partials of r^H D^-1 r, r^H r
//   block_spmm_dot<T, G, false>  Q = A P (active columns); partials of p^H q
//   block_alpha<T>         pq_j = the sum; alpha_j = rz_j / pq_j, or, where pq_j is 0 or alpha_j
//                          not finite, the column breaks down (status 2, frozen); alpha_j = 0
//                          on a frozen column
//   block_update<T, G>     R -= alpha Q; partials of r^H D^-1 r and r^H r
//   block_beta<T>          rz_new_j, rr_j = the sums; first (after block_start): converged when
//                          rr_j <= tol2_j, else rz_j = rz_new_j; later: iters_j += 1, converged
//                          when rr_j <= tol2_j (status 1), a non-finite sum breaks down
//                          (status 2), a column at its iteration limit stops (status 3), else
//                          beta_j = rz_new_j / rz_j, rz_j = rz_new_j
//   block_direction<T, G>  Pout = D^-1 R + beta Pin on the active columns (first: D^-1 R), and
//                          X's steps: P is double-buffered (the driver swaps Pin and Pout every
//                          iteration) so that X is read and written every other iteration, not
//                          every one (9.5 vector passes an iteration, not 10). On a deferring
//                          iteration (flush = 0) a column that goes on keeps its step alpha_j
//                          in pend_j; on a flushing one (flush = 1) X += pend Pout + alpha Pin
//                          (Pout, before it is overwritten, still holds the previous P). A
//                          column frozen by block_beta just now takes its steps at once.
//   block_flush<T, G>      X += pend Pold: a step deferred by the last iteration run (the run
//                          stopped after a deferring iteration)
// D^-1: dinv (one value a row, the same for every column), or null (no preconditioner).
#include <dpsolve/common.cuh>

// The SpMMs' entries taken together (dps::gather_dot), a compile-time knob that
// scripts/profile-block --unrolls compares side by side. 1 (an entry at a time, the compiler's
// own schedule) beat 4 and 8 on the H100: 160^3, k = 16, 703 against 895 and 844 us; 100^3
// 172 against 185 and 183 us. Two row orders that were to serve P's neighbour rows from L1 lost
// to grid-stride rows: a contiguous chunk a block (160^3: 1,184-1,846 us), and 2, 4 or 8
// consecutive rows a lane group (160^3: 887-916 against 820 us on another H100; 100^3: 159-220
// against 171)
#ifndef DPS_BLOCK_UNROLL
#define DPS_BLOCK_UNROLL 1
#endif

namespace blockcg {

// this thread's column (its lane within its group of G) and whether it works on it
template <int G>
__device__ __forceinline__ int column() { return threadIdx.x % G; }

// This block's partial sums per column: v is the thread's partial for column column<G>() (0
// where that column is not < k). Lanes of one column within a warp are c, c + G, ...: folded by
// shuffles onto lanes 0..G-1, then the warps' sums added in warp order by thread c.
// partials[c * gridDim.x + blockIdx.x]. Every thread of the block must call it; smem holds
// DPS_BLOCK / DPS_WARP * G values.
template <typename T, int G>
__device__ __forceinline__ void column_partials(T v, int k, T* smem, T* __restrict__ partials) {
#pragma unroll
    for (int off = DPS_WARP / 2; off >= G; off >>= 1) v += dps::shfl_down(v, off);
    const int lane = threadIdx.x % DPS_WARP, warp = threadIdx.x / DPS_WARP;
    if (lane < G) smem[warp * G + lane] = v;
    __syncthreads();
    if ((int)threadIdx.x < k) {
        T s = T(0);
        for (int w = 0; w < (int)(blockDim.x / DPS_WARP); ++w) s += smem[w * G + threadIdx.x];
        partials[(size_t)threadIdx.x * gridDim.x + blockIdx.x] = s;
    }
    __syncthreads();                      // smem reused by the caller
}

// the first group of this thread and the stride between groups (grid-stride over rows)
template <int G>
__device__ __forceinline__ int first_row() { return (blockIdx.x * blockDim.x + threadIdx.x) / G; }
template <int G>
__device__ __forceinline__ int row_stride() { return gridDim.x * blockDim.x / G; }

// a block's per-column sum over the nparts partials of column j (a block a column)
template <typename T>
__device__ __forceinline__ T column_total(int nparts, int j,
                                          const T* __restrict__ partials, T* smem) {
    T s = T(0);
    for (int b = threadIdx.x; b < nparts; b += blockDim.x) s += partials[(size_t)j * nparts + b];
    return dps::block_sum(s, smem);
}

// a row's entry r of one column into the column's sums: rz += conj(r) D^-1 r, rr += conj(r) r
template <typename T>
__device__ __forceinline__ void add_sums(T r, const T* __restrict__ dinv, int i, T& rz, T& rr) {
    const T z = dinv != nullptr ? dinv[i] * r : r;
    rz += dps::conj(r) * z;
    rr += dps::conj(r) * r;
}

// sum_e data[e] (D^-1 P)[indices[e], c] over a row's entries [e, end), in order (SCALED: each
// gathered value scaled by dinv first, as M p then A (M p); else no D^-1 and dinv unread: a
// compile-time choice, so the unscaled SpMM keeps its registers -- 32 against 64 with a run-time
// test on sm_90, 8 resident blocks an SM against 4); DPS_BLOCK_UNROLL entries at a time
template <bool SCALED, typename T>
__device__ __forceinline__ T row_times(int e, int end, const int* __restrict__ indices,
                                       const T* __restrict__ data, const T* __restrict__ dinv,
                                       const T* __restrict__ P, int k, int c) {
    return dps::gather_dot<DPS_BLOCK_UNROLL>(e, end, indices, data, [=](int col) {
        const T p = P[(size_t)col * k + c];
        if constexpr (SCALED) return dinv[col] * p;
        else return p;
    });
}

// a breakdown-small value: |x| < brk, as |x|^2 < brk^2 (brk2: eps^4 of the working precision)
template <typename T>
__device__ __forceinline__ bool tiny(T x, T brk2) { return dps::abs2(x) < dps::real(brk2); }

// x scaled by D^-1's row i, or x (dinv null)
template <typename T>
__device__ __forceinline__ T scaled(const T* __restrict__ dinv, int i, T x) {
    return dinv != nullptr ? dinv[i] * x : x;
}

}  // namespace blockcg

template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
block_start(int n, int k, const T* __restrict__ B, const T* __restrict__ Q, T* __restrict__ R,
            const T* __restrict__ dinv, const int* __restrict__ active,
            T* __restrict__ part_rz, T* __restrict__ part_rr) {
    __shared__ T smem[DPS_BLOCK / DPS_WARP * G];
    const int c = blockcg::column<G>();
    const bool on = c < k && active[c];
    T rz = T(0), rr = T(0);
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        if (!on) continue;
        const size_t at = (size_t)i * k + c;
        const T r = Q != nullptr ? B[at] - Q[at] : B[at];
        R[at] = r;
        blockcg::add_sums(r, dinv, i, rz, rr);
    }
    blockcg::column_partials<T, G>(rz, k, smem, part_rz);
    blockcg::column_partials<T, G>(rr, k, smem, part_rr);
}

// Q = A D^-1 P (SCALED; else A P, dinv unread) on the active columns, and the partials of w^H q
// (W = P for CG, R~ for BiCGStab)
template <typename T, int G, bool SCALED>
__global__ void __launch_bounds__(DPS_BLOCK)
block_spmm_dot(int n, int k, const int* __restrict__ indptr, const int* __restrict__ indices,
               const T* __restrict__ data, const T* __restrict__ dinv, const T* __restrict__ P,
               T* __restrict__ Q, const T* __restrict__ W, const int* __restrict__ active,
               T* __restrict__ partials) {
    __shared__ T smem[DPS_BLOCK / DPS_WARP * G];
    const int c = blockcg::column<G>();
    const bool on = c < k && active[c];
    T wq = T(0);
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        if (!on) continue;
        const T q = blockcg::row_times<SCALED>(indptr[i], indptr[i + 1], indices, data, dinv, P,
                                               k, c);
        const size_t at = (size_t)i * k + c;
        Q[at] = q;
        wq += dps::conj(W[at]) * q;
    }
    blockcg::column_partials<T, G>(wq, k, smem, partials);
}

// alpha_j = num_j / (the sum of the partials: CG's p^H q, BiCGStab's <r~, v>); where the sum is
// 0 or alpha is not finite the column breaks down (status 2, frozen). Negative curvature is not
// a breakdown: CG goes on, as SciPy's does.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
block_alpha(int nparts, int k, const T* __restrict__ partials, const T* __restrict__ num,
            int* __restrict__ active, int* __restrict__ status, T* __restrict__ alpha) {
    __shared__ T smem[DPS_WARP];
    const int j = blockIdx.x;
    const T den = blockcg::column_total(nparts, j, partials, smem);
    if (threadIdx.x != 0) return;
    if (!active[j]) {                     // no step for a frozen column (block_direction)
        alpha[j] = T(0);
        return;
    }
    const T a = num[j] / den;
    if (den == T(0) || !dps::is_finite(den) || !dps::is_finite(a)) {
        active[j] = 0;
        status[j] = 2;
        alpha[j] = T(0);
        return;
    }
    alpha[j] = a;
}

template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
block_update(int n, int k, const T* __restrict__ Q, T* __restrict__ R, const T* __restrict__ dinv,
             const T* __restrict__ alpha, const int* __restrict__ active,
             T* __restrict__ part_rz, T* __restrict__ part_rr) {
    __shared__ T smem[DPS_BLOCK / DPS_WARP * G];
    const int c = blockcg::column<G>();
    const bool on = c < k && active[c];
    const T a = on ? alpha[c] : T(0);
    T rz = T(0), rr = T(0);
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        if (!on) continue;
        const size_t at = (size_t)i * k + c;
        const T r = R[at] - a * Q[at];
        R[at] = r;
        blockcg::add_sums(r, dinv, i, rz, rr);
    }
    blockcg::column_partials<T, G>(rz, k, smem, part_rz);
    blockcg::column_partials<T, G>(rr, k, smem, part_rr);
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
block_beta(int nparts, int k, const T* __restrict__ part_rz, const T* __restrict__ part_rr,
           const T* __restrict__ tol2, int first, T* __restrict__ rz, T* __restrict__ rr,
           T* __restrict__ beta, int* __restrict__ active, int* __restrict__ status,
           int* __restrict__ iters, const int* __restrict__ limit) {
    __shared__ T smem[DPS_WARP];
    const int j = blockIdx.x;
    const T rz_new = blockcg::column_total(nparts, j, part_rz, smem);
    const T rr_new = blockcg::column_total(nparts, j, part_rr, smem);
    if (threadIdx.x != 0 || !active[j]) return;
    rr[j] = rr_new;
    if (!first) iters[j] += 1;
    if (!dps::is_finite(rr_new) || !dps::is_finite(rz_new)) {
        active[j] = 0;
        status[j] = 2;
        return;
    }
    if (dps::real(rr_new) <= dps::real(tol2[j])) {
        active[j] = 0;
        status[j] = 1;
        return;
    }
    if (!first && iters[j] >= limit[j]) {       // this column's iterations are spent
        active[j] = 0;
        status[j] = 3;
        return;
    }
    beta[j] = first ? T(0) : rz_new / rz[j];
    rz[j] = rz_new;
}

template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
block_direction(int n, int k, const T* __restrict__ R, const T* __restrict__ dinv,
                const T* __restrict__ alpha, const T* __restrict__ beta,
                const int* __restrict__ active, int first, int flush, T* __restrict__ X,
                const T* __restrict__ Pin, T* __restrict__ Pout, T* __restrict__ pend) {
    const int c = blockcg::column<G>();
    if (c >= k) return;
    const bool on = active[c];
    const T a = first ? T(0) : alpha[c], b = on ? beta[c] : T(0);
    const bool defer = on && !flush && !first;
    // pend is written on deferring iterations (by one thread a column) and read on flushing
    // ones only: no thread reads it in the iteration that writes it
    if (!flush && blockIdx.x == 0 && threadIdx.x < G) pend[c] = defer ? a : T(0);
    const T ax = defer ? T(0) : a;                 // X's step on Pin now
    const T ao = flush ? pend[c] : T(0);           // and the deferred one, on Pout's old P
    if (!on && ax == T(0) && ao == T(0)) return;
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        const size_t at = (size_t)i * k + c;
        const T p = first ? T(0) : Pin[at];
        if (ao != T(0)) X[at] += ao * Pout[at] + ax * p;
        else if (ax != T(0)) X[at] += ax * p;
        if (on) Pout[at] = blockcg::scaled(dinv, i, R[at]) + b * p;
    }
}

template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
block_flush(int n, int k, const T* __restrict__ pend, const T* __restrict__ Pold,
            T* __restrict__ X) {
    const int c = blockcg::column<G>();
    if (c >= k) return;
    const T ao = pend[c];
    if (ao == T(0)) return;
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        const size_t at = (size_t)i * k + c;
        X[at] += ao * Pold[at];
    }
}

// ---- BiCGStab on k right-hand sides (HostBlockBiCGStab: the same steps in NumPy) ----
// SciPy's / dpsolve.reference.bicgstab's algorithm per column, M = D^-1 or none; a column frozen
// when it converged (status 1), broke down (2: rho or omega below eps^2, <r~, v> = 0, a value
// not finite; the driver hands it to the single solve) or spent its limit (3). An iteration:
//   bs_direction  P = R (the first), else P = R + beta (P - omega V)
//   block_spmm_dot  V = A D^-1 P (<T, G, true> with Jacobi); partials of r~^H v
//   block_alpha   alpha = rho / <r~, v>
//   bs_s          S = R - alpha V (in R's place); partials of s^H s
//   bs_half       ||s|| <= tol: converged at the half step (half = 1: x += alpha D^-1 p only)
//   bs_spmm_ts    T = A D^-1 S (<T, G, true> with Jacobi); partials of t^H s and t^H t
//   bs_omega      omega = <t, s> / <t, t>
//   bs_update     X += alpha D^-1 P, then + omega D^-1 S; R = S - omega T; partials of r^H r,
//                 r~^H r (a half-step column: X += alpha D^-1 P alone)
//   bs_next       iters + 1; converged when ||r|| <= tol, the limit, the breakdowns; beta

template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_start(int n, int k, const T* __restrict__ B, const T* __restrict__ Q, T* __restrict__ R,
         T* __restrict__ Rt, const int* __restrict__ active, T* __restrict__ part_rr) {
    __shared__ T smem[DPS_BLOCK / DPS_WARP * G];
    const int c = blockcg::column<G>();
    const bool on = c < k && active[c];
    T rr = T(0);
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        if (!on) continue;
        const size_t at = (size_t)i * k + c;
        const T r = Q != nullptr ? B[at] - Q[at] : B[at];
        R[at] = r;
        Rt[at] = r;
        rr += dps::conj(r) * r;
    }
    blockcg::column_partials<T, G>(rr, k, smem, part_rr);
}

// after bs_start: rr = rho = the sum (r~ = r); converged when rr <= tol2, else a non-finite or
// tiny rho breaks down
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_first(int nparts, int k, const T* __restrict__ part_rr, const T* __restrict__ tol2, T brk2,
         T* __restrict__ rr, T* __restrict__ rho, int* __restrict__ active,
         int* __restrict__ status) {
    __shared__ T smem[DPS_WARP];
    const int j = blockIdx.x;
    const T s = blockcg::column_total(nparts, j, part_rr, smem);
    if (threadIdx.x != 0 || !active[j]) return;
    rr[j] = s;
    rho[j] = s;
    if (dps::is_finite(s) && dps::real(s) <= dps::real(tol2[j])) {
        active[j] = 0;
        status[j] = 1;
    } else if (!dps::is_finite(s) || blockcg::tiny(s, brk2)) {
        active[j] = 0;
        status[j] = 2;
    }
}

template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_direction(int n, int k, const T* __restrict__ R, const T* __restrict__ V,
             const T* __restrict__ beta, const T* __restrict__ omega,
             const int* __restrict__ active, int first, T* __restrict__ P) {
    const int c = blockcg::column<G>();
    if (c >= k || !active[c]) return;
    const T b = beta[c], w = omega[c];
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        const size_t at = (size_t)i * k + c;
        P[at] = first ? R[at] : R[at] + b * (P[at] - w * V[at]);
    }
}

template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_s(int n, int k, const T* __restrict__ V, const T* __restrict__ alpha,
     const int* __restrict__ active, T* __restrict__ R, T* __restrict__ part_ss) {
    __shared__ T smem[DPS_BLOCK / DPS_WARP * G];
    const int c = blockcg::column<G>();
    const bool on = c < k && active[c];
    const T a = on ? alpha[c] : T(0);
    T ss = T(0);
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        if (!on) continue;
        const size_t at = (size_t)i * k + c;
        const T s = R[at] - a * V[at];
        R[at] = s;
        ss += dps::conj(s) * s;
    }
    blockcg::column_partials<T, G>(ss, k, smem, part_ss);
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_half(int nparts, int k, const T* __restrict__ part_ss, const T* __restrict__ tol2,
        int* __restrict__ active, int* __restrict__ status, int* __restrict__ iters,
        int* __restrict__ half) {
    __shared__ T smem[DPS_WARP];
    const int j = blockIdx.x;
    const T ss = blockcg::column_total(nparts, j, part_ss, smem);
    if (threadIdx.x != 0 || !active[j]) return;
    if (!dps::is_finite(ss)) {
        active[j] = 0;
        status[j] = 2;
    } else if (dps::real(ss) <= dps::real(tol2[j])) {
        active[j] = 0;
        status[j] = 1;
        iters[j] += 1;
        half[j] = 1;
    }
}

template <typename T, int G, bool SCALED>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_spmm_ts(int n, int k, const int* __restrict__ indptr, const int* __restrict__ indices,
           const T* __restrict__ data, const T* __restrict__ dinv, const T* __restrict__ S,
           T* __restrict__ Tv, const int* __restrict__ active, T* __restrict__ part_ts,
           T* __restrict__ part_tt) {
    __shared__ T smem[DPS_BLOCK / DPS_WARP * G];
    const int c = blockcg::column<G>();
    const bool on = c < k && active[c];
    T ts = T(0), tt = T(0);
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        if (!on) continue;
        const T t = blockcg::row_times<SCALED>(indptr[i], indptr[i + 1], indices, data, dinv, S,
                                               k, c);
        const size_t at = (size_t)i * k + c;
        Tv[at] = t;
        ts += dps::conj(t) * S[at];
        tt += dps::conj(t) * t;
    }
    blockcg::column_partials<T, G>(ts, k, smem, part_ts);
    blockcg::column_partials<T, G>(tt, k, smem, part_tt);
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_omega(int nparts, int k, const T* __restrict__ part_ts, const T* __restrict__ part_tt,
         int* __restrict__ active, int* __restrict__ status, T* __restrict__ omega) {
    __shared__ T smem[DPS_WARP];
    const int j = blockIdx.x;
    const T ts = blockcg::column_total(nparts, j, part_ts, smem);
    const T tt = blockcg::column_total(nparts, j, part_tt, smem);
    if (threadIdx.x != 0 || !active[j]) return;
    const T w = ts / tt;
    if (!dps::is_finite(ts) || !dps::is_finite(tt) || !dps::is_finite(w)) {
        active[j] = 0;
        status[j] = 2;
        return;
    }
    omega[j] = w;
}

template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_update(int n, int k, const T* __restrict__ P, const T* __restrict__ Tv,
          const T* __restrict__ Rt, const T* __restrict__ dinv, const T* __restrict__ alpha,
          const T* __restrict__ omega, const int* __restrict__ active,
          const int* __restrict__ half, T* __restrict__ X, T* __restrict__ R,
          T* __restrict__ part_rr, T* __restrict__ part_rho) {
    __shared__ T smem[DPS_BLOCK / DPS_WARP * G];
    const int c = blockcg::column<G>();
    const bool on = c < k && active[c], halfway = c < k && half[c];
    const T a = on || halfway ? alpha[c] : T(0), w = on ? omega[c] : T(0);
    T rr = T(0), rho = T(0);
    for (int i = blockcg::first_row<G>(); i < n; i += blockcg::row_stride<G>()) {
        if (!on && !halfway) continue;
        const size_t at = (size_t)i * k + c;
        T x = X[at] + a * blockcg::scaled(dinv, i, P[at]);
        if (on) {
            const T s = R[at];
            x = x + w * blockcg::scaled(dinv, i, s);
            const T r = s - w * Tv[at];
            R[at] = r;
            rr += dps::conj(r) * r;
            rho += dps::conj(Rt[at]) * r;
        }
        X[at] = x;
    }
    blockcg::column_partials<T, G>(rr, k, smem, part_rr);
    blockcg::column_partials<T, G>(rho, k, smem, part_rho);
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bs_next(int nparts, int k, const T* __restrict__ part_rr, const T* __restrict__ part_rho,
        const T* __restrict__ tol2, T brk2, const int* __restrict__ limit, T* __restrict__ rr,
        T* __restrict__ rho, const T* __restrict__ alpha, const T* __restrict__ omega,
        T* __restrict__ beta, int* __restrict__ active, int* __restrict__ status,
        int* __restrict__ iters, int* __restrict__ half) {
    __shared__ T smem[DPS_WARP];
    const int j = blockIdx.x;
    const T rr_new = blockcg::column_total(nparts, j, part_rr, smem);
    const T rho_new = blockcg::column_total(nparts, j, part_rho, smem);
    if (threadIdx.x != 0) return;
    half[j] = 0;
    if (!active[j]) return;
    rr[j] = rr_new;
    iters[j] += 1;
    int code = 0;
    if (!dps::is_finite(rr_new)) code = 2;
    else if (dps::real(rr_new) <= dps::real(tol2[j])) code = 1;
    else if (iters[j] >= limit[j]) code = 3;
    else if (!dps::is_finite(rho_new) || blockcg::tiny(rho_new, brk2)
             || blockcg::tiny(omega[j], brk2)) code = 2;
    if (code == 0) {
        const T b = (rho_new / rho[j]) * (alpha[j] / omega[j]);
        if (!dps::is_finite(b)) code = 2;
        else {
            beta[j] = b;
            rho[j] = rho_new;
        }
    }
    if (code != 0) {
        active[j] = 0;
        status[j] = code;
    }
}
