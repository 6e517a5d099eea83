// bicg_persistent.cu - variant "persistent": the whole BiCG solve in ONE cooperative kernel
// (the scheme of cg_persistent.cu; semantics of bicg_dynamic.cu; specification:
// dpsolve/reference/bicg.py).
//
// The host launches bicg_persistent<T, W> once (a cooperative launch, grid sized from the
// occupancy calculator so that every block is resident) and waits once. Global barriers are
// cooperative_groups grid.sync(). Each iteration needs two of them:
//
//   set-up     r = b - A x; r~ = r; z = D^-1 r, z~ = conj(D^-1) r~; partials of <r~,z>, <r,r>
//                                                                              -> grid.sync
//   prologue   every block finishes the <r~,z> / <r,r> partials itself (same order, same bits in
//              every block): rho_j, tau_j = ||r_j||. Every block makes the same decision, in the
//              reference's order: tau non-finite (j > 0) -> -10 at j; j == maxiter -> maxiter;
//              tau < atol -> 0 at j; |rho| < eps^2 or rho non-finite -> -10 at j (shadow_head);
//              beta = rho_j / rho_{j-1} (0 for j = 0) non-finite -> -10 at j.
//   phase A    p_j = z + beta p_{j-1} and p~_j = z~ + conj(beta) p~_{j-1} formed in the two SpMV
//              gathers (p, p~ double-buffered by the parity of j; p_0 = z, p~_0 = z~),
//              q = A p_j, q~ = A^H p~_j (both SpMVs in this phase), per-block partials of
//              <p~_j, q>                                                       -> grid.sync
//   phase B    prologue: rv = <p~, q>; rv == 0 -> -11 at j, rv or alpha = rho_j / rv
//              non-finite -> -10 at j (x untouched). Otherwise x += alpha p; r -= alpha q;
//              r~ -= conj(alpha) q~; Jacobi z = D^-1 r, z~ = conj(D^-1) r~; partials of <r~,z>
//              and <r,r>                                                        -> grid.sync
//
// grid.sync per iteration: 2 (plus 1 after the set-up). A non-finite scalar stops the solve with
// -10 where the reference stops (dpsolve's extension, as CG's; SciPy iterates on NaN to maxiter).
// Every block takes the same branch: each decision is made from sums every block finished
// itself, bit for bit, and every block leaves the loop at the same point.
//
// Coherence: vectors written inside this kernel (x, r, r~, z, z~, p, p~, q, q~, partials) are read
// with ld.global.cg (dps::ldcg: L2, not the non-coherent L1 or read-only path); the matrices, b
// and D^-1 are read-only and use the normal paths.
//
// Bytes per iteration (s = sizeof(T)): A and A^H once each; the gathers of z, p, z~, p~ (4 nnz*s
// at most, mostly L2 hits) and p~ again at each row of A for <p~, q> (2n*s); p, p~, q, q~ written
// (4n*s); phase B reads p, q, q~ (3n*s), reads and writes x, r, r~ (6n*s), writes z, z~ and
// reads D^-1 when preconditioned (3n*s); and gridDim.x^2 * s * 3 of partials read from L2 by the
// redundant finishes.
//
// Result (abi.cuh's DYN_* layout): [0] info, [1] iterations, [2] state (1 done),
// [4] the last tau. Residual history (optional, hist != nullptr): hist[j] = tau_j = ||r_j|| for
// every j tested, j = 0 .. iterations (maxiter + 1 entries at most), as in bicg_dynamic.cu.
#include <dpsolve/persistent.cuh>

