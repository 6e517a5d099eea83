// cg_dynamic.cu - variant "dynamic": the whole CG loop chained on the GPU with CDP2 tail launches.
//
// The paper (Sec. 2) runs CG in one parent kernel that waits on its children with device-side
// cudaDeviceSynchronize. That call does not exist on sm_90 (CDP2). Here the host launches ONE kernel,
// cg_dyn_start, and every later kernel is tail-launched by its predecessor: a tail-launched grid
// starts only after the launching grid and all its work have finished, which is the global barrier.
// A device launch costs ~11 us on Hopper, so the chain aggregates (KLAP): two kernels per iteration.
//
//   cg_dyn_start  (host-launched once)    r = b - A x; z = D^-1 r; per-block partials of <r,z>, <r,r>
//                                         -> tail-launches cg_dyn_spmv(j = 0)
//   cg_dyn_spmv(j)   O5b + O6 O7 O9 in the prologue (each block finishes the partials itself, in the
//                    same order, so every block gets the same bits): sigma_j = zeta,
//                    beta = zeta / sigma_{j-1}, tau_j. Convergence decided here, exactly as
//                    reference/cg.py: tau non-finite (j > 0) -> -10 at j; j == maxiter -> maxiter;
//                    tau < atol -> 0 at j; otherwise
//                    O8 + O1 + O2a: p_j = z + beta p_{j-1} is formed on the fly inside the SpMV
//                    gather (p double-buffered by parity of j, so no block reads what another block
//                    of the same grid writes), v = A p_j, per-block partials of <p_j, v>
//                    -> tail-launches cg_dyn_update(j, sigma_j)
//   cg_dyn_update(j) O2b in the prologue: alpha = sigma_j / <p_j, v>; non-finite -> -10 at j, x and
//                    r untouched, chain ends. Otherwise O3 + O4 merged (pairs of elements per
//                    thread), Jacobi z = D^-1 r, O5a partials of <r,z> (and <r,r> when
//                    preconditioned) -> tail-launches cg_dyn_spmv(j + 1, sigma_j)
//
// Device launches per iteration: 2. Scalars that the next kernel needs (sigma) travel as kernel
// arguments; every other scalar is recomputed from the partials by each block. Each grid has at
// most one pending child, so the pending-launch pool never fills.
//
// Template scheme: cg_dyn_*<T, W> with W = DYN_ELL (0), DYN_CSR_SCALAR (1), or the CSR-vector lane
// width (2, 4, 8, 16, 32). Only cg_dyn_start needs a name expression; it instantiates the rest.
//
// Result (abi.cuh's DYN_* layout): [0] info, [1] iterations, [2] state (0 running, 1 done, 2 a
// device launch failed), [3] the cudaError_t of a failed launch, [4] the last tau.
#include <dpsolve/dynamic.cuh>     // status layout, for_rows, gathers, sum_partials, finish

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK) cg_dyn_update(const dyn::CgArgs<T> a, int j, T sigma);

// O5b O6 O7 O9 (prologue, convergence test) + O8 O1 O2a.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
cg_dyn_spmv(const dyn::CgArgs<T> a, int j, T sigma_prev) {
    __shared__ T smem[DPS_WARP];
    __shared__ T sh_beta;
    __shared__ int sh_go;
    const bool pre = dps::pointwise(a.pc).active();
    const T zeta = dyn::sum_partials(a.part_rz, (int)gridDim.x, smem);
    const T rr = pre ? dyn::sum_partials(a.part_rr, (int)gridDim.x, smem) : zeta;
    if (threadIdx.x == 0) {
        const dps::real_t<T> tau = sqrt(fabs(rr));
        const dps::Stop s = dps::head_test(j, (double)tau, a.atol, a.maxiter);   // stop.cuh
        const bool go = s.go;
        const int info = s.info, its = s.its;
        sh_go = go;
        sh_beta = (j > 0) ? zeta / sigma_prev : T(0);
        if (blockIdx.x == 0) {
            a.status[DYN_TAU] = (double)tau;
            if (a.hist != nullptr) a.hist[j] = tau;
            if (go) {
                cg_dyn_update<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(a, j, zeta);
                dyn::check_launch(a.status);
            } else {
                dyn::finish(a.status, info, its);
            }
        }
    }
    __syncthreads();
    if (!sh_go) return;                                           // block-uniform

    T* __restrict__ v = a.v;
    T* __restrict__ p_new = (j & 1) ? a.p1 : a.p0;
    T acc = T(0);
    if (j == 0) {                                                 // p_0 = z_0
        const dyn::LoadVec<T> load{a.z};
        dyn::for_rows<T, W>(a.n, a.width, a.indptr, a.indices, a.data, load, [&](int row, T av) {
            const T pi = load(row);
            p_new[row] = pi;
            v[row] = av;
            acc += dps::conj(pi) * av;
        }, a.bins);
    } else {                                                      // p_j = z_j + beta p_{j-1}
        const dyn::LoadXpay<T> load{a.z, (j & 1) ? a.p0 : a.p1, sh_beta};
        dyn::for_rows<T, W>(a.n, a.width, a.indptr, a.indices, a.data, load, [&](int row, T av) {
            const T pi = load(row);
            p_new[row] = pi;
            v[row] = av;
            acc += dps::conj(pi) * av;
        }, a.bins);
    }
    dyn::put_partial(acc, a.part_pv, smem);
}

