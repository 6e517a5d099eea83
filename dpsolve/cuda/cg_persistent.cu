// cg_persistent.cu - variant "persistent": the whole CG solve in ONE cooperative kernel.
//
// The host launches cg_persistent<T, W> once (a cooperative launch, grid sized from the occupancy
// calculator so that every block is resident) and waits once. Global barriers are
// cooperative_groups grid.sync() (~1 us on Hopper, against ~11 us for a CDP2 launch). Each
// iteration needs two of them:
//
//   prologue   every block finishes the <r,z> / <r,r> partials itself (same order, same bits in
//              every block): zeta, tau; beta = zeta / sigma_prev; sigma = zeta. Every block makes
//              the same decision, as reference/cg.py does at the top of an iteration: tau
//              non-finite (j > 0) -> -10 at j; tau < atol -> 0 at j; j == maxiter -> maxiter.
//   phase A    O8 + O1 + O2a: p_j = z + beta p_{j-1} formed in the SpMV gather (p double-buffered
//              by the parity of j), v = A p_j, per-block partials of <p_j, v>      -> grid.sync
//   phase B    O2b in the prologue (alpha = sigma / <p,v>; non-finite -> -10 at j, x untouched);
//              O3 + O4, Jacobi z = D^-1 r, O5a partials of <r,z> (and <r,r>)     -> grid.sync
//
// Coherence: vectors written inside this kernel (p, z, r, v, partials) are read back by other
// blocks after a grid.sync, so those reads use ld.global.cg (__ldcg: L2, not the non-coherent L1 or
// read-only path); the matrix and b are read-only and use the normal paths.
//
// The prepared call's fast path (dpsolve/_fast.py) launches cg_persistent_fast, which reads
// CgArgs.flags (abi.cuh's DPS_FAST_*; cg_persistent compiles them out, the kernel then as
// above): ZERO_X starts from x = 0 written here, r = b with no product and no grid.sync; TOL
// takes the tolerance max(atol, rtol ||b||) from the first head's ||r|| = ||b|| (DYN_BB,
// DYN_TOL; b = 0 or non-finite stops there, x = 0, for the host to decide); RESID ends with
// ||b - A x||^2 of the x returned (DYN_RES2: the host's true-residual check, two more
// grid.syncs). The whole call is then this one launch.
//
// Bytes per iteration (s = sizeof(T)): the matrix once, the gathers of z and p (2 nnz*s at most,
// mostly L2 hits), v, p written (2n*s), x, r read+written and p, v read (6n*s), z written when
// preconditioned, and gridDim.x^2 * s * (2 or 3) of partials read from L2 by the redundant
// finishes (kept small by capping the grid at 4 blocks per SM).
#include <dpsolve/persistent.cuh>

