// cg1.cu - the single-reduction CG (Chronopoulos & Gear 1989; PETSc's KSPCG with
// -ksp_cg_single_reduction) of dpsolve/methods/cg1: its loop (gpu.py) runs over an executor, so
// that the distributed `cuda` variant makes ONE all-reduce per iteration where CG makes two
// (three preconditioned). The specification is dpsolve/methods/cg1/reference.py.
//
// One iteration j is five launches around the SpMV, then the all-reduce (a no-op on one GPU):
//
//   cg1_update<T>    status = pending (a bad alpha or beta found by the last cg1_step/cg1_start)
//                    and nothing else; otherwise
//                    p = u + beta p; s = w + beta s (the previous iteration's end, moved here);
//                    x += alpha p; r -= alpha s; u = D^-1 r (Jacobi; u is r without);
//                    per-block partials of <r, u> and, preconditioned, of <r, r>
//   spmv             w = A u (the executor's: a halo exchange around it when distributed)
//   blas1's dot_partial<T>  per-block partials of <u, w>
//   cg1_finish<T>    one block: red[0] = <r, u>, red[1] = <u, w>, red[2] = <r, r> (red[0] without
//                    a preconditioner, where u is r) -- three ADJACENT slots
//   (ex.allreduce_slots(red): the three local sums summed over the ranks in one all-reduce)
//   cg1_step<T>      one thread: gamma' = red[0], delta = red[1], tau = sqrt(|red[2]|);
//                    beta = gamma' / gamma; alpha = gamma' / (delta - beta gamma' / alpha);
//                    gamma = gamma'; pending = -10 if alpha or beta is non-finite, else 0
//   host: read (tau, status), 1 copy + 1 wait (host_loop)
//
// Set-up: r = b - A x, u = D^-1 r, w = A u, blas1's dot_partial for <r, u>, <r, r>, <u, w>,
// cg1_finish, the all-reduce, p = s = 0, then cg1_start<T> (one thread): gamma = red[0],
// tau = sqrt(|red[2]|), alpha = gamma / delta, beta = 0, status = 0, pending = -10 if alpha is
// non-finite. With beta = 0 and p = s = 0 the first cg1_update makes p = u, s = w exactly.
//
// Why the p and s updates open the next iteration: the reference updates them at the end of
// iteration j, after its tau test would have stopped the loop; the vectors are the same, and
// one pass over p and s saves a launch and n*s bytes each way.
// Why alpha's test is pending: the reference tests alpha' at the head of iteration j + 1, after the
// tau test (a converged solve reports 0, not -10) -- cg1_step only records it and the next
// cg1_update raises it, x and r untouched (CG's O2 test stops there too). A non-finite tau is the
// host's -10 (host_loop), after the callback, as the reference's.
// The all-reduce: every rank computes the scalars from the same reduced values, so every rank
// takes the same branch; the all-reduce itself runs every iteration on every rank, status or not.
//
// Vector updates round each product on its own (dps::mul_rn), as NumPy does in the reference.
//
// Bytes per call below: s = sizeof(T), n rows, nparts <= 1024 blocks (ops.merge_parts), [..] when
// preconditioned. Per iteration besides the SpMV: cg1_update 9n*s (u is r) [12n*s], dot_partial
// 2n*s, the rest O(nparts*s): 11n*s [14n*s], against 13n*s [18n*s] for variant cuda's CG (its
// DOT, two AXPYs, DOT [+ Jacobi, DOT], XPAY) and one vector (s) more in memory.
#include <dpsolve/common.cuh>
#include <dpsolve/precond.cuh>

static_assert(DPS_SLOT_CG1_DELTA == DPS_SLOT_CG1_GAMMA + 1 &&
              DPS_SLOT_CG1_RR == DPS_SLOT_CG1_GAMMA + 2,
              "cg1: gamma', delta and <r, r> are three adjacent slots (one all-reduce)");