// O2b (prologue) + O3 O4 merged + Jacobi + O5a.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
cg_dyn_update(const dyn::CgArgs<T> a, int j, T sigma) {
    __shared__ T smem[DPS_WARP];
    __shared__ T sh_alpha;
    __shared__ int sh_go;
    const T pv = dyn::sum_partials(a.part_pv, (int)gridDim.x, smem);
    if (threadIdx.x == 0) {
        const T alpha = sigma / pv;
        const bool go = isfinite(alpha);
        sh_alpha = alpha;
        sh_go = go;
        if (blockIdx.x == 0) {
            if (go) {
                cg_dyn_spmv<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(a, j + 1, sigma);
                dyn::check_launch(a.status);
            } else {
                dyn::finish(a.status, -10, j);                    // x untouched for this step
            }
        }
    }
    __syncthreads();
    if (!sh_go) return;                                           // block-uniform

    const int n = a.n;
    const T alpha = sh_alpha;
    const T* __restrict__ p = (j & 1) ? a.p1 : a.p0;
    const T* __restrict__ v = a.v;
    const dps::Pointwise<T> m = dps::pointwise(a.pc);
    T* __restrict__ x = a.x;
    T* __restrict__ r = a.r;
    T* __restrict__ z = a.z;
    const bool pre = m.active();
    T rz = T(0), rr = T(0);
    auto step = [&](int i) {
        x[i] += alpha * p[i];                                     // O3
        const T ri = r[i] - alpha * v[i];                         // O4
        r[i] = ri;
        if (pre) {
            const T zi = m.apply(i, ri);                          // z = M r
            z[i] = zi;
            rz += dps::conj(ri) * zi;
            rr += dps::conj(ri) * ri;
        } else {
            rz += dps::conj(ri) * ri;
        }
    };
    const int chunk = 2 * gridDim.x * DPS_BLOCK;                  // pairs of elements per thread
    for (int i = blockIdx.x * 2 * DPS_BLOCK + threadIdx.x; i < n; i += chunk) {
        step(i);
        if (i + DPS_BLOCK < n) step(i + DPS_BLOCK);
    }
    dyn::put_partial(rz, a.part_rz, smem);
    if (pre) dyn::put_partial(rr, a.part_rr, smem);
}

// The one kernel the host launches: status reset, r = b - A x, z = M r, partials of <r,z> and
// <r,r>; then the chain starts with cg_dyn_spmv(j = 0). The grid size (<= 1024 blocks of DPS_BLOCK
// threads) is the number of partials and is kept by every kernel of the chain.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
cg_dyn_start(const dyn::CgArgs<T> a) {      // a.z == a.r without a preconditioner
    __shared__ T smem[DPS_WARP];
    const T* __restrict__ b = a.b;
    const dps::Pointwise<T> m = dps::pointwise(a.pc);
    T* __restrict__ r = a.r;
    T* __restrict__ z = a.z;
    const bool pre = m.active();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        dyn::start(a.status);
        cg_dyn_spmv<T, W><<<gridDim.x, DPS_BLOCK, 0, cudaStreamTailLaunch>>>(a, 0, T(0));
        dyn::check_launch(a.status);
    }
    T rz = T(0), rr = T(0);
    const dyn::LoadVec<T> load{a.x};
    dyn::for_rows<T, W>(a.n, a.width, a.indptr, a.indices, a.data, load, [&](int row, T ax) {
        const T ri = b[row] - ax;
        r[row] = ri;
        if (pre) {
            const T zi = m.apply(row, ri);
            z[row] = zi;
            rz += dps::conj(ri) * zi;
            rr += dps::conj(ri) * ri;
        } else {
            rz += dps::conj(ri) * ri;
        }
    }, a.bins);
    dyn::put_partial(rz, a.part_rz, smem);
    if (pre) dyn::put_partial(rr, a.part_rr, smem);
}
