// bicg_dynamic.cu - variant "dynamic": the whole BiCG loop chained on the GPU with CDP2 tail
// launches (the scheme of cg_dynamic.cu; specification: dpsolve/reference/bicg.py).
//
// The host launches ONE kernel, bicg_dyn_start, and waits once; every later kernel is
// tail-launched by its predecessor (a tail-launched grid starts only after the launching grid and
// all its work have finished: the global barrier). A device launch costs ~11 us on Hopper, so the
// chain aggregates (KLAP): the two SpMVs of an iteration, A p and A^H p~, are independent and run
// in the SAME kernel.
//
//   bicg_dyn_start (host-launched once)  r = b - A x; r~ = r; z = D^-1 r, z~ = conj(D^-1) r~;
//                                        per-block partials of <r~, z> and <r, r>
//                                        -> tail-launches bicg_dyn_spmv(j = 0)
//   bicg_dyn_spmv(j)   prologue (every block finishes the partials itself, same order, same bits):
//                      rho_j = <r~, z>, tau_j = ||r_j||, beta = rho_j / rho_{j-1}. Decided here,
//                      exactly as the reference: tau non-finite (j > 0) -> -10 at j (the end of
//                      step j-1); j == maxiter -> info maxiter; tau < atol -> 0 at j; |rho| < eps^2
//                      or rho or beta non-finite -> -10 at j; otherwise
//                      p_j = z + beta p_{j-1}, p~_j = z~ + conj(beta) p~_{j-1} are formed on the fly
//                      inside the two SpMV gathers (p, p~ double-buffered by the parity of j):
//                      q = A p_j, q~ = A^H p~_j, per-block partials of <p~_j, q>
//                      -> tail-launches bicg_dyn_update(j, rho_j)
//   bicg_dyn_update(j) prologue: rv = <p~, A p>; rv == 0 -> -11 at j, rv or alpha = rho_j / rv
//                      non-finite -> -10 at j (x untouched), chain ends. Otherwise x += alpha p;
//                      r -= alpha q; r~ -= conj(alpha) q~; Jacobi z, z~; partials of <r~, z> and
//                      <r, r>
//                      -> tail-launches bicg_dyn_spmv(j + 1, rho_j)
//
// Device launches per iteration: 2 (bicg_dyn_spmv + bicg_dyn_update); a solve of k iterations is
// 1 host launch + 2k + 1 device launches (the last bicg_dyn_spmv only decides), or 2k + 2 when it
// ends with -11 or -10 in bicg_dyn_update. A non-finite scalar stops the chain with -10 where the
// reference stops (dpsolve's extension, as CG's; SciPy iterates on NaN to maxiter).
//
// Residual history (optional, hist != nullptr): hist[j] = tau_j = ||r_j||, written for every j the
// chain tests, j = 0 .. iterations (maxiter + 1 entries at most).
//
// Template scheme: bicg_dyn_*<T, W> (see dpsolve/dynamic.cuh). A and A^H share W (the CSR-vector
// width follows nnz / n, the same for both); ELL widths are separate. Only bicg_dyn_start needs a
// name expression; it instantiates the rest.
#include <dpsolve/dynamic.cuh>

namespace dyn {

// The two SpMVs of iteration j with the gathers `load` (p_j) and `loadt` (p~_j): p_j, q = A p_j,
// p~_j, q~ = A^H p~_j stored; returns this thread's share of <p~_j, q>.
template <typename T, int W, typename Load>
__device__ __forceinline__ T bicg_two_spmvs(const BicgArgs<T>& a, const Load& load, const Load& loadt,
                                            T* __restrict__ p_new, T* __restrict__ pt_new) {
    T* __restrict__ q = a.q;
    T* __restrict__ qt = a.qt;
    T acc = T(0);
    for_rows<T, W>(a.n, a.width, a.indptr, a.indices, a.data, load, [&](int row, T av) {
        p_new[row] = load(row);
        q[row] = av;
        acc += dps::conj(loadt(row)) * av;                        // <p~, q>: conj(p~) . q
    }, a.bins);
    for_rows<T, W>(a.n, a.width_h, a.h_indptr, a.h_indices, a.h_data, loadt, [&](int row, T av) {
        pt_new[row] = loadt(row);
        qt[row] = av;
    }, a.h_bins);
    return acc;
}

}  // namespace dyn

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK) bicg_dyn_update(const dyn::BicgArgs<T> a, int j, T rho);

