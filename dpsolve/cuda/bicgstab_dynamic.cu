// bicgstab_dynamic.cu - variant "dynamic": the whole BiCGStab loop chained on the GPU with CDP2
// tail launches (the scheme of cg_dynamic.cu; specification: dpsolve/reference/bicgstab.py).
//
// The host launches ONE kernel, bicgstab_dyn_start, and waits once; every later kernel is
// tail-launched by its predecessor (the tail launch is the global barrier). A device launch costs
// ~11 us on Hopper, so the chain aggregates (KLAP). An iteration has two SpMVs, v = A p^ and
// t = A s^, each preceded by a decision on a global reduction (rho and ||r|| before the first;
// <r~, v> before the second) and the update needs two more (||s||, <t, s>, <t, t>), so it takes
// three kernels, each finishing the previous one's DOTs in its prologue:
//
//   bicgstab_dyn_start (host-launched once)  r = b - A x; r~ = r; partials of <r~, r> and <r, r>
//                                            -> tail-launches bicgstab_dyn_v(j = 0)
//   bicgstab_dyn_v(j)  prologue (every block finishes the partials itself, same order, same bits):
//                      rho_j = <r~, r>, tau_j = ||r_j||,
//                      beta = (rho_j / rho_{j-1}) (alpha / omega). Decided here, as the reference:
//                      tau non-finite (j > 0) -> -10 at j (the end of step j-1); j == maxiter ->
//                      info maxiter; tau < atol -> 0 at j; |rho| < eps^2 or rho non-finite -> -10
//                      at j; j > 0 and |omega| < eps^2 -> -11 at j; beta non-finite -> -10 at j.
//                      Otherwise p_j = r + beta (p - omega v)
//                      and p^ = D^-1 p_j are formed on the fly in the SpMV gather (p and v are
//                      double-buffered by the parity of j): v_j = A p^, partials of <r~, v_j>
//                      -> tail-launches bicgstab_dyn_t(j, rho_j)
//   bicgstab_dyn_t(j)  prologue: rv = <r~, v>; rv == 0 -> -11 at j, rv or alpha = rho_j / rv
//                      non-finite -> -10 at j (x untouched), chain ends. Otherwise
//                      s = r - alpha v and s^ = D^-1 s formed in the gather: t = A s^ (computed
//                      before ||s|| is known: it is wasted only in the last iteration, and saves
//                      a kernel in every other one), s stored,
//                      partials of <s, s>, <t, s>, <t, t>
//                      -> tail-launches bicgstab_dyn_update(j, rho_j, alpha)
//   bicgstab_dyn_update(j)  prologue: ||s||. ||s|| < atol -> x += alpha p^, info 0 at j + 1, the
//                      chain ends after this kernel. Otherwise omega = <t, s> / <t, t>; ||s||,
//                      <t, s>, <t, t> or omega non-finite -> x += alpha p^ (the reference's x),
//                      info -10 at j, the chain ends after this kernel. Otherwise
//                      x += alpha p^; x += omega s^; r = s - omega t; partials of <r~, r>, <r, r>
//                      -> tail-launches bicgstab_dyn_v(j + 1, rho_j, alpha, omega)
//
// Device launches per iteration: 3 (bicgstab_dyn_v + bicgstab_dyn_t + bicgstab_dyn_update); a solve
// of k iterations ending at a loop head is 1 host launch + 3k + 1 device launches; one ending at
// the ||s|| < atol exit is 3k (its last iteration counted in k). A non-finite scalar stops the
// chain with -10 where the reference stops (dpsolve's extension, as CG's; SciPy iterates on NaN
// to maxiter).
//
// Residual history (optional, hist != nullptr): hist[k] = the recurrence residual norm of the
// iterate x_k: hist[j] = ||r_j|| for every loop head j the chain tests, and, after the ||s|| < atol
// exit of iteration j, hist[j + 1] = ||s||. iterations + 1 entries, maxiter + 1 at most.
//
// Template scheme: bicgstab_dyn_*<T, W> (see dpsolve/dynamic.cuh). Only bicgstab_dyn_start needs a
// name expression; it instantiates the rest.
#include <dpsolve/dynamic.cuh>

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK) bicgstab_dyn_t(const dyn::StabArgs<T> a, int j, T rho);
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_dyn_update(const dyn::StabArgs<T> a, int j, T rho, T alpha);

