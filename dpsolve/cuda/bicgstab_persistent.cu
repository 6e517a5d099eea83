// bicgstab_persistent.cu - variant "persistent": the whole BiCGStab solve in ONE cooperative
// kernel (the scheme of cg_persistent.cu; semantics of bicgstab_dynamic.cu; specification:
// dpsolve/reference/bicgstab.py).
//
// The host launches bicgstab_persistent<T, W> once (a cooperative launch, grid sized from the
// occupancy calculator so that every block is resident) and waits once. Global barriers are
// cooperative_groups grid.sync(). An iteration has two SpMVs, v = A p^ and t = A s^, each after a
// decision on a global reduction (rho and ||r|| before the first, <r~, v> before the second), and
// the update needs three more sums (||s||, <t, s>, <t, t>): three grid.sync per iteration.
//
//   set-up     r = b - A x; r~ = r; partials of <r~,r> and <r,r>                -> grid.sync
//   prologue   every block finishes the <r~,r> / <r,r> partials itself (same order, same bits in
//              every block): rho_j, tau_j = ||r_j||. Every block makes the same decision, in the
//              reference's order: tau non-finite (j > 0) -> -10 at j; j == maxiter -> maxiter;
//              tau < atol -> 0 at j; |rho| < eps^2 or rho non-finite -> -10 at j (shadow_head);
//              j > 0 and |omega| < eps^2 -> -11 at j; beta = (rho_j / rho_{j-1}) (alpha / omega)
//              (0 for j = 0) non-finite -> -10 at j.
//   phase V    p_j = r + beta (p_{j-1} - omega v_{j-1}) (p_0 = r) and p^ = D^-1 p_j formed in the
//              SpMV gather (p and v double-buffered by the parity of j): v_j = A p^, p_j stored,
//              partials of <r~, v_j>                                             -> grid.sync
//   phase T    prologue: rv = <r~, v>; rv == 0 -> -11 at j, rv or alpha = rho_j / rv
//              non-finite -> -10 at j (x untouched). Otherwise
//              s = r - alpha v and s^ = D^-1 s formed in the gather: t = A s^
//              (computed before ||s|| is known: wasted only in the last iteration), s stored,
//              partials of <s,s>, <t,s>, <t,t>                                   -> grid.sync
//   phase U    prologue: ||s||, omega = <t,s> / <t,t>. ||s|| < atol -> x += alpha p^, info 0 at
//              j + 1 (the kernel ends); ||s||, <t,s>, <t,t> or omega non-finite -> x += alpha p^
//              (the reference's x), info -10 at j (the kernel ends). Otherwise x += alpha p^;
//              x += omega s^; r = s - omega t; partials of <r~,r> and <r,r>      -> grid.sync
//
// grid.sync per iteration: 3 (plus 1 after the set-up). A non-finite scalar stops the solve with
// -10 where the reference stops (dpsolve's extension, as CG's; SciPy iterates on NaN to maxiter).
// Every block takes the same branch: each decision is made from sums every block finished
// itself, bit for bit, and every block leaves the loop at the same point.
//
// Coherence: vectors written inside this kernel (x, r, r~, p, v, s, t, partials) are read with
// ld.global.cg (dps::ldcg: L2, not the non-coherent L1 or read-only path); the matrix, b and D^-1
// are read-only and use the normal paths.
//
// Bytes per iteration (s = sizeof(T)): the matrix twice; the gathers of r, p, v (and D^-1) for
// p^ and of r, v (and D^-1) for s^ (7 nnz*s at most, mostly L2 hits); phase V writes p, v and
// reads r~ (3n*s); phase T writes s, t (2n*s); phase U reads and writes x (2n*s), reads p, s, t,
// r~ (and D^-1) (5n*s) and writes r (n*s); and gridDim.x^2 * s * 6 of partials read from L2 by
// the redundant finishes.
//
// Result (abi.cuh's DYN_* layout): [0] info, [1] iterations, [2] state (1 done),
// [4] the last residual norm tested. Residual history (optional, hist != nullptr), as in
// bicgstab_dynamic.cu: hist[j] = ||r_j|| for every loop head j tested and, after the ||s|| < atol
// exit of iteration j, hist[j + 1] = ||s||; iterations + 1 entries, maxiter + 1 at most.
#include <dpsolve/persistent.cuh>