// {p, s, x, r, psolve, DOT_ini x2}: see above. pending is uniform, so every block returns alike;
// only thread 0 of block 0 writes status (nothing in this kernel reads it). pre says a pointwise
// M (pc, precond.cuh) is applied (a flag, not pc's own test: a rank with no rows has null vectors
// and must still write its zero partials of <r, r>). Unpreconditioned, pc, u and part_rr are
// null and r plays u
// (no restrict-qualified aliases): each thread reads its u_i (r_i) before it overwrites r_i.
// Reads 3s (pending, alpha, beta) + 5n*s (r, w, p, s, x) [+ 2n*s: u, D^-1]; writes 4n*s
// (p, s, x, r) [+ n*s: u] + nparts*s [+ nparts*s] (partials).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
cg1_update(int n, int pre, const T* __restrict__ pending, T* __restrict__ status,
           const T* __restrict__ alpha, const T* __restrict__ beta,
           const dyn::PrecondArgs<T> pc, T* __restrict__ u, const T* __restrict__ w,
           T* __restrict__ p, T* __restrict__ s, T* __restrict__ x, T* __restrict__ r,
           T* __restrict__ part_ru, T* __restrict__ part_rr) {
    __shared__ T smem[DPS_WARP];
    const T flag = pending[0];
    if (flag != T(0)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) status[0] = flag;
        return;
    }
    const T a = alpha[0], b = beta[0];
    const dps::Pointwise<T> m(pc);
    T ru = T(0), rr = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        const T ri_old = r[i];
        const T ui = pre ? u[i] : ri_old;
        const T pi = ui + dps::mul_rn(b, p[i]);          // p = u + beta p
        const T si = w[i] + dps::mul_rn(b, s[i]);        // s = w + beta s
        p[i] = pi;
        s[i] = si;
        x[i] = x[i] + dps::mul_rn(a, pi);                // x += alpha p
        const T ri = ri_old - dps::mul_rn(a, si);        // r -= alpha s
        r[i] = ri;
        if (pre) {
            const T zi = m.apply(i, ri);                 // u = M r
            u[i] = zi;
            ru += dps::conj(ri) * zi;
            rr += dps::conj(ri) * ri;
        } else {
            ru += dps::conj(ri) * ri;
        }
    }
    ru = dps::block_sum(ru, smem);
    if (pre) rr = dps::block_sum(rr, smem);          // block-uniform condition
    if (threadIdx.x == 0) {
        part_ru[blockIdx.x] = ru;
        if (pre) part_rr[blockIdx.x] = rr;
    }
}

// {DOT_fin x3}: one block sums the partials into the three adjacent slots red[0..2]: <r, u> from
// part_ru[0:n_ru], <u, w> from part_uw[0:n_uw], <r, r> from part_rr[0:n_ru] (red[0] again when
// part_rr is null: u is r). The sums are this rank's; the all-reduce that follows adds the ranks'.
// Reads (n_ru [+ n_ru] + n_uw)*s; writes 3s.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
cg1_finish(int n_ru, const T* __restrict__ part_ru, const T* __restrict__ part_rr, int n_uw,
           const T* __restrict__ part_uw, T* __restrict__ red) {
    __shared__ T smem[DPS_WARP];
    const bool pre = (part_rr != nullptr);
    T s_ru = T(0), s_rr = T(0), s_uw = T(0);
    for (int i = threadIdx.x; i < n_ru; i += blockDim.x) {
        s_ru += part_ru[i];
        if (pre) s_rr += part_rr[i];
    }
    for (int i = threadIdx.x; i < n_uw; i += blockDim.x) s_uw += part_uw[i];
    s_ru = dps::block_sum(s_ru, smem);
    s_uw = dps::block_sum(s_uw, smem);
    if (pre) s_rr = dps::block_sum(s_rr, smem);      // block-uniform condition
    if (threadIdx.x == 0) {
        red[0] = s_ru;
        red[1] = s_uw;
        red[2] = pre ? s_rr : s_ru;
    }
}

// Set-up, one thread, after the all-reduce of red: gamma = <r, u>; tau = sqrt(|<r, r>|);
// alpha = gamma / delta (CG's first alpha, <r, u> / <u, A u>); beta = 0; status = 0; pending = -10
// when alpha is non-finite (A u orthogonal to u: raised by the first cg1_update, after the host's
// tau test), with alpha = 0. Reads 3s; writes 6s.
template <typename T>
__global__ void cg1_start(const T* __restrict__ red, T* __restrict__ gamma, T* __restrict__ alpha,
                          T* __restrict__ beta, T* __restrict__ tau, T* __restrict__ status,
                          T* __restrict__ pending) {
    const T g = red[0], d = red[1];
    const T a = g / d;
    const bool ok = dps::is_finite(a);
    gamma[0] = g;
    tau[0] = sqrt(fabs(red[2]));
    alpha[0] = ok ? a : T(0);
    beta[0] = T(0);
    status[0] = T(0);
    pending[0] = ok ? T(0) : T(DPS_BREAKDOWN);
}

// The scalar step, one thread, after the all-reduce of red; a no-op once status != 0. In the
// reference's order of operations: tau = sqrt(|<r, r>|); beta = gamma' / gamma;
// alpha = gamma' / (delta - (beta gamma') / alpha), whose denominator is <p', A p'> in exact
// arithmetic; gamma = gamma'. A non-finite beta or alpha (a zero or non-finite denominator: A is
// not positive definite, or an overflow) sets pending = -10 (and beta = alpha = 0), raised by the
// next cg1_update after the host's tau test. Reads 3s + 3s + s; writes 5s.
template <typename T>
__global__ void cg1_step(const T* __restrict__ red, T* __restrict__ gamma, T* __restrict__ alpha,
                         T* __restrict__ beta, T* __restrict__ tau,
                         const T* __restrict__ status, T* __restrict__ pending) {
    if (status[0] != T(0)) return;
    const T g1 = red[0], d = red[1];
    tau[0] = sqrt(fabs(red[2]));
    const T b = g1 / gamma[0];
    const T a = g1 / (d - (b * g1) / alpha[0]);
    const bool ok = dps::is_finite(b) && dps::is_finite(a);
    gamma[0] = g1;
    beta[0] = ok ? b : T(0);
    alpha[0] = ok ? a : T(0);
    pending[0] = ok ? T(0) : T(DPS_BREAKDOWN);
}
