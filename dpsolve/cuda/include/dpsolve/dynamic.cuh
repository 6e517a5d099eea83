// dpsolve/dynamic.cuh - device helpers shared by the CDP2 tail-launch chains of variant "dynamic"
// (cg_dynamic.cu, bicg_dynamic.cu, bicgstab_dynamic.cu) and, through persistent.cuh, by the
// cooperative kernels of variant "persistent": the status layout, the SpMV row loop with gather
// functors (BiCGStab's with a `Coherent` switch for the persistent kernels), the BiCG / BiCGStab
// set-up row, the per-block DOT partials and their redundant stage 2, and the solve's start, end
// and launch-failure records.
//
// Template scheme of every chain: kernels <T, W> with W = DYN_ELL (0), DYN_CSR_SCALAR (1), the
// CSR-vector lane width (2, 4, 8, 16, 32), or DYN_ADAPTIVE (64: csr-adaptive's row bins).
//
// Result area (double status[DYN_STATUS_WORDS], abi.cuh): DYN_INFO, DYN_ITERS, DYN_STATE (running,
// done, or a device launch failed), DYN_ERROR (the cudaError_t of a failed launch), DYN_TAU (the
// last residual norm tested).
#pragma once

#include <dpsolve/common.cuh>
#include <dpsolve/args.cuh>     // CgArgs, BicgArgs, StabArgs: the chains' by-value arguments
#include <dpsolve/precond.cuh>  // dps::Pointwise: the fused preconditioner

#ifndef cudaStreamTailLaunch      // cuda_device_runtime_api.h defines it for CDP2 builds
#define cudaStreamTailLaunch ((cudaStream_t)0x3)
#endif

// DYN_ELL, DYN_CSR_SCALAR, DYN_ADAPTIVE and the result area's DYN_* indices and states: abi.cuh