// Loop head (prologue: rho_j, tau_j, convergence, maxiter, rho and omega breakdowns) + p, p^ +
// v = A p^ + partials of <r~, v>.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_dyn_v(const dyn::StabArgs<T> a, int j, T rho_prev, T alpha, T omega) {
    __shared__ T smem[DPS_WARP];
    __shared__ T sh_beta;
    __shared__ int sh_go;
    dyn::Head<T> h = dyn::shadow_head(j, a.maxiter, a.atol, a.n, a.part_rho, a.part_rr, a.rt,
                                      a.r, smem);                 // stop rule, rho breakdown
    if (threadIdx.x == 0) {
        const T beta = (j > 0) ? (h.rho / rho_prev) * (alpha / omega) : T(0);
        if (h.go && j > 0 && dyn::mag(omega) < dyn::eps2<T>())
            h = {h.rho, h.tau, -11, j, false};                     // omega breakdown at j
        else if (h.go && !dps::is_finite(beta))
            h = {h.rho, h.tau, -10, j, false};                     // non-finite at j
        sh_go = h.go;
        sh_beta = beta;
        if (blockIdx.x == 0) {
            dyn::head_publish(a.status, a.hist, j, h, [&] {
                bicgstab_dyn_t<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(a, j, h.rho);
            });
        }
    }
    __syncthreads();
    if (!sh_go) return;                                            // block-uniform

    const bool odd = j & 1;
    T* __restrict__ p_new = odd ? a.p1 : a.p0;
    T* __restrict__ v_new = odd ? a.v1 : a.v0;
    const T* __restrict__ rt = a.rt;
    const dyn::LoadStabP<T, false> load{a.r, odd ? a.p0 : a.p1, odd ? a.v0 : a.v1, dps::pointwise(a.pc),
                                        sh_beta, omega, j == 0};
    T acc = T(0);
    dyn::for_rows<T, W>(a.n, a.width, a.indptr, a.indices, a.data, load, [&](int row, T av) {
        p_new[row] = load.p_at(row);
        v_new[row] = av;
        acc += dps::conj(rt[row]) * av;                            // <r~, v>
    }, a.bins);
    dyn::put_partial(acc, a.part_rv, smem);
}

// Prologue: rv = <r~, v> (-11 when 0), alpha (-10 when it or rv is non-finite); then
// s = r - alpha v, t = A s^, partials of <s, s>, <t, s>, <t, t>.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_dyn_t(const dyn::StabArgs<T> a, int j, T rho) {
    __shared__ T smem[DPS_WARP];
    __shared__ T sh_alpha;
    __shared__ int sh_go;
    T rv = dyn::sum_partials(a.part_rv, (int)gridDim.x, smem);
    rv = dps::confirm_dot(rv == T(0), rv, a.n, a.rt, (j & 1) ? a.v1 : a.v0);  // accurate if 0
    if (threadIdx.x == 0) {
        const T alpha = rho / rv;
        const bool zero = rv == T(0);
        const bool go = !zero && dps::is_finite(rv) && dps::is_finite(alpha);
        sh_alpha = alpha;
        sh_go = go;
        if (blockIdx.x == 0) {
            if (go) {
                bicgstab_dyn_update<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(
                    a, j, rho, alpha);
                dyn::check_launch(a.status);
            } else {
                dyn::finish(a.status, zero ? -11 : -10, j);        // x untouched for this step
            }
        }
    }
    __syncthreads();
    if (!sh_go) return;                                            // block-uniform

    T* __restrict__ s = a.s;
    T* __restrict__ t = a.t;
    const dyn::LoadStabS<T, false> load{a.r, (j & 1) ? a.v1 : a.v0, dps::pointwise(a.pc), sh_alpha};
    T ss = T(0), ts = T(0), tt = T(0);
    dyn::for_rows<T, W>(a.n, a.width, a.indptr, a.indices, a.data, load, [&](int row, T av) {
        const T si = load.s_at(row);
        s[row] = si;
        t[row] = av;
        ss += dps::conj(si) * si;
        ts += dps::conj(av) * si;                                  // <t, s>
        tt += dps::conj(av) * av;                                  // <t, t>
    }, a.bins);
    dyn::put_partial(ss, a.part_ss, smem);
    dyn::put_partial(ts, a.part_ts, smem);
    dyn::put_partial(tt, a.part_tt, smem);
}