// The solve, with the fields of dyn::CgArgs (args.cuh) as its parameters.
// FAST: built with the fast path's flags (cg_persistent_fast); false compiles them out, so the
// general path pays nothing for them.
template <typename T, int W, bool FAST>
__device__ __forceinline__ void
cg_persistent_body(int n, int width, int maxiter, int flags, double atol, double rtol,
              const int* __restrict__ indptr,
              const int* __restrict__ indices, const T* __restrict__ data, const T* __restrict__ b,
              const dps::Pointwise<T> m, T* x, T* r, T* z, T* p0, T* p1, T* v,
              T* part_pv, T* part_rz, T* part_rr, double* status, dps::real_t<T>* hist,
              const unsigned long long* __restrict__ bins) {
    cgrp::grid_group grid = cgrp::this_grid();
    __shared__ T smem[DPS_WARP];
    __shared__ T bcast;
    const bool pre = m.active();
    const int stride = gridDim.x * DPS_BLOCK;
    const int first = blockIdx.x * DPS_BLOCK + threadIdx.x;

    // ---- set-up: r = b - A x, z = M r, p_{-1} = 0, partials of <r,z> and <r,r>
    const bool zero_x = FAST && (flags & DPS_FAST_ZERO_X);  // x = 0: r = b, no product
    {
        T rz = T(0), rr = T(0);
        if (!zero_x) {
            dyn::for_rows<T, W>(n, width, indptr, indices, data, dyn::LoadVec<T>{x},
                                [&](int row, T ax) { r[row] = b[row] - ax; }, bins);
            grid.sync();                          // CSR-vector rows and elements map differently
        }
        for (int i = first; i < n; i += stride) {
            T ri;
            if (zero_x) {
                ri = b[i];
                r[i] = ri;
                x[i] = T(0);
            } else {
                ri = dps::ldcg(r + i);
            }
            const T zi = pre ? m.apply(i, ri) : ri;
            if (pre) z[i] = zi;
            p1[i] = T(0);
            rz += dps::conj(ri) * zi;
            rr += dps::conj(ri) * ri;
        }
        dyn::put_partial(rz, part_rz, smem);
        dyn::put_partial(rr, part_rr, smem);
        grid.sync();
    }

    T sigma = T(1);
    int info = maxiter, its = maxiter;
    double tau = 0.0;
    for (int j = 0;; ++j) {
        // ---- prologue: O5b, O6, O7, O9 and the decision
        const T zeta = pers::all_sum(part_rz, gridDim.x, smem, &bcast);
        const T rrs = pre ? pers::all_sum(part_rr, gridDim.x, smem, &bcast) : zeta;
        tau = sqrt(fabs((double)dps::real(rrs)));
        if (FAST && j == 0 && (flags & DPS_FAST_TOL)) {
            // r = b (the start is x = 0): SciPy's max(atol, rtol ||b||); b = 0 or non-finite
            // stops here (x = 0), the host decides what it means (dpsolve/_fast.py)
            atol = fmax(atol, rtol * tau);
            if (blockIdx.x == 0 && threadIdx.x == 0) {
                status[DYN_BB] = tau * tau;
                status[DYN_TOL] = atol;
            }
            if (!(tau > 0.0 && dps::is_finite(tau))) { info = 0; its = 0; break; }
        }
        if (hist != nullptr && blockIdx.x == 0 && threadIdx.x == 0) hist[j] = tau;
        const dps::Stop s = dps::head_test(j, tau, atol, maxiter);      // stop.cuh
        if (!s.go) { info = s.info; its = s.its; break; }
        const T beta = (j > 0) ? zeta / sigma : T(0);
        sigma = zeta;
        T* p_cur = (j & 1) ? p1 : p0;
        const T* p_prev = (j & 1) ? p0 : p1;

        // ---- phase A: O8 + O1 + O2a
        {
            T pv = T(0);
            dyn::for_rows<T, W>(n, width, indptr, indices, data,
                                pers::LoadXpayCoherent<T>{z, p_prev, beta},
                                [&](int row, T vi) {
                                    const T pi = fma(beta, dps::ldcg(p_prev + row), dps::ldcg(z + row));
                                    p_cur[row] = pi;
                                    v[row] = vi;
                                    pv += dps::conj(pi) * vi;
                                }, bins);
            dyn::put_partial(pv, part_pv, smem);
        }
        grid.sync();

        // ---- phase B: O2b, O3 + O4, Jacobi, O5a
        {
            const T pv = pers::all_sum(part_pv, gridDim.x, smem, &bcast);
            const T alpha = sigma / pv;
            if (!dps::is_finite(alpha)) { info = -10; its = j; break; }
            T rz = T(0), rr = T(0);
            for (int i = first; i < n; i += stride) {
                x[i] += alpha * dps::ldcg(p_cur + i);
                const T ri = dps::ldcg(r + i) - alpha * dps::ldcg(v + i);
                r[i] = ri;
                const T zi = pre ? m.apply(i, ri) : ri;
                if (pre) z[i] = zi;
                rz += dps::conj(ri) * zi;
                rr += dps::conj(ri) * ri;
            }
            dyn::put_partial(rz, part_rz, smem);
            if (pre) dyn::put_partial(rr, part_rr, smem);
        }
        grid.sync();
    }
    if (FAST && (flags & DPS_FAST_RESID)) {
        // the true residual ||b - A x||^2 of the x returned, the host's check, in this launch
        grid.sync();                              // every block past its last read of partials
        T e = T(0);
        dyn::for_rows<T, W>(n, width, indptr, indices, data, pers::LoadCoherent<T>{x},
                            [&](int row, T ax) { e += dps::abs2(b[row] - ax); }, bins);
        dyn::put_partial(e, part_pv, smem);
        grid.sync();
        if (blockIdx.x == 0) {
            const T e2 = pers::all_sum(part_pv, gridDim.x, smem, &bcast);
            if (threadIdx.x == 0) status[DYN_RES2] = (double)dps::real(e2);
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        status[DYN_TAU] = tau;
        dyn::finish(status, info, its);
    }
}

// The kernels the host launches (cooperatively), with the solve's arguments by value:
// cg_persistent for the general path (flags ignored), cg_persistent_fast for dpsolve/_fast.py.
#define DPS_CG_PERSISTENT_ARGS(a)                                                              \
    (a).n, (a).width, (a).maxiter, (a).flags, (a).atol, (a).rtol, (a).indptr, (a).indices,    \
        (a).data, (a).b, dps::pointwise((a).pc), (a).x, (a).r, (a).z, (a).p0, (a).p1, (a).v,  \
        (a).part_pv, (a).part_rz, (a).part_rr, (a).status, (a).hist, (a).bins

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK) cg_persistent(const dyn::CgArgs<T> a) {
    cg_persistent_body<T, W, false>(DPS_CG_PERSISTENT_ARGS(a));
}

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK) cg_persistent_fast(const dyn::CgArgs<T> a) {
    cg_persistent_body<T, W, true>(DPS_CG_PERSISTENT_ARGS(a));
}