namespace dyn {

// Gathers for the SpMV: a plain vector, or p = z + beta * p_old formed on the fly (fma, so the
// value gathered for column c is bitwise the value that row c's owner stores as p[c]).
template <typename T>
struct LoadVec {
    const T* __restrict__ x;
    __device__ __forceinline__ T operator()(int c) const { return dps::ldg(x + c); }
};

template <typename T>
struct LoadXpay {
    const T* __restrict__ z;
    const T* __restrict__ p;
    T beta;
    __device__ __forceinline__ T operator()(int c) const { return fma(beta, dps::ldg(p + c), dps::ldg(z + c)); }
};

// A vector load: through the read-only path where the vector was written by an earlier launch
// (the dynamic chains), through L2 where this kernel wrote it before a grid.sync (`Coherent`:
// the persistent kernels, persistent.cuh).
template <bool Coherent, typename T>
__device__ __forceinline__ T ld(const T* p) {
    if constexpr (Coherent) return dps::ldcg(p);
    else return dps::ldg(p);
}

// BiCGStab's gathers. p_j = r + beta (p_{j-1} - omega v_{j-1}) (p_0 = r when `first`), and the
// gather p^ = M p_j (M pointwise). Explicit fma, so the value gathered for column c is bitwise what row c's
// owner stores as p_j[c].
template <typename T, bool Coherent>
struct LoadStabP {
    const T* r;
    const T* p;                          // p_{j-1} (not read when first)
    const T* v;                          // v_{j-1} (not read when first)
    dps::Pointwise<T> m;                 // the preconditioner (inactive: p^ = p)
    T beta, omega;
    bool first;
    __device__ __forceinline__ T p_at(int c) const {
        const T rc = ld<Coherent>(r + c);
        return first ? rc : fma(beta, fma(-omega, ld<Coherent>(v + c), ld<Coherent>(p + c)), rc);
    }
    __device__ __forceinline__ T operator()(int c) const {
        const T pc = p_at(c);
        return m.active() ? m.apply(c, pc) : pc;
    }
};

// s = r - alpha v_j, and the gather s^ = M s.
template <typename T, bool Coherent>
struct LoadStabS {
    const T* r;
    const T* v;                          // v_j
    dps::Pointwise<T> m;                 // the preconditioner (inactive: s^ = s)
    T alpha;
    __device__ __forceinline__ T s_at(int c) const {
        return fma(-alpha, ld<Coherent>(v + c), ld<Coherent>(r + c));
    }
    __device__ __forceinline__ T operator()(int c) const {
        const T sc = s_at(c);
        return m.active() ? m.apply(c, sc) : sc;
    }
};

// The set-up of BiCG and BiCGStab, one row at a time as for_rows emits (A x)[row]: r = b - A x,
// r~ = r and, with a preconditioner (BiCG only), z = M r and z~ = M^H r~. Accumulates the
// emitting thread's share of rho_0 = <r~, z> (<r~, r> without one) and of <r, r>.
template <typename T>
struct ShadowSetup {
    const T* __restrict__ b;
    dps::Pointwise<T> m;                 // inactive: z, z~ not written
    T* r;
    T* rt;
    T* z;
    T* zt;
    T rho = T(0), rr = T(0);
    __device__ __forceinline__ void operator()(int row, T ax) {
        const T ri = b[row] - ax;
        r[row] = ri;
        rt[row] = ri;
        if (m.active()) {
            const T zi = m.apply(row, ri);
            z[row] = zi;
            zt[row] = m.apply_adjoint(row, ri);
            rho += dps::conj(ri) * zi;
        } else {
            rho += dps::conj(ri) * ri;
        }
        rr += dps::conj(ri) * ri;
    }
};

// csr-adaptive's row bins (dpsolve/formats/adaptive.py) as the device-driven kernels take them:
// one device array of 11 64-bit words (ops.adaptive_descriptor): the pointers short_rows,
// med_rows, long_rows, chunk_long, chunk_begin, first_chunk, counters, partials, then n_short,
// n_med, n_chunks.
template <typename T>
struct Bins {
    const int* short_rows;
    const int* med_rows;
    const int* long_rows;
    const int* chunk_long;
    const int* chunk_begin;
    const int* first_chunk;
    int* counters;
    T* partials;
    int n_short, n_med, n_chunks;
    static_assert(DPS_BINS_WORDS == 11, "Bins::load reads DPS_BINS_WORDS words: keep them in step");
    __device__ __forceinline__ static Bins load(const unsigned long long* __restrict__ d) {
        return {reinterpret_cast<const int*>(d[0]), reinterpret_cast<const int*>(d[1]),
                reinterpret_cast<const int*>(d[2]), reinterpret_cast<const int*>(d[3]),
                reinterpret_cast<const int*>(d[4]), reinterpret_cast<const int*>(d[5]),
                reinterpret_cast<int*>(d[6]), reinterpret_cast<T*>(d[7]),
                (int)d[8], (int)d[9], (int)d[10]};
    }
};

// For every row of A (grid-stride, fixed grid): emit(row, (A y)[row]) with y given by `load`.
// CSR-vector: a group of W lanes per row; the loop bound is block-uniform, so the shuffles of
// group_sum run in warp-uniform control flow; only the group's first lane emits.
// csr-adaptive (W = DYN_ADAPTIVE, `bins` its descriptor): every block takes, grid-stride, a share
// of each bin as spmv_csr_adaptive (spmv.cu) maps it: thread-mapped rows, one warp per medium
// row, one block per DPS_CHUNK-entry chunk of a long row; the block that finishes a long row's
// last chunk (an atomic counter per row) sums its chunk partials in chunk order (deterministic),
// emits the row from its thread 0 and resets the counter for the next product. Every thread of
// the block must call it (the chunk loop is block-uniform and synchronises the block).
template <typename T, int W, typename Load, typename Emit>
__device__ __forceinline__ void for_rows(int n, int width, const int* __restrict__ indptr,
                                         const int* __restrict__ indices,
                                         const T* __restrict__ data, const Load& load, Emit&& emit,
                                         const unsigned long long* __restrict__ bins = nullptr) {
    if constexpr (W == DYN_ADAPTIVE) {
        const Bins<T> bn = Bins<T>::load(bins);
        for (int i = blockIdx.x * DPS_BLOCK + threadIdx.x; i < bn.n_short; i += gridDim.x * DPS_BLOCK) {
            const int row = bn.short_rows[i];
            T sum = T(0);
            const int end = indptr[row + 1];
            for (int k = indptr[row]; k < end; ++k) sum += data[k] * load(indices[k]);
            emit(row, sum);
        }
        constexpr int warps = DPS_BLOCK / DPS_WARP;
        const int lane = threadIdx.x % DPS_WARP;
        for (int base = blockIdx.x * warps; base < bn.n_med; base += gridDim.x * warps) {
            const int i = base + threadIdx.x / DPS_WARP;
            T sum = T(0);
            if (i < bn.n_med) {
                const int row = bn.med_rows[i];
                const int end = indptr[row + 1];
                for (int k = indptr[row] + lane; k < end; k += DPS_WARP) sum += data[k] * load(indices[k]);
            }
            sum = dps::warp_sum(sum);
            if (lane == 0 && i < bn.n_med) emit(bn.med_rows[i], sum);
        }
        __shared__ T smem_chunk[DPS_WARP];
        for (int c = blockIdx.x; c < bn.n_chunks; c += gridDim.x) {        // block-uniform
            const int li = bn.chunk_long[c];
            const int row = bn.long_rows[li];
            const int end = min(bn.chunk_begin[c] + DPS_CHUNK, indptr[row + 1]);
            T sum = T(0);
            for (int k = bn.chunk_begin[c] + threadIdx.x; k < end; k += DPS_BLOCK)
                sum += data[k] * load(indices[k]);
            sum = dps::block_sum(sum, smem_chunk);
            if (threadIdx.x == 0) {
                bn.partials[c] = sum;
                __threadfence();                       // the partial is visible before the count
                const int first = bn.first_chunk[li], count = bn.first_chunk[li + 1] - first;
                if (atomicAdd(bn.counters + li, 1) == count - 1) {       // this row's last chunk
                    __threadfence();
                    T total = T(0);
                    for (int k = first; k < first + count; ++k) total += dps::ldcg(bn.partials + k);
                    bn.counters[li] = 0;               // ready for the next product
                    emit(row, total);
                }
            }
        }
    } else if constexpr (W == DYN_ELL) {
        for (int row = blockIdx.x * DPS_BLOCK + threadIdx.x; row < n; row += gridDim.x * DPS_BLOCK) {
            T sum = T(0);
            for (int k = 0; k < width; ++k) {
                const size_t at = (size_t)k * n + row;
                const int c = indices[at];
                if (c < 0) break;
                sum += data[at] * load(c);
            }
            emit(row, sum);
        }
    } else if constexpr (W == DYN_CSR_SCALAR) {
        for (int row = blockIdx.x * DPS_BLOCK + threadIdx.x; row < n; row += gridDim.x * DPS_BLOCK) {
            T sum = T(0);
            const int end = indptr[row + 1];
#pragma unroll 2       // deeper unrolling of the 4-load body costs occupancy (122 registers)
            for (int k = indptr[row]; k < end; ++k) sum += data[k] * load(indices[k]);
            emit(row, sum);
        }
    } else {
        static_assert(W >= 2 && W <= DPS_WARP && (W & (W - 1)) == 0, "CSR-vector width");
        constexpr int groups = DPS_BLOCK / W;
        const int lane = threadIdx.x % W;
        for (int base = blockIdx.x * groups; base < n; base += gridDim.x * groups) {
            const int row = base + threadIdx.x / W;
            T sum = T(0);
            if (row < n) {
                const int end = indptr[row + 1];
#pragma unroll 2
                for (int k = indptr[row] + lane; k < end; k += W) sum += data[k] * load(indices[k]);
            }
            sum = dps::group_sum<T, W>(sum);
            if (lane == 0 && row < n) emit(row, sum);
        }
    }
}

// DOT stage 2, finished redundantly by every block (same order, so the same bits everywhere).
// Every thread of the block must call it; thread 0 gets the total.
template <typename T>
__device__ __forceinline__ T sum_partials(const T* __restrict__ parts, int nparts, T* smem) {
    T s = T(0);
    for (int i = threadIdx.x; i < nparts; i += DPS_BLOCK) s += parts[i];
    return dps::block_sum(s, smem);
}

// The block's share of a DOT: its sum, written by thread 0 to part[blockIdx.x]. Every thread of
// the block must call it (smem is free again on return).
template <typename T>
__device__ __forceinline__ void put_partial(T v, T* part, T* smem) {
    v = dps::block_sum(v, smem);
    if (threadIdx.x == 0) part[blockIdx.x] = v;
}

// The start of a solve (one thread): the result area reads "running, no launch error".
__device__ __forceinline__ void start(double* status) {
    status[DYN_STATE] = DYN_RUNNING;
    status[DYN_ERROR] = 0.0;
}

__device__ __forceinline__ void finish(double* status, int info, int iterations) {
    status[DYN_INFO] = info;
    status[DYN_ITERS] = iterations;
    status[DYN_STATE] = DYN_DONE;
}

// After a device launch: a failure (pending-launch pool full, ...) ends the chain with a record.
__device__ __forceinline__ void check_launch(double* status) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        status[DYN_ERROR] = (double)e;
        status[DYN_STATE] = DYN_LAUNCH_FAILED;
    }
}