// Prologue: ||s|| (< atol: last x update, info 0 at j + 1), omega (||s||, <t, s>, <t, t> or omega
// non-finite: last x update, info -10 at j); then x, r updates and the partials of <r~, r>, <r, r>
// for the next loop head.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_dyn_update(const dyn::StabArgs<T> a, int j, T rho, T alpha) {
    __shared__ T smem[DPS_WARP];
    __shared__ T sh_omega;
    __shared__ int sh_done;
    const T ss = dyn::sum_partials(a.part_ss, (int)gridDim.x, smem);
    T ts = dyn::sum_partials(a.part_ts, (int)gridDim.x, smem);
    const T tt = dyn::sum_partials(a.part_tt, (int)gridDim.x, smem);
    // an |omega| below eps^2 (||s|| not converged) is confirmed with the accurate <t, s>
    ts = dps::confirm_dot(!((double)sqrt(fabs(ss)) < a.atol) && dyn::mag(ts / tt) < dyn::eps2<T>(),
                          ts, a.n, a.t, a.s);
    if (threadIdx.x == 0) {
        const dps::real_t<T> snorm = sqrt(fabs(ss));
        const bool done = (double)snorm < a.atol;                  // SciPy's strict test on ||s||
        const T omega = ts / tt;
        const bool nonfinite = !done && !(isfinite(snorm) && dps::is_finite(ts)
                                          && dps::is_finite(tt) && dps::is_finite(omega));
        sh_done = done || nonfinite;                               // x += alpha p^ only, the end
        sh_omega = omega;
        if (blockIdx.x == 0) {
            if (done) {
                a.status[DYN_TAU] = (double)snorm;
                if (a.hist != nullptr) a.hist[j + 1] = snorm;      // residual of x_{j+1} = x + alpha p^
                dyn::finish(a.status, 0, j + 1);
            } else if (nonfinite) {
                dyn::finish(a.status, -10, j);                     // x + alpha p^: the reference's
            } else {
                bicgstab_dyn_v<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(
                    a, j + 1, rho, alpha, omega);
                dyn::check_launch(a.status);
            }
        }
    }
    __syncthreads();

    const int n = a.n;
    const bool done = sh_done;                                     // block-uniform
    const T omega = sh_omega;
    const T* __restrict__ p = (j & 1) ? a.p1 : a.p0;
    const T* __restrict__ s = a.s;
    const T* __restrict__ t = a.t;
    const T* __restrict__ rt = a.rt;
    const dps::Pointwise<T> m = dps::pointwise(a.pc);
    const bool pre = m.active();
    T* __restrict__ x = a.x;
    T* __restrict__ r = a.r;
    T rho_next = T(0), rr = T(0);
    auto step = [&](int i) {
        const T phat = pre ? m.apply(i, p[i]) : p[i];
        T xi = x[i] + alpha * phat;                                // x += alpha p^
        if (done) {
            x[i] = xi;
            return;
        }
        const T si = s[i];
        const T ti = t[i];
        const T shat = pre ? m.apply(i, si) : si;
        xi += omega * shat;                                        // x += omega s^
        x[i] = xi;
        const T ri = si - omega * ti;                              // r = s - omega t
        r[i] = ri;
        rho_next += dps::conj(rt[i]) * ri;
        rr += dps::conj(ri) * ri;
    };
    const int chunk = 2 * gridDim.x * DPS_BLOCK;                   // pairs of elements per thread
    for (int i = blockIdx.x * 2 * DPS_BLOCK + threadIdx.x; i < n; i += chunk) {
        step(i);
        if (i + DPS_BLOCK < n) step(i + DPS_BLOCK);
    }
    if (done) return;                                              // block-uniform
    dyn::put_partial(rho_next, a.part_rho, smem);
    dyn::put_partial(rr, a.part_rr, smem);
}

// The one kernel the host launches: status reset, r = b - A x, r~ = r, partials of <r~, r> and
// <r, r>; then the chain starts with bicgstab_dyn_v(j = 0). The grid size (<= 1024 blocks of
// DPS_BLOCK threads) is the number of partials and is kept by every kernel of the chain.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicgstab_dyn_start(const dyn::StabArgs<T> a) {
    __shared__ T smem[DPS_WARP];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        dyn::start(a.status);
        bicgstab_dyn_v<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(a, 0, T(0), T(0), T(0));
        dyn::check_launch(a.status);
    }
    dyn::ShadowSetup<T> setup{a.b, dps::no_pointwise<T>(), a.r, a.rt, nullptr, nullptr};    // rho_0 = <r~, r>
    dyn::for_rows<T, W>(a.n, a.width, a.indptr, a.indices, a.data, dyn::LoadVec<T>{a.x}, setup, a.bins);
    dyn::put_partial(setup.rho, a.part_rho, smem);
    dyn::put_partial(setup.rr, a.part_rr, smem);
}
