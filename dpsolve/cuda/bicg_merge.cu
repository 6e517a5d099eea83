// bicg_merge.cu - BiCG's fused macro-kernels (the `merge` variant; dpsolve/backends/merge.py), built
// as the paper's Figure 2 builds CG's: kernels that share the mapping of threads to vector elements
// are merged, the first stage of each DOT is fused into the kernel that produces its operands, and
// the second stage of each DOT is fused with the scalar operations into a one-block kernel.
//
// One iteration j of dpsolve/reference/bicg.py is five launches (six with CSR-vector):
//
//   {rho check, p, p~}   bicg_merge_p<T>        status = pending (-10 found by bicg_merge_rho);
//                                               p = z + beta p; p~ = z~ + conj(beta) p~
//   {SpMV x2, DOT_ini}   bicg_spmv2_dot<T, W>   (W: CSR-scalar or ELL, DYN_CSR_SCALAR / DYN_ELL)
//                                               q = A p; q~ = A^H p~; per-block partials of <p~, q>
//                        (CSR-vector: bicg_spmv2_vector<T, W> computes q and q~ -- a group of W
//                        lanes owns a row of each -- then blas1's dot_partial: as in CG, the DOT
//                        cannot take the SpMV's thread mapping there)
//   {DOT_fin, alpha}     bicg_merge_alpha<T>    <p~, q> == 0 -> status = -11;
//                                               alpha = rho / <p~, q>; <p~, q> or alpha
//                                               non-finite -> status = -10
//   {x, r, r~, psolve, DOT_ini x2}
//                        bicg_merge_update<T>   x += alpha p; r -= alpha q; r~ -= conj(alpha) q~;
//                                               z = D^-1 r; z~ = conj(D^-1) r~ (Jacobi);
//                                               partials of <r~, z> and of <r, r>
//   {DOT_fin x2, tau, beta, rho check}
//                        bicg_merge_rho<T>      rho' = <r~, z>; tau = sqrt(|<r, r>|) (the host's
//                                               test of iteration j+1); beta = rho' / rho;
//                                               pending = -10 if |rho'| < eps^2 or rho' or beta is
//                                               non-finite, else 0; rho = rho'
//   host: read (tau, status), 1 copy + 1 wait
//
// Why the others cannot merge (each boundary is a global barrier):
//   * p -> SpMV: q_i gathers p_k of other rows, so every p_k must be written first.
//   * SpMV/DOT_ini -> alpha, update -> rho: a DOT's second stage needs every block's partial.
//   * alpha -> update, rho -> next p: every element needs the scalar alpha (beta), which exists
//     only once the reduction is complete.
// The rho test belongs to the next iteration, after the host's ||r|| test: bicg_merge_rho only
// records it (pending), and the next iteration's first kernel raises it, so an iteration whose
// tau is below atol reports convergence, not breakdown, exactly as the reference does. Set-up
// runs bicg_merge_rho with first = 1 (status = 0, beta = 0) over dot_partial's partials.
//
// Status: a breakdown sets the status slot to SciPy's code; the kernels after it are no-ops, so x
// stays where the reference leaves it. A non-finite scalar is -10 at the same place (dpsolve's
// extension, as CG's; SciPy iterates on NaN): rho and beta through pending, <p~, q> and alpha in
// bicg_merge_alpha; a non-finite tau is the host's (host_loop) or graph_step's -10.
// Unpreconditioned, z is r and z~ is r~ (pc inactive, z and z~ null in bicg_merge_update).
//
// Bytes per call (s = sizeof(T), n rows, nnz stored entries per matrix, nparts <= 1024 blocks, w
// the ELL widths; gathers of p / p~ counted as nnz*s each, an upper bound):
//   bicg_merge_p        reads 4n*s (z, z~, p, p~) + 3s, writes 2n*s
//   bicg_spmv2_dot      reads 2 matrices (CSR: 2*(nnz*(4+s) + (n+1)*4); ELL: (wA + wAH)*n*(4+s))
//                       + 2nnz*s (gathers) + n*s (p~_i), writes 2n*s (q, q~) + nparts*s
//   bicg_spmv2_vector   the same without the p~_i read and the partials (dot_partial: 2n*s more)
//   bicg_merge_alpha    reads nparts*s + 2s, writes 2s
//   bicg_merge_update   reads 6n*s (alpha-updates of x, r, r~ with p, q, q~) [+ n*s D^-1],
//                       writes 3n*s [+ 2n*s (z, z~)] + 2nparts*s
//   bicg_merge_rho      reads 2nparts*s + 2s, writes 5s
#include <dpsolve/common.cuh>
#include <dpsolve/precond.cuh>
#include <dpsolve/spmv.cuh>

