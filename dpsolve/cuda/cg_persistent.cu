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

// A FAST kernel's guard (CgArgs.guard; the default call's one launch, dpsolve/_fast.py's
// Lane): csr_check's (flags, longest row) of the caller's matrix as it is now, queued on the
// same stream just before. Any flag (a malformed CSR, unsorted rows, NaN or Inf) or a row
// longer than the kernel takes (``longest``), or values whose largest exponent left the window
// where the front end solves A unscaled (guard[2], dps::in_matrix_window), stops every block
// before it reads A: x is not written, DYN_BB = NaN sends the host to the general path, whose
// own checks raise the error (or repair the rows, or scale A), and DYN_TOL = -1 says why.
// nullptr: no guard (a prepared system's snapshot was checked once).
template <typename T>
__device__ __forceinline__ bool guard_stops(const dyn::CgArgs<T>& a, int longest) {
    if (a.guard == nullptr) return false;
    if (a.guard[0] == 0 && a.guard[1] <= longest && dps::in_matrix_window<T>(a.guard[2]))
        return false;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        a.status[DYN_BB] = __longlong_as_double(0x7ff8000000000000LL);   // NaN: undecided
        a.status[DYN_RES2] = a.status[DYN_BB];
        a.status[DYN_TOL] = -1.0;                                        // the guard's mark
        a.status[DYN_TAU] = 0.0;
        dyn::finish(a.status, 0, 0);
    }
    return true;
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
    if (guard_stops(a, 0x7fffffff)) return;       // any row length: every block returns at once
    cg_persistent_body<T, W, true>(DPS_CG_PERSISTENT_ARGS(a));
}

// ---------------------------------------------------------------------------------------------
// cg_persistent_cta<T, NZ, R, FAST>: the same solve (CgArgs, flags, status words, history) in
// ONE block of cta::THREADS, for small systems: n <= R * 512 rows of at most NZ entries, CSR, whose
// values and one vector fit the block's shared memory (dpsolve/cuda/ops.py's cta_plan decides;
// the host launches a grid of one). Every barrier is a __syncthreads, not a grid.sync:
//
//   the matrix's values sit in shared memory for the whole solve (a thread's entries a block
//   stride apart: a warp's loads are consecutive, their addresses constants), its columns in
//   registers as 16-bit byte offsets into the shared vector (two a register; an empty slot is a
//   0 at the row's own column, so no length test), x, r, q and D^-1 of the thread's R rows (t,
//   t + 512, ...) in registers, p in shared memory only (a thread reads its own entries back).
//   An iteration: p stored, a barrier; q = A p from shared memory and <p, q> (one barrier);
//   x, r, z and <r, z>, <r, r> (one barrier). Every thread sums the warps' slots in one order,
//   so all hold the same bits and take the same branches.
//
// H100, float64, Jacobi, an iteration (scripts/bench-call --only iteration, 2026-11-27): 2-D
// 64^2 3.5 us against 6.9 on cg_persistent's 64 blocks, 48^2 2.5 (6.2), 32^2 1.8 (6.5), 3-D
// 14^3 3.3 (5.3). On the way (scratch, 64^2): 1,024 threads at R = 4 (64 registers, spills)
// 4.9 us; D^-1 in shared memory 3.8; x and D^-1 from global memory 4.1; the warps' slots summed
// in a runtime loop, values at [k n + row] and p in registers 4.1-4.7. The sums run in another
// order than cg_persistent's; the algorithm and the stops are its.
namespace cta {
constexpr int THREADS = 512;                      // the block (ops.cta_plan launches it whole)
constexpr int WARPS = THREADS / DPS_WARP;         // its sums: dps::sum_everywhere<WARPS>
}  // namespace cta

