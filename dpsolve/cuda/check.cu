// check.cu - the set-up of a solve in as few passes as possible: a user's CSR matrix checked in
// one kernel, and the true residual's norm.
//
// csr_check<T, I>   one pass over a CSR matrix as the user handed it (I: int or long long column
//                   indices and row pointers, so that an int64 index past 2^31 is seen as out of
//                   range before anything narrows it). Each thread takes rows (grid-strided) and
//                   walks them: row pointers non-decreasing and inside [0, nnz], column indices in
//                   [0, n) and strictly increasing (sorted, no duplicates), values finite. It ORs
//                   what it found into out[0] (the DPS_CHECK_* bits of abi.cuh,
//                   mirrored in dpsolve/cuda/abi.py) and writes the longest row to out[1] (atomicMax): the
//                   format choice and ELL's width need it, and it costs nothing here. out[2] and
//                   out[3]: the values' largest and smallest binary exponents (biased, abi.cuh's
//                   DPS_EXP_BIAS), for the front end's scaling of an A far from 1.
//                   Reads (n + 1) * sizeof(I) + nnz * (sizeof(I) + sizeof(T)) bytes once.
// resid_partial<T>  stage 1 of ||b - v||^2 (v = A x computed before it): per-block partial sums
//                   of |b_i - v_i|^2; blas1's dot_final<T> finishes them. Reads 2 * n * s bytes.
// count_true, any_of<T>, max_abs<T>
//                   the whole-array reductions of the set-ups (the AMG hierarchy's checks and
//                   counts, the finiteness of b): one kernel each whatever the array's size, where
//                   CuPy's own reductions compile a kernel per size class (CUB's block size follows
//                   the size) on first use, 1-3 s each through NVRTC (a first AMG set-up on a new
//                   machine: 75 of them, 27 s).
#include <dpsolve/common.cuh>

// the DPS_CHECK_* bits: abi.cuh