// Vector updates round each product on its own (dps::mul_rn), as NumPy does in the reference.
// (The dots keep their FMAs: how they round is part of the reduction order anyway.)

// {rho check, p, p~}: a pending rho breakdown (set by bicg_merge_rho) becomes the status and the
// iteration does nothing; otherwise p = z + beta p, p~ = z~ + conj(beta) p~. pending is uniform,
// and only thread 0 of block 0 writes status (nothing in this kernel reads it).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_merge_p(int n, const T* __restrict__ pending, T* __restrict__ status, const T* __restrict__ beta,
             const T* __restrict__ z, const T* __restrict__ zt, T* __restrict__ p,
             T* __restrict__ pt) {
    DPS_PDL();
    const T flag = pending[0];
    if (flag != T(0)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) status[0] = flag;
        return;
    }
    const T b = beta[0], bc = dps::conj(beta[0]);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        p[i] = z[i] + dps::mul_rn(b, p[i]);
        pt[i] = zt[i] + dps::mul_rn(bc, pt[i]);
    }
}

// {SpMV x2, DOT_ini}: thread i owns row i of A and of A^H, in the format W names (dps::thread_row:
// DYN_CSR_SCALAR, CSR with the widths unused; DYN_ELL, column-major ELL with padding column -1 and
// the indptrs null): q_i = (A p)_i, q~_i = (A^H p~)_i, and adds conj(p~_i) q_i to its block's
// partial of <p~, q>.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_spmv2_dot(int n, int a_width, const int* __restrict__ a_ptr, const int* __restrict__ a_idx,
               const T* __restrict__ a_val, int h_width, const int* __restrict__ h_ptr,
               const int* __restrict__ h_idx, const T* __restrict__ h_val,
               const T* __restrict__ p, const T* __restrict__ pt, T* __restrict__ q,
               T* __restrict__ qt, T* __restrict__ partials) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    T sum = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        const int row = (int)i;
        const T qi = dps::thread_row<W>(row, n, a_width, a_ptr, a_idx, a_val, p);
        q[row] = qi;
        qt[row] = dps::thread_row<W>(row, n, h_width, h_ptr, h_idx, h_val, pt);
        sum += dps::conj(pt[row]) * qi;
    }
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// {SpMV x2}, CSR-vector: a group of W lanes owns row `row` of A and of A^H (both matrices have the
// same n and nnz, so the same W). The loop bound is uniform across each warp, as the shuffles need.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_spmv2_vector(int n, const int* __restrict__ a_ptr, const int* __restrict__ a_idx,
                  const T* __restrict__ a_val, const int* __restrict__ h_ptr,
                  const int* __restrict__ h_idx, const T* __restrict__ h_val,
                  const T* __restrict__ p, const T* __restrict__ pt, T* __restrict__ q,
                  T* __restrict__ qt) {
    DPS_PDL();
    const int groups_per_block = DPS_BLOCK / W;
    const int lane = threadIdx.x % W;
    const int stride = gridDim.x * groups_per_block;
    for (int base = blockIdx.x * groups_per_block; base < n; base += stride) {
        const int row = base + threadIdx.x / W;
        const T qi = dps::csr_row_vector<T, W>(row, n, lane, a_ptr, a_idx, a_val, p);
        const T qti = dps::csr_row_vector<T, W>(row, n, lane, h_ptr, h_idx, h_val, pt);
        if (lane == 0 && row < n) {
            q[row] = qi;
            qt[row] = qti;
        }
    }
}