template <typename T, int NZ, int R, bool FAST>
__global__ void __launch_bounds__(cta::THREADS, 1) cg_persistent_cta(const dyn::CgArgs<T> a) {
    if (FAST && guard_stops(a, NZ)) return;       // rows of NZ entries at most
    extern __shared__ __align__(16) unsigned char s_dyn[];
    // the values: entry k of the thread's row s at sv[(s NZ + k) THREADS + t], so that every
    // address is the thread's base plus a constant (no address registers); then the vector
    T* sv = reinterpret_cast<T*>(s_dyn) + threadIdx.x;
    T* sp = reinterpret_cast<T*>(s_dyn) + R * NZ * cta::THREADS;   // p, or x where A x is needed
    __shared__ T s_pq[cta::WARPS], s_rz[cta::WARPS], s_rr[cta::WARPS];
    const int n = a.n;
    const bool pre = a.pc.inv_diag != nullptr;
    const bool zero_x = FAST && (a.flags & DPS_FAST_ZERO_X);
    double atol = a.atol;
    unsigned colp[R][(NZ + 1) / 2];
    T di[R], xi[R], ri[R];                        // p: in sp only (its own entries read back)
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const int row = threadIdx.x + s * cta::THREADS;
        const bool live = row < n;
        const int start = live ? a.indptr[row] : 0;
        const int len = live ? a.indptr[row + 1] - start : 0;
        const unsigned own = live ? row * (unsigned)sizeof(T) : 0u;
#pragma unroll
        for (int k = 0; k < NZ; ++k) {
            const unsigned off = k < len ? a.indices[start + k] * (unsigned)sizeof(T) : own;
            if (k % 2 == 0) colp[s][k / 2] = off; else colp[s][k / 2] |= off << 16;
            sv[(s * NZ + k) * cta::THREADS] = k < len ? a.data[start + k] : T(0);
        }
        di[s] = pre && live ? dps::ldg(a.pc.inv_diag + row) : T(1);
        xi[s] = zero_x || !live ? T(0) : a.x[row];
    }
    // row s of A w, w in shared memory (each thread reads only the values it stored)
    auto row_times = [&](int s, const T* w) {
        const unsigned char* base = reinterpret_cast<const unsigned char*>(w);
        T acc = T(0);
#pragma unroll
        for (int k = 0; k < NZ; ++k) {
            const unsigned off = (colp[s][k / 2] >> (16 * (k % 2))) & 0xffffu;
            acc += sv[(s * NZ + k) * cta::THREADS] * *reinterpret_cast<const T*>(base + off);
        }
        return acc;
    };
    auto live = [&](int s) { return threadIdx.x + s * cta::THREADS < n; };
    auto store = [&](const T* v) {
#pragma unroll
        for (int s = 0; s < R; ++s)
            if (live(s)) sp[threadIdx.x + s * cta::THREADS] = v[s];
    };

    // ---- set-up: r = b - A x (x = 0: r = b), z = M r, <r, z>, <r, r>
    if (!zero_x) store(xi);
    __syncthreads();                              // x seen by all
    T zeta = T(0), rrs = T(0);
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const int row = threadIdx.x + s * cta::THREADS;
        ri[s] = live(s) ? (zero_x ? a.b[row] : a.b[row] - row_times(s, sp)) : T(0);
        const T zi = di[s] * ri[s];
        zeta += dps::conj(ri[s]) * zi;
        rrs += dps::conj(ri[s]) * ri[s];
    }
    dps::sum2_everywhere<cta::WARPS>(zeta, rrs, s_rz, s_rr);   // its barrier: sp read by all

    T sigma = T(1);
    int info = a.maxiter, its = a.maxiter;
    double tau = 0.0;
    for (int j = 0;; ++j) {
        tau = sqrt(fabs((double)dps::real(pre ? rrs : zeta)));
        if (FAST && j == 0 && (a.flags & DPS_FAST_TOL)) {   // as cg_persistent
            atol = fmax(atol, a.rtol * tau);
            if (threadIdx.x == 0) {
                a.status[DYN_BB] = tau * tau;
                a.status[DYN_TOL] = atol;
            }
            if (!(tau > 0.0 && dps::is_finite(tau))) { info = 0; its = 0; break; }
        }
        if (a.hist != nullptr && threadIdx.x == 0) a.hist[j] = tau;
        const dps::Stop h = dps::head_test(j, tau, atol, a.maxiter);
        if (!h.go) { info = h.info; its = h.its; break; }
        const T beta = (j > 0) ? zeta / sigma : T(0);
        sigma = zeta;
#pragma unroll
        for (int s = 0; s < R; ++s) {             // p_j = z + beta p_{j-1}: p_{j-1}'s readers
            const int row = threadIdx.x + s * cta::THREADS;      // passed the <p, q> barrier
            if (row < n) sp[row] = j > 0 ? fma(beta, sp[row], di[s] * ri[s]) : di[s] * ri[s];
        }
        __syncthreads();
        T qi[R], pq = T(0);
#pragma unroll
        for (int s = 0; s < R; ++s) {
            qi[s] = live(s) ? row_times(s, sp) : T(0);
            pq += live(s) ? dps::conj(sp[threadIdx.x + s * cta::THREADS]) * qi[s] : T(0);
        }
        const T alpha = sigma / dps::sum_everywhere<cta::WARPS>(pq, s_pq);
        if (!dps::is_finite(alpha)) { info = -10; its = j; break; }
        zeta = T(0);
        rrs = T(0);
#pragma unroll
        for (int s = 0; s < R; ++s) {
            if (live(s)) xi[s] += alpha * sp[threadIdx.x + s * cta::THREADS];
            ri[s] -= alpha * qi[s];
            const T zi = di[s] * ri[s];
            zeta += dps::conj(ri[s]) * zi;
            rrs += dps::conj(ri[s]) * ri[s];
        }
        dps::sum2_everywhere<cta::WARPS>(zeta, rrs, s_rz, s_rr);   // sp's readers: past <p, q>'s
    }
    if (FAST && (a.flags & DPS_FAST_RESID)) {
        // ||b - A x||^2 of the x returned, the host's check (every reader of sp is past a barrier)
        store(xi);
        __syncthreads();
        T e = T(0);
#pragma unroll
        for (int s = 0; s < R; ++s)
            if (live(s)) e += dps::abs2(a.b[threadIdx.x + s * cta::THREADS] - row_times(s, sp));
        e = dps::sum_everywhere<cta::WARPS>(e, s_pq);
        if (threadIdx.x == 0) a.status[DYN_RES2] = (double)dps::real(e);
    }
#pragma unroll
    for (int s = 0; s < R; ++s) {
        if (!live(s)) continue;
        const int row = threadIdx.x + s * cta::THREADS;
        a.x[row] = xi[s];
        a.r[row] = ri[s];
    }
    if (threadIdx.x == 0) {
        a.status[DYN_TAU] = tau;
        dyn::finish(a.status, info, its);
    }
}
