// cg_merge.cu - the fused macro-kernels of the paper's Figure 2 (the `merge` variant of CG).
//
// One CG iteration is five launches, driven from the host (dpsolve/backends/merge.py):
//
//   {O1-O2a}        cg_spmv_dot<T, W>    v = A p, per-block partials of <p, v> (W: CSR-scalar
//                                        or ELL, abi.cuh's DYN_CSR_SCALAR / DYN_ELL)
//                   (CSR-vector: O1 and O2a stay separate, spmv.cu's SpMV then blas1's dot_partial)
//   {O2b}           cg_merge_alpha<T>    pv = sum of partials; alpha = sigma / pv
//   {O3-O4-O5a}     cg_update_dot<T>     x += alpha p; r -= alpha v; z = D^-1 r; partials of
//                                        <r, z> (and of <r, r> when preconditioned)
//   {O5b-O6-O7-O9}  cg_merge_beta<T>     zeta, rr; beta = zeta / sigma; sigma = zeta; tau = sqrt|rr|
//   {O8}            blas1's xpay<T>      p = z + beta p
//
// The partial-producing kernels run a FIXED grid of nparts <= 1024 blocks (DOT_MAX_PARTIALS in
// ops.py) over grid-stride rows/elements, so each block leaves exactly one partial sum; the
// finishing kernels run one block that reduces the nparts partials. Two partial arrays are used
// when preconditioned: <r, z> in partials[0:nparts] and <r, r> in partials[1024:1024+nparts].
//
// Thread mapping (the paper's condition (i) for merging O1 and O2a): in the CSR-scalar and ELL
// instances one thread owns row i, computes v_i and multiplies it by p_i itself, so v never goes
// through memory between the SpMV and the first DOT stage.
//
// Bytes per call below: s = sizeof(T), n rows, nnz stored entries, nparts blocks, w the ELL width.
// Gathers of p through the column indices are counted as nnz*s (an upper bound; many hit cache).
#include <dpsolve/common.cuh>
#include <dpsolve/precond.cuh>
#include <dpsolve/spmv.cuh>

// {O1-O2a}: v = A p; partials[b] = sum over the rows of block b of conj(p_i) v_i. One thread per
// row (grid-stride over rows) in the format W names (dps::thread_row: DYN_CSR_SCALAR, CSR with
// `width` unused; DYN_ELL, column-major ELL with padding column -1 and `indptr` null; offsets
// k*n + row are size_t), then block_sum.
// Reads, CSR-scalar: (n+1)*4 + nnz*(4+s) (indptr, indices, data); ELL: up to w*n*(4+s) (indices,
// data); then nnz*s (p gathers) + n*s (p_i); writes n*s (v) + nparts*s (partials).
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
cg_spmv_dot(int n, int width, const int* __restrict__ indptr, const int* __restrict__ indices,
            const T* __restrict__ data, const T* __restrict__ p, T* __restrict__ v,
            T* __restrict__ partials) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T sum = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        const int row = (int)i;
        const T vi = dps::thread_row<W>(row, n, width, indptr, indices, data, p);
        v[row] = vi;
        sum += dps::conj(p[row]) * vi;
    }
    sum = dps::block_sum(sum, smem);          // every thread of the block reaches this
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// {O2b}: one block reduces the nparts partials to pv and computes alpha = sigma / pv.
// A non-finite alpha (pv == 0, overflow, NaN) sets status = -10 and alpha = 0, so the update that
// follows leaves x and r untouched (the contract of cg.cu's cg_alpha).
// Reads nparts*s + s (sigma); writes 2*s (pv, alpha) + s (status, only on breakdown).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
cg_merge_alpha(int nparts, const T* __restrict__ partials, const T* __restrict__ sigma,
               T* __restrict__ pv, T* __restrict__ alpha, T* __restrict__ status) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T sum = T(0);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) sum += partials[i];
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) {
        pv[0] = sum;
        T a = sigma[0] / sum;
        if (!isfinite(a)) {
            status[0] = T(DPS_BREAKDOWN);
            a = T(0);
        }
        alpha[0] = a;
    }
}

// {O3-O4-O5a}: x += alpha p (O3); r -= alpha v (O4); with a pointwise preconditioner (pc,
// precond.cuh) z = M r is written; per-block partials of <r, z> into part_rz[b] and, when preconditioned, of
// <r, r> into part_rr[b]. Unpreconditioned, z is r and only <r, r> is accumulated (part_rr unused).
// One thread per element (grid-stride), then one block_sum per dot (pc is uniform).
// Reads s (alpha) + 4*n*s (p, v, x, r) [+ n*s (Jacobi's D^-1)]; writes 2*n*s (x, r) [+ n*s (z)]
// + nparts*s [+ nparts*s] (partials).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
cg_update_dot(int n, const T* __restrict__ alpha, const T* __restrict__ p,
              const T* __restrict__ v, T* __restrict__ x, T* __restrict__ r,
              const dyn::PrecondArgs<T> pc, T* __restrict__ z,
              T* __restrict__ part_rz, T* __restrict__ part_rr) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    const T a = alpha[0];
    const dps::Pointwise<T> m(pc);
    const bool pre = m.active();
    T rz = T(0), rr = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        x[i] += a * p[i];
        const T ri = r[i] - a * v[i];
        r[i] = ri;
        if (pre) {
            const T zi = m.apply(i, ri);
            z[i] = zi;
            rz += dps::conj(ri) * zi;
            rr += dps::conj(ri) * ri;
        } else {
            rz += dps::conj(ri) * ri;
        }
    }
    rz = dps::block_sum(rz, smem);
    if (pre) rr = dps::block_sum(rr, smem);   // block-uniform condition
    if (threadIdx.x == 0) {
        part_rz[blockIdx.x] = rz;
        if (pre) part_rr[blockIdx.x] = rr;
    }
}

// {O5b-O6-O7-O9}: one block reduces the partials: zeta = <r, z> (O5b), rr = <r, r> (the second
// partial array when part_rr != nullptr, else rr = zeta); beta = zeta / sigma (O6);
// sigma = zeta (O7); tau = sqrt(|rr|) (O9). Writes zeta, rr, beta, sigma and tau to their slots.
// Reads nparts*s [+ nparts*s] + s (sigma); writes 5*s.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
cg_merge_beta(int nparts, const T* __restrict__ part_rz, const T* __restrict__ part_rr,
              T* __restrict__ sigma, T* __restrict__ zeta, T* __restrict__ rr,
              T* __restrict__ beta, T* __restrict__ tau) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T s_rz = T(0), s_rr = T(0);
    const bool pre = (part_rr != nullptr);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        s_rz += part_rz[i];
        if (pre) s_rr += part_rr[i];
    }
    s_rz = dps::block_sum(s_rz, smem);
    if (pre) s_rr = dps::block_sum(s_rr, smem);   // block-uniform condition
    if (threadIdx.x == 0) {
        const T zt = s_rz;
        const T nrm2 = pre ? s_rr : zt;
        zeta[0] = zt;
        rr[0] = nrm2;
        beta[0] = zt / sigma[0];
        sigma[0] = zt;
        tau[0] = sqrt(fabs(nrm2));
    }
}