// {DOT_fin, alpha}: one block. rv = sum of the partials (<a, b>); rv == 0 -> status = -11 (SciPy's
// test, exact, confirmed with the accurate <a, b>: dps::confirm_dot); else alpha = rho / rv, and
// rv or alpha non-finite -> status = -10 (the update kernel then leaves x alone). A no-op once
// status != 0 (uniform: every thread returns).
// Also used by BiCGStab ({DOT_fin, alpha} of bicgstab_merge.cu, rv = <r~, v>).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_merge_alpha(int nparts, const T* __restrict__ partials, int n, const T* __restrict__ a,
                 const T* __restrict__ b, const T* __restrict__ rho, T* __restrict__ rv,
                 T* __restrict__ alpha, T* __restrict__ status) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    if (status[0] != T(0)) return;
    T sum = T(0);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) sum += partials[i];
    sum = dps::block_sum(sum, smem);
    sum = dps::confirm_dot(sum == T(0), sum, n, a, b);            // accurate <a, b> if 0
    if (threadIdx.x == 0) {
        rv[0] = sum;
        if (sum == T(0)) {
            status[0] = T(-11);
        } else {
            const T a = rho[0] / sum;
            if (!dps::is_finite(sum) || !dps::is_finite(a)) status[0] = T(-10);
            else alpha[0] = a;
        }
    }
}

// {x, r, r~, psolve, DOT_ini x2}: one thread per element. x += alpha p; r -= alpha q;
// r~ -= conj(alpha) q~; with a pointwise M (pc): z = M r, z~ = M^H r~. Partials of <r~, z>
// (z = r unpreconditioned) into part_rho and of <r, r> into part_rr. A no-op once status != 0.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_merge_update(int n, const T* __restrict__ status, const T* __restrict__ alpha,
                  const T* __restrict__ p, const T* __restrict__ q, const T* __restrict__ qt,
                  T* __restrict__ x, T* __restrict__ r, T* __restrict__ rt,
                  const dyn::PrecondArgs<T> pc, T* __restrict__ z, T* __restrict__ zt,
                  T* __restrict__ part_rho, T* __restrict__ part_rr) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    if (status[0] != T(0)) return;                       // uniform over the grid
    const T a = alpha[0], ac = dps::conj(alpha[0]);
    const dps::Pointwise<T> m(pc);
    const bool pre = m.active();
    T rho = T(0), rr = T(0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        x[i] = x[i] + dps::mul_rn(a, p[i]);
        const T ri = r[i] - dps::mul_rn(a, q[i]);
        const T rti = rt[i] - dps::mul_rn(ac, qt[i]);
        r[i] = ri;
        rt[i] = rti;
        T zi = ri;
        if (pre) {
            zi = m.apply(i, ri);
            z[i] = zi;
            zt[i] = m.apply_adjoint(i, rti);
        }
        rho += dps::conj(rti) * zi;
        rr += dps::conj(ri) * ri;
    }
    rho = dps::block_sum(rho, smem);
    rr = dps::block_sum(rr, smem);
    if (threadIdx.x == 0) {
        part_rho[blockIdx.x] = rho;
        part_rr[blockIdx.x] = rr;
    }
}

// {DOT_fin x2, tau, beta, rho check}: one block. rho' = sum of part_rho, rr = sum of part_rr;
// tau = sqrt(|rr|); beta = rho' / rho (0 when first); pending = -10 if |rho'| < tol (a fast rho'
// below tol is first replaced by the accurate <r~, z>, dps::confirm_dot) or rho' or beta is
// non-finite; rho = rho'.
// first = 1 at set-up (also status = 0); otherwise a no-op once status != 0.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
bicg_merge_rho(int nparts, const T* __restrict__ part_rho, const T* __restrict__ part_rr, int first,
               dps::real_t<T> tol, int n, const T* __restrict__ rt, const T* __restrict__ z,
               T* __restrict__ rho, T* __restrict__ beta, T* __restrict__ tau,
               T* __restrict__ pending, T* __restrict__ status) {
    DPS_PDL();
    __shared__ T smem[DPS_WARP];
    if (!first && status[0] != T(0)) return;
    T s_rho = T(0), s_rr = T(0);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        s_rho += part_rho[i];
        s_rr += part_rr[i];
    }
    s_rho = dps::block_sum(s_rho, smem);
    s_rr = dps::block_sum(s_rr, smem);
    s_rho = dps::confirm_dot(fabs(s_rho) < tol, s_rho, n, rt, z);   // accurate <r~, z> if tiny
    if (threadIdx.x == 0) {
        tau[0] = sqrt(fabs(s_rr));
        const T b = first ? T(0) : s_rho / rho[0];
        const bool stop = fabs(s_rho) < tol || !dps::is_finite(s_rho) || !dps::is_finite(b);
        pending[0] = stop ? T(-10) : T(0);
        beta[0] = b;
        rho[0] = s_rho;
        if (first) status[0] = T(0);
    }
}