// The solve, with the fields of dyn::StabArgs (args.cuh) as its parameters.
template <typename T, int W>
__device__ __forceinline__ void
bicgstab_persistent_body(int n, int width, int maxiter, double atol, const int* __restrict__ indptr,
                    const int* __restrict__ indices, const T* __restrict__ data,
                    const T* __restrict__ b, const dps::Pointwise<T> m, T* x, T* r, T* rt,
                    T* p0, T* p1, T* v0, T* v1, T* s, T* t, T* part_rho, T* part_rr, T* part_rv,
                    T* part_ss, T* part_ts, T* part_tt, double* status,
                    dps::real_t<T>* hist, const unsigned long long* __restrict__ bins) {
    cgrp::grid_group grid = cgrp::this_grid();
    __shared__ T smem[DPS_WARP];
    __shared__ T bcast;
    const bool pre = m.active();
    if (blockIdx.x == 0 && threadIdx.x == 0) dyn::start(status);

    // ---- set-up: r = b - A x, r~ = r, partials of <r~,r> and <r,r>
    {
        dyn::ShadowSetup<T> setup{b, dps::no_pointwise<T>(), r, rt, nullptr, nullptr};  // rho_0 = <r~, r>
        dyn::for_rows<T, W>(n, width, indptr, indices, data, pers::LoadCoherent<T>{x}, setup, bins);
        dyn::put_partial(setup.rho, part_rho, smem);
        dyn::put_partial(setup.rr, part_rr, smem);
    }
    grid.sync();

    T rho_prev = T(0), alpha = T(0), omega = T(0);
    int info = maxiter, its = maxiter;
    double tau_out = 0.0;
    for (int j = 0;; ++j) {
        // ---- prologue: rho_j, tau_j and the loop-head decisions (the reference's order)
        const dyn::Head<T> head = pers::shadow_head(j, maxiter, atol, n, part_rho, part_rr, rt,
                                                     r, hist, smem, &bcast);
        tau_out = head.tau;
        if (!head.go) { info = head.info; its = head.its; break; }
        const T rho = head.rho;
        if (j > 0 && dyn::mag(omega) < dyn::eps2<T>()) { info = -11; its = j; break; }  // omega
        const bool first = j == 0;
        const T beta = first ? T(0) : (rho / rho_prev) * (alpha / omega);
        if (!dps::is_finite(beta)) { info = -10; its = j; break; }          // non-finite
        const bool odd = j & 1;
        T* p_cur = odd ? p1 : p0;
        T* v_cur = odd ? v1 : v0;

        // ---- phase V: p, p^ in the gather; v = A p^; partials of <r~, v>
        {
            const dyn::LoadStabP<T, true> load{r, odd ? p0 : p1, odd ? v0 : v1, m, beta,
                                               omega, first};
            T rv = T(0);
            dyn::for_rows<T, W>(n, width, indptr, indices, data, load, [&](int row, T av) {
                p_cur[row] = load.p_at(row);
                v_cur[row] = av;
                rv += dps::conj(dps::ldcg(rt + row)) * av;                    // <r~, v>
            }, bins);
            dyn::put_partial(rv, part_rv, smem);
        }
        grid.sync();

        // ---- phase T: rv, alpha; s, s^ in the gather; t = A s^; partials of <s,s>, <t,s>, <t,t>
        {
            T rv = pers::all_sum(part_rv, gridDim.x, smem, &bcast);
            rv = dps::confirm_dot(rv == T(0), rv, n, rt, v_cur);              // accurate if 0
            if (rv == T(0)) { info = -11; its = j; break; }                   // x untouched
            alpha = rho / rv;
            if (!dps::is_finite(rv) || !dps::is_finite(alpha)) { info = -10; its = j; break; }
            const dyn::LoadStabS<T, true> load{r, v_cur, m, alpha};
            T ss = T(0), ts = T(0), tt = T(0);
            dyn::for_rows<T, W>(n, width, indptr, indices, data, load, [&](int row, T av) {
                const T si = load.s_at(row);
                s[row] = si;
                t[row] = av;
                ss += dps::conj(si) * si;
                ts += dps::conj(av) * si;                                     // <t, s>
                tt += dps::conj(av) * av;                                     // <t, t>
            }, bins);
            dyn::put_partial(ss, part_ss, smem);
            dyn::put_partial(ts, part_ts, smem);
            dyn::put_partial(tt, part_tt, smem);
        }
        grid.sync();

        // ---- phase U: ||s|| (< atol: last x update, info 0 at j + 1), omega; x, r; partials
        {
            const T ss = pers::all_sum(part_ss, gridDim.x, smem, &bcast);
            T ts = pers::all_sum(part_ts, gridDim.x, smem, &bcast);
            const T tt = pers::all_sum(part_tt, gridDim.x, smem, &bcast);
            const dps::real_t<T> snorm = sqrt(fabs(ss));
            const bool done = (double)snorm < atol;                           // SciPy's strict test
            // an |omega| below eps^2 is confirmed with the accurate <t, s>
            ts = dps::confirm_dot(!done && dyn::mag(ts / tt) < dyn::eps2<T>(), ts, n, t, s);
            omega = ts / tt;
            // non-finite: x += alpha p^ only (the reference's x), -10 at j
            const bool nonfinite = !done && !(isfinite(snorm) && dps::is_finite(ts)
                                              && dps::is_finite(tt) && dps::is_finite(omega));
            const bool last = done || nonfinite;
            T rho_next = T(0), rr_next = T(0);
            auto step = [&](int i) {
                const T pi = dps::ldcg(p_cur + i);
                const T phat = pre ? m.apply(i, pi) : pi;
                T xi = dps::ldcg(x + i) + dps::mul_rn(alpha, phat);           // x += alpha p^
                if (last) {
                    x[i] = xi;
                    return;
                }
                const T si = dps::ldcg(s + i);
                const T ti = dps::ldcg(t + i);
                const T shat = pre ? m.apply(i, si) : si;
                xi = xi + dps::mul_rn(omega, shat);                           // x += omega s^
                x[i] = xi;
                const T ri = si - dps::mul_rn(omega, ti);                     // r = s - omega t
                r[i] = ri;
                rho_next += dps::conj(dps::ldcg(rt + i)) * ri;
                rr_next += dps::conj(ri) * ri;
            };
            const int chunk = 2 * gridDim.x * DPS_BLOCK;                      // pairs per thread
            for (int i = blockIdx.x * 2 * DPS_BLOCK + threadIdx.x; i < n; i += chunk) {
                step(i);
                if (i + DPS_BLOCK < n) step(i + DPS_BLOCK);
            }
            if (nonfinite) { info = -10; its = j; break; }                    // in every block
            if (done) {                                                       // in every block
                tau_out = (double)snorm;
                if (hist != nullptr && blockIdx.x == 0 && threadIdx.x == 0) hist[j + 1] = snorm;
                info = 0;
                its = j + 1;
                break;
            }
            dyn::put_partial(rho_next, part_rho, smem);
            dyn::put_partial(rr_next, part_rr, smem);
        }
        grid.sync();
        rho_prev = rho;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        status[DYN_TAU] = tau_out;
        dyn::finish(status, info, its);
    }
}

// The kernel the host launches (cooperatively), with the solve's arguments by value.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK) bicgstab_persistent(const dyn::StabArgs<T> a) {
    bicgstab_persistent_body<T, W>(a.n, a.width, a.maxiter, a.atol, a.indptr, a.indices, a.data,
                                   a.b, dps::pointwise(a.pc), a.x, a.r, a.rt, a.p0, a.p1, a.v0, a.v1, a.s,
                                   a.t, a.part_rho, a.part_rr, a.part_rv, a.part_ss, a.part_ts,
                                   a.part_tt, a.status, a.hist, a.bins);
}