template <typename T, typename I>
__global__ void __launch_bounds__(DPS_BLOCK)
csr_check(int n, long long nnz, const I* __restrict__ indptr, const I* __restrict__ indices,
          const T* __restrict__ data, int* __restrict__ out) {
    int flags = 0, longest = 0;
    dps::real_t<T> amax = 0, amin = 0;              // nonzero magnitudes (amin 0: none yet)
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid == 0 && ((long long)indptr[0] != 0 || (long long)indptr[n] != nnz))
        flags |= DPS_CHECK_ENDS;
    for (int i = tid; i < n; i += gridDim.x * blockDim.x) {
        const long long lo = indptr[i], hi = indptr[i + 1];
        if (lo < 0 || hi < lo || hi > nnz) {       // never read past the arrays
            flags |= DPS_CHECK_INDPTR;
            continue;
        }
        const long long len = hi - lo;
        longest = len > longest ? (len > 0x7fffffffLL ? 0x7fffffff : (int)len) : longest;
        long long prev = -1;
        for (long long k = lo; k < hi; ++k) {
            const long long j = indices[k];
            if (j < 0 || j >= n) flags |= DPS_CHECK_COLUMN;
            if (j <= prev) flags |= DPS_CHECK_UNSORTED;
            prev = j;
            const T a = data[k];
            if (!dps::is_finite(a)) flags |= DPS_CHECK_NONFINITE;
            dps::magnitude_range(a, amax, amin);
        }
    }
    int ehi, elo;
    dps::exponent_words(amax, amin, ehi, elo);
    // one atomicOr per warp that found something (most find nothing)
    const unsigned any = __ballot_sync(DPS_FULL_MASK, flags != 0);
    for (int off = DPS_WARP / 2; off > 0; off >>= 1) {
        flags |= __shfl_down_sync(DPS_FULL_MASK, flags, off);
        const int other = __shfl_down_sync(DPS_FULL_MASK, longest, off);
        longest = other > longest ? other : longest;
        ehi = max(ehi, __shfl_down_sync(DPS_FULL_MASK, ehi, off));
        elo = max(elo, __shfl_down_sync(DPS_FULL_MASK, elo, off));
    }
    // a plain read before each atomicMax: most warps find what an earlier one wrote already,
    // and atomics on one address serialize (three of them a warp cost 70 us at 160^3)
    if (threadIdx.x % DPS_WARP == 0) {
        volatile const int* seen = out;
        if (any) atomicOr(out, flags);
        if (longest > seen[1]) atomicMax(out + 1, longest);
        if (ehi > seen[2]) atomicMax(out + 2, ehi);
        if (elo > seen[3]) atomicMax(out + 3, elo);
    }
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
resid_partial(int n, const T* __restrict__ b, const T* __restrict__ v, T* __restrict__ partials) {
    __shared__ T smem[DPS_WARP];
    T sum = T(0);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        sum += T(dps::abs2(b[i] - v[i]));
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// fingerprint  two 64-bit sums over the 32-bit words of an array, each word mixed with its index
//              and a salt (splitmix64): a changed word changes both sums by pseudo-random amounts.
//              The sums are added with atomics, so the result does not depend on the order.
//              Variant graph keys its cache of prepared systems by it for a matrix that lives on
//              the device (instead of copying the matrix to the host to hash it). Reads 4*nwords.
__device__ __forceinline__ unsigned long long dps_mix64(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

__global__ void __launch_bounds__(DPS_BLOCK)
fingerprint(long long nwords, const unsigned* __restrict__ words, unsigned long long salt,
            unsigned long long* __restrict__ out) {
    unsigned long long a = 0, b = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nwords;
         i += (long long)gridDim.x * blockDim.x) {
        const unsigned long long k = dps_mix64((unsigned long long)i ^ salt);
        const unsigned long long w = words[i];
        a += dps_mix64(k ^ w);
        b += dps_mix64(k + w * 0x100000001b3ULL);
    }
    for (int off = DPS_WARP / 2; off > 0; off >>= 1) {
        a += __shfl_down_sync(DPS_FULL_MASK, a, off);
        b += __shfl_down_sync(DPS_FULL_MASK, b, off);
    }
    if (threadIdx.x % DPS_WARP == 0) {
        atomicAdd(out, a);
        atomicAdd(out + 1, b);
    }
}

// out[0] += the number of true entries of m (n < 2^31: a count fits out's int)
__global__ void __launch_bounds__(DPS_BLOCK)
count_true(long long n, const bool* __restrict__ m, int* __restrict__ out) {
    int c = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        c += m[i] ? 1 : 0;
    for (int off = DPS_WARP / 2; off > 0; off >>= 1) c += __shfl_down_sync(DPS_FULL_MASK, c, off);
    if (threadIdx.x % DPS_WARP == 0 && c) atomicAdd(out, c);
}

// out[0] = 1 where some x_i == 0 (what = DPS_ANY_ZERO) or is NaN / Inf (DPS_ANY_NONFINITE);
// untouched otherwise (the caller zeroes it: several arrays may share one flag)
#define DPS_ANY_ZERO 0
#define DPS_ANY_NONFINITE 1
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
any_of(long long n, const T* __restrict__ x, int what, int* __restrict__ out) {
    bool hit = false;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        hit |= what == DPS_ANY_ZERO ? x[i] == T(0) : !dps::is_finite(x[i]);
    if (__any_sync(DPS_FULL_MASK, hit) && threadIdx.x % DPS_WARP == 0) *out = 1;
}

// out[0] = max(out[0], max_i |x_i|) as the bits of a double (non-negative doubles order as their
// bits; a NaN's, sign cleared, lie above Inf's: a NaN anywhere gives NaN, as NumPy's max does).
// The caller zeroes out (0 is +0.0).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
max_abs(long long n, const T* __restrict__ x, unsigned long long* __restrict__ out) {
    unsigned long long m = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double a = dps::magnitude(x[i]);   // a float's subnormals too (dps::wide)
        const unsigned long long bits = (unsigned long long)__double_as_longlong(a);
        m = bits > m ? bits : m;
    }
    for (int off = DPS_WARP / 2; off > 0; off >>= 1) {
        const unsigned long long o = __shfl_down_sync(DPS_FULL_MASK, m, off);
        m = o > m ? o : m;
    }
    if (threadIdx.x % DPS_WARP == 0 && m) atomicMax(out, m);
}