// A and A^H share W (the CSR-vector width follows nnz / n, the same for both); ELL widths are
// separate (width, width_h). Without a preconditioner the host passes z = r and z~ = r~.
// The solve, with the fields of dyn::BicgArgs (args.cuh) as its parameters.
template <typename T, int W>
__device__ __forceinline__ void
bicg_persistent_body(int n, int width, int width_h, int maxiter, double atol,
                const int* __restrict__ indptr, const int* __restrict__ indices,
                const T* __restrict__ data, const int* __restrict__ h_indptr,
                const int* __restrict__ h_indices, const T* __restrict__ h_data,
                const T* __restrict__ b, const dps::Pointwise<T> m, T* x, T* r, T* rt, T* z,
                T* zt, T* p0, T* p1, T* pt0, T* pt1, T* q, T* qt, T* part_rho, T* part_rr,
                T* part_rv, double* status, dps::real_t<T>* hist,
                const unsigned long long* __restrict__ bins,
                const unsigned long long* __restrict__ h_bins) {
    cgrp::grid_group grid = cgrp::this_grid();
    __shared__ T smem[DPS_WARP];
    __shared__ T bcast;
    const bool pre = m.active();
    if (blockIdx.x == 0 && threadIdx.x == 0) dyn::start(status);

    // ---- set-up: r = b - A x, r~ = r, z = M r, z~ = M^H r~, partials of <r~,z>, <r,r>
    {
        dyn::ShadowSetup<T> setup{b, m, r, rt, z, zt};
        dyn::for_rows<T, W>(n, width, indptr, indices, data, pers::LoadCoherent<T>{x}, setup, bins);
        dyn::put_partial(setup.rho, part_rho, smem);
        dyn::put_partial(setup.rr, part_rr, smem);
    }
    grid.sync();

    T rho_prev = T(0);
    int info = maxiter, its = maxiter;
    double tau_out = 0.0;
    for (int j = 0;; ++j) {
        // ---- prologue: rho_j, tau_j and the loop-head decisions (the reference's order)
        const dyn::Head<T> head = pers::shadow_head(j, maxiter, atol, n, part_rho, part_rr, rt,
                                                     z, hist, smem, &bcast);
        tau_out = head.tau;
        if (!head.go) { info = head.info; its = head.its; break; }
        const T rho = head.rho;
        const bool first = j == 0;
        const T beta = first ? T(0) : rho / rho_prev;
        if (!dps::is_finite(beta)) { info = -10; its = j; break; }          // non-finite
        const bool odd = j & 1;
        T* p_cur = odd ? p1 : p0;
        T* pt_cur = odd ? pt1 : pt0;

        // ---- phase A: p, p~ in the gathers; q = A p, q~ = A^H p~; partials of <p~, q>
        {
            const pers::LoadXpayCoherent<T> load{z, odd ? p0 : p1, beta, first};
            const pers::LoadXpayCoherent<T> loadt{zt, odd ? pt0 : pt1, dps::conj(beta), first};
            T rv = T(0);
            dyn::for_rows<T, W>(n, width, indptr, indices, data, load, [&](int row, T av) {
                p_cur[row] = load(row);
                q[row] = av;
                rv += dps::conj(loadt(row)) * av;                             // <p~, q>
            }, bins);
            dyn::for_rows<T, W>(n, width_h, h_indptr, h_indices, h_data, loadt, [&](int row, T av) {
                pt_cur[row] = loadt(row);
                qt[row] = av;
            }, h_bins);
            dyn::put_partial(rv, part_rv, smem);
        }
        grid.sync();

        // ---- phase B: rv, alpha; x, r, r~; Jacobi z, z~; partials of <r~, z> and <r, r>
        {
            T rv = pers::all_sum(part_rv, gridDim.x, smem, &bcast);
            rv = dps::confirm_dot(rv == T(0), rv, n, pt_cur, q);              // accurate if 0
            if (rv == T(0)) { info = -11; its = j; break; }                   // x untouched
            const T alpha = rho / rv;
            if (!dps::is_finite(rv) || !dps::is_finite(alpha)) { info = -10; its = j; break; }
            const T alpha_c = dps::conj(alpha);
            T rho_next = T(0), rr_next = T(0);
            auto step = [&](int i) {
                x[i] = dps::ldcg(x + i) + dps::mul_rn(alpha, dps::ldcg(p_cur + i));
                const T ri = dps::ldcg(r + i) - dps::mul_rn(alpha, dps::ldcg(q + i));
                const T rti = dps::ldcg(rt + i) - dps::mul_rn(alpha_c, dps::ldcg(qt + i));
                r[i] = ri;
                rt[i] = rti;
                if (pre) {
                    const T zi = m.apply(i, ri);                              // z = M r
                    z[i] = zi;
                    zt[i] = m.apply_adjoint(i, rti);                          // z~ = M^H r~
                    rho_next += dps::conj(rti) * zi;
                } else {
                    rho_next += dps::conj(rti) * ri;
                }
                rr_next += dps::conj(ri) * ri;
            };
            const int chunk = 2 * gridDim.x * DPS_BLOCK;                      // pairs per thread
            for (int i = blockIdx.x * 2 * DPS_BLOCK + threadIdx.x; i < n; i += chunk) {
                step(i);
                if (i + DPS_BLOCK < n) step(i + DPS_BLOCK);
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
__global__ void __launch_bounds__(DPS_BLOCK) bicg_persistent(const dyn::BicgArgs<T> a) {
    bicg_persistent_body<T, W>(a.n, a.width, a.width_h, a.maxiter, a.atol, a.indptr, a.indices,
                               a.data, a.h_indptr, a.h_indices, a.h_data, a.b, dps::pointwise(a.pc), a.x, a.r,
                               a.rt, a.z, a.zt, a.p0, a.p1, a.pt0, a.pt1, a.q, a.qt, a.part_rho,
                               a.part_rr, a.part_rv, a.status, a.hist, a.bins, a.h_bins);
}