// SciPy's breakdown tolerance (rhotol = omegatol): eps**2 of the working precision, exact (2^-46
// for float, 2^-104 for double), so comparing in double gives the comparison SciPy makes in T.
template <typename T>
__device__ __forceinline__ double eps2() {
    return sizeof(dps::real_t<T>) == 4 ? 1.4210854715202004e-14 : 4.930380657631324e-32;
}

// |a| of a real scalar, as a double (complex types get an overload with complex support).
template <typename T>
__device__ __forceinline__ double mag(T a) { return (double)fabs(a); }

// A loop-head decision of BiCG and BiCGStab: rho_j, tau_j = ||r_j||, and SciPy's info and the
// iterations when the solve stops here (go: it does not).
template <typename T>
struct Head {
    T rho;
    double tau;
    int info, its;
    bool go;
};

// The loop head of BiCG's and BiCGStab's chains at step j. Every thread of the block calls it;
// thread 0's result is the decision (as in persistent.cuh's pers::shadow_head, which every
// thread gets): rho_j and tau_j from the partials of <r~, z> and <r, r>, the stop rule
// (stop.cuh), a fast |rho_j| below eps^2 confirmed with the accurate <r~, z> by the whole block
// (dps::confirm_dot), then |rho_j| < eps^2 or rho_j non-finite -> -10 at j. The callers then
// test their own scalars (beta; BiCGStab's omega) when go.
template <typename T>
__device__ __forceinline__ Head<T> shadow_head(int j, int maxiter, double atol, int n,
                                               const T* part_rho, const T* part_rr, const T* rt,
                                               const T* z, T* smem) {
    T rho = sum_partials(part_rho, (int)gridDim.x, smem);
    const T rr = sum_partials(part_rr, (int)gridDim.x, smem);
    const double tau = (double)(dps::real_t<T>)sqrt(fabs(rr));      // in thread 0
    const dps::Stop s = dps::head_test(j, tau, atol, maxiter);
    rho = dps::confirm_dot(s.go && mag(rho) < eps2<T>(), rho, n, rt, z);
    if (s.go && (mag(rho) < eps2<T>() || !dps::is_finite(rho))) return {rho, tau, -10, j, false};
    return {rho, tau, s.info, s.its, s.go};
}

// Block 0's thread 0 at a loop head: tau_j into the result area (and hist[j]), then either the
// next kernel of the chain (`next()`, a tail launch) or the end of the solve with (info, its).
template <typename T, typename Next>
__device__ __forceinline__ void head_publish(double* status, dps::real_t<T>* hist, int j,
                                             const Head<T>& h, Next next) {
    status[DYN_TAU] = h.tau;
    if (hist != nullptr) hist[j] = (dps::real_t<T>)h.tau;
    if (h.go) {
        next();
        check_launch(status);
    } else {
        finish(status, h.info, h.its);
    }
}

}  // namespace dyn