// Loop head (prologue: rho_j, tau_j, convergence, maxiter, rho breakdown) + p, p~ + A p, A^H p~ +
// partials of <p~, A p>.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_dyn_spmv(const dyn::BicgArgs<T> a, int j, T rho_prev) {
    __shared__ T smem[DPS_WARP];
    __shared__ T sh_beta;
    __shared__ int sh_go;
    dyn::Head<T> h = dyn::shadow_head(j, a.maxiter, a.atol, a.n, a.part_rho, a.part_rr, a.rt,
                                      a.z, smem);                 // stop rule, rho breakdown
    if (threadIdx.x == 0) {
        const T beta = (j > 0) ? h.rho / rho_prev : T(0);
        if (h.go && !dps::is_finite(beta)) h = {h.rho, h.tau, -10, j, false};   // non-finite at j
        sh_go = h.go;
        sh_beta = beta;
        if (blockIdx.x == 0) {
            dyn::head_publish(a.status, a.hist, j, h, [&] {
                bicg_dyn_update<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(a, j, h.rho);
            });
        }
    }
    __syncthreads();
    if (!sh_go) return;                                           // block-uniform

    T* __restrict__ p_new = (j & 1) ? a.p1 : a.p0;
    T* __restrict__ pt_new = (j & 1) ? a.pt1 : a.pt0;
    T acc;
    if (j == 0) {                                                 // p_0 = z_0, p~_0 = z~_0
        acc = dyn::bicg_two_spmvs<T, W>(a, dyn::LoadVec<T>{a.z}, dyn::LoadVec<T>{a.zt}, p_new, pt_new);
    } else {                                                      // p = z + beta p, p~ = z~ + conj(beta) p~
        const T beta = sh_beta;
        acc = dyn::bicg_two_spmvs<T, W>(a, dyn::LoadXpay<T>{a.z, (j & 1) ? a.p0 : a.p1, beta},
                                        dyn::LoadXpay<T>{a.zt, (j & 1) ? a.pt0 : a.pt1, dps::conj(beta)},
                                        p_new, pt_new);
    }
    dyn::put_partial(acc, a.part_rv, smem);
}

// Prologue: rv = <p~, A p> (-11 when 0), alpha (-10 when it or rv is non-finite); then x, r, r~
// updates, Jacobi z, z~, partials of <r~, z> and <r, r>.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_dyn_update(const dyn::BicgArgs<T> a, int j, T rho) {
    __shared__ T smem[DPS_WARP];
    __shared__ T sh_alpha;
    __shared__ int sh_go;
    T rv = dyn::sum_partials(a.part_rv, (int)gridDim.x, smem);
    rv = dps::confirm_dot(rv == T(0), rv, a.n, (j & 1) ? a.pt1 : a.pt0, a.q);  // accurate if 0
    if (threadIdx.x == 0) {
        const T alpha = rho / rv;
        const bool zero = rv == T(0);
        const bool go = !zero && dps::is_finite(rv) && dps::is_finite(alpha);
        sh_alpha = alpha;
        sh_go = go;
        if (blockIdx.x == 0) {
            if (go) {
                bicg_dyn_spmv<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(a, j + 1, rho);
                dyn::check_launch(a.status);
            } else {
                dyn::finish(a.status, zero ? -11 : -10, j);       // x untouched for this step
            }
        }
    }
    __syncthreads();
    if (!sh_go) return;                                           // block-uniform

    const int n = a.n;
    const T alpha = sh_alpha;
    const T alpha_c = dps::conj(alpha);
    const T* __restrict__ p = (j & 1) ? a.p1 : a.p0;
    const T* __restrict__ q = a.q;
    const T* __restrict__ qt = a.qt;
    const dps::Pointwise<T> m = dps::pointwise(a.pc);
    T* __restrict__ x = a.x;
    T* __restrict__ r = a.r;
    T* __restrict__ rt = a.rt;
    T* __restrict__ z = a.z;
    T* __restrict__ zt = a.zt;
    const bool pre = m.active();
    T rho_next = T(0), rr = T(0);
    auto step = [&](int i) {
        x[i] += alpha * p[i];                                     // x = x + alpha p
        const T ri = r[i] - alpha * q[i];                         // r = r - alpha A p
        const T rti = rt[i] - alpha_c * qt[i];                    // r~ = r~ - conj(alpha) A^H p~
        r[i] = ri;
        rt[i] = rti;
        if (pre) {
            const T zi = m.apply(i, ri);                          // z = M r
            z[i] = zi;
            zt[i] = m.apply_adjoint(i, rti);                      // z~ = M^H r~
            rho_next += dps::conj(rti) * zi;
        } else {
            rho_next += dps::conj(rti) * ri;
        }
        rr += dps::conj(ri) * ri;
    };
    const int chunk = 2 * gridDim.x * DPS_BLOCK;                  // pairs of elements per thread
    for (int i = blockIdx.x * 2 * DPS_BLOCK + threadIdx.x; i < n; i += chunk) {
        step(i);
        if (i + DPS_BLOCK < n) step(i + DPS_BLOCK);
    }
    dyn::put_partial(rho_next, a.part_rho, smem);
    dyn::put_partial(rr, a.part_rr, smem);
}

// The one kernel the host launches: status reset, r = b - A x, r~ = r, z = M r, z~ = M^H r~, partials of <r~, z> and <r, r>; then the chain starts with
// bicg_dyn_spmv(j = 0). The grid size (<= 1024 blocks of DPS_BLOCK threads) is the number of
// partials and is kept by every kernel of the chain.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_dyn_start(const dyn::BicgArgs<T> a) {  // a.z, a.zt == a.r, a.rt without a preconditioner
    __shared__ T smem[DPS_WARP];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        dyn::start(a.status);
        bicg_dyn_spmv<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(a, 0, T(0));
        dyn::check_launch(a.status);
    }
    dyn::ShadowSetup<T> setup{a.b, dps::pointwise(a.pc), a.r, a.rt, a.z, a.zt};
    dyn::for_rows<T, W>(a.n, a.width, a.indptr, a.indices, a.data, dyn::LoadVec<T>{a.x}, setup, a.bins);
    dyn::put_partial(setup.rho, a.part_rho, smem);
    dyn::put_partial(setup.rr, a.part_rr, smem);
}
