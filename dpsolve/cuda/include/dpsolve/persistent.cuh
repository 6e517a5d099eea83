// dpsolve/persistent.cuh - device helpers shared by the cooperative solvers of variant
// "persistent" (cg_persistent.cu, bicg_persistent.cu, bicgstab_persistent.cu): coherent gathers of
// vectors the kernel itself writes, the redundant finish of a DOT from all blocks' partials, and
// the loop head BiCG and BiCGStab share.
//
// Coherence: a vector written inside the kernel and read by other blocks after a grid.sync is
// loaded with ld.global.cg (dps::ldcg: L2, not the non-coherent L1 / read-only path).
#pragma once

#include <cooperative_groups.h>
#include <dpsolve/dynamic.cuh>

namespace cgrp = cooperative_groups;

namespace pers {

// A vector written inside this kernel, gathered through L2 (e.g. the set-up's x).
template <typename T>
struct LoadCoherent {
    const T* x;
    __device__ __forceinline__ T operator()(int c) const { return dps::ldcg(x + c); }
};

// p_j = z + beta p_{j-1} (p_0 = z when ``first``) formed at gather time from coherent loads.
// Explicit fma, so the value gathered for column c is bitwise what row c's owner stores as p_j[c].
template <typename T>
struct LoadXpayCoherent {
    const T* z;
    const T* p;                          // p_{j-1} (not read when first)
    T beta;
    bool first;
    __device__ __forceinline__ T operator()(int c) const {
        const T zc = dps::ldcg(z + c);
        return first ? zc : fma(beta, dps::ldcg(p + c), zc);
    }
};

// Sum of nparts partials written by other blocks before the last grid.sync; every thread of
// the block gets the total (same order in every block, so the same bits everywhere).
template <typename T>
__device__ __forceinline__ T all_sum(const T* parts, int nparts, T* smem, T* bcast) {
    T s = T(0);
    for (int i = threadIdx.x; i < nparts; i += DPS_BLOCK) s += dps::ldcg(parts + i);
    s = dps::block_sum(s, smem);
    if (threadIdx.x == 0) *bcast = s;
    __syncthreads();
    const T total = *bcast;
    __syncthreads();
    return total;
}

// The loop head of BiCG and BiCGStab at step j, by every thread of every block (same bits
// everywhere, so every block decides alike): rho_j and tau_j = ||r_j|| from the partials of
// <r~, z> and <r, r> (hist[j] = tau_j), then the reference's decisions in its order: tau_j
// non-finite (j > 0) -> -10 at j (the reference's test at the end of step j-1, as
// cg_persistent's); j == maxiter -> info maxiter; tau_j < atol -> 0 at j (SciPy's strict test);
// |rho_j| < eps^2 -> -10 at j, a fast |rho_j| that small confirmed first with the accurate
// <r~, z> (a rare path, dps::confirm_dot); rho_j non-finite -> -10 at j. go: none of them ended
// the solve (the callers then test beta, which needs their own scalars). dyn::shadow_head is
// the dynamic chains' twin, decided in thread 0.
template <typename T>
__device__ __forceinline__ dyn::Head<T> shadow_head(int j, int maxiter, double atol, int n,
                                               const T* part_rho, const T* part_rr, const T* rt,
                                               const T* z, dps::real_t<T>* hist, T* smem,
                                               T* bcast) {
    T rho = all_sum(part_rho, gridDim.x, smem, bcast);
    const T rr = all_sum(part_rr, gridDim.x, smem, bcast);
    const dps::real_t<T> tau = sqrt(fabs(rr));
    if (hist != nullptr && blockIdx.x == 0 && threadIdx.x == 0) hist[j] = tau;
    const dps::Stop s = dps::head_test(j, (double)tau, atol, maxiter);   // stop.cuh
    if (!s.go) return {rho, (double)tau, s.info, s.its, false};
    rho = dps::confirm_dot(dyn::mag(rho) < dyn::eps2<T>(), rho, n, rt, z);
    if (dyn::mag(rho) < dyn::eps2<T>()) return {rho, (double)tau, -10, j, false};
    if (!dps::is_finite(rho)) return {rho, (double)tau, -10, j, false};
    return {rho, (double)tau, 0, j, true};
}

}  // namespace pers
