// dpsolve/common.cuh - types, block sizes and reductions shared by every dpsolve kernel.
//
// Every kernel is templated on the value type T (float, double, complex<float>, complex<double>)
// and instantiated from Python with NVRTC name expressions (see dpsolve/cuda/_loader.py). No CUDA
// runtime headers are needed.
#pragma once

#include <dpsolve/abi.cuh>
#include <dpsolve/stop.cuh>   // the stop rule of every device-side loop    // DPS_BLOCK, DPS_WARP, DPS_CHUNK and the rest shared with Python

#define DPS_FULL_MASK 0xffffffffu

// Programmatic dependent launch (dpsolve/cuda/pdl.py: kernels captured into a CUDA graph with
// cudaLaunchAttributeProgrammaticStreamSerialization): a kernel that starts with DPS_PDL() first
// lets the next one be scheduled (its blocks take SM slots as this kernel's blocks retire, rather
// than after the grid's completion), then waits for the kernel before it to finish and flush, so
// nothing it reads or writes is touched early. Both instructions do nothing in a kernel launched
// the ordinary way. Every kernel of a source in pdl.SOURCES, and amg.cu's vc_* kernels, start
// with it, or (amg.cu's AMG_PDL) with DPS_PDL_LAUNCH, prefetches of the kernel's read-only matrix,
// then DPS_PDL_WAIT (tests/test_cuda_compile.py checks).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DPS_PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define DPS_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define DPS_PDL_LAUNCH() do {} while (0)
#define DPS_PDL_WAIT() do {} while (0)
#endif
#define DPS_PDL()                                                                                \
    do {                                                                                         \
        DPS_PDL_LAUNCH();                                                                        \
        DPS_PDL_WAIT();                                                                          \
    } while (0)

namespace dps {

// ---------------------------------------------------------------------------------------------
// complex<R>: the value type of complex64 (R = float) and complex128 (R = double) kernels.
// Layout {re, im}, aligned to 2*sizeof(R): the same bytes as CuPy's / NumPy's complex scalars and
// arrays, so kernel arguments and device arrays pass through unchanged. The default constructor
// is trivial, so __shared__ arrays of it are allowed.
template <typename R>
struct alignas(2 * sizeof(R)) complex {
    R re, im;
    complex() = default;
    __host__ __device__ constexpr complex(R r) : re(r), im(R(0)) {}
    __host__ __device__ constexpr complex(R r, R i) : re(r), im(i) {}
    __device__ __forceinline__ complex& operator+=(const complex& b) { re += b.re; im += b.im; return *this; }
    __device__ __forceinline__ complex& operator-=(const complex& b) { re -= b.re; im -= b.im; return *this; }
    __device__ __forceinline__ complex& operator*=(const complex& b) { *this = *this * b; return *this; }
    friend __device__ __forceinline__ complex operator+(complex a, complex b) { return {a.re + b.re, a.im + b.im}; }
    friend __device__ __forceinline__ complex operator-(complex a, complex b) { return {a.re - b.re, a.im - b.im}; }
    friend __device__ __forceinline__ complex operator-(complex a) { return {-a.re, -a.im}; }
    friend __device__ __forceinline__ complex operator*(complex a, complex b) {
        return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    }
    friend __device__ __forceinline__ complex operator/(complex a, complex b) {
        // Smith's algorithm: no overflow for |b| near the range limits
        if (::fabs(b.re) >= ::fabs(b.im)) {
            const R t = b.im / b.re, d = b.re + b.im * t;
            return {(a.re + a.im * t) / d, (a.im - a.re * t) / d};
        }
        const R t = b.re / b.im, d = b.re * t + b.im;
        return {(a.re * t + a.im) / d, (a.im * t - a.re) / d};
    }
    friend __device__ __forceinline__ bool operator==(complex a, complex b) { return a.re == b.re && a.im == b.im; }
    friend __device__ __forceinline__ bool operator!=(complex a, complex b) { return !(a == b); }
};

// Math on complex values under the names the kernels use for real ones. The kernels call fabs,
// isfinite and fma unqualified, so these overloads are found by argument-dependent lookup for
// complex arguments while real arguments keep CUDA's own functions.
template <typename R> __device__ __forceinline__ R fabs(complex<R> a) { return ::hypot(a.re, a.im); }
template <typename R> __device__ __forceinline__ bool isfinite(complex<R> a) {
    return ::isfinite(a.re) && ::isfinite(a.im);
}
// a * b + c with fused real operations: deterministic, so a value recomputed from the same inputs
// in another kernel (the SpMV gathers of the device-driven variants) is bitwise the stored one.
template <typename R> __device__ __forceinline__ complex<R> fma(complex<R> a, complex<R> b, complex<R> c) {
    return {::fma(a.re, b.re, ::fma(-a.im, b.im, c.re)), ::fma(a.re, b.im, ::fma(a.im, b.re, c.im))};
}

// Loads through the read-only cache (ldg) and cached in L2 only (ldcg: data other blocks of the
// same kernel write, e.g. the persistent solver's vectors), for real and complex values.
template <typename T> __device__ __forceinline__ T ldg(const T* p) { return __ldg(p); }
template <typename T> __device__ __forceinline__ T ldcg(const T* p) { return __ldcg(p); }
__device__ __forceinline__ complex<float> ldg(const complex<float>* p) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(p)); return {v.x, v.y};
}
__device__ __forceinline__ complex<double> ldg(const complex<double>* p) {
    const double2 v = __ldg(reinterpret_cast<const double2*>(p)); return {v.x, v.y};
}
__device__ __forceinline__ complex<float> ldcg(const complex<float>* p) {
    const float2 v = __ldcg(reinterpret_cast<const float2*>(p)); return {v.x, v.y};
}
__device__ __forceinline__ complex<double> ldcg(const complex<double>* p) {
    const double2 v = __ldcg(reinterpret_cast<const double2*>(p)); return {v.x, v.y};
}

// a * b rounded on its own, never contracted into an FMA with a following add: the vector updates
// round alpha * p before adding it, as NumPy does in the reference.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
template <typename R> __device__ __forceinline__ complex<R> mul_rn(complex<R> a, complex<R> b) {
    return {mul_rn(a.re, b.re) - mul_rn(a.im, b.im), mul_rn(a.re, b.im) + mul_rn(a.im, b.re)};
}

// Real-valued helpers over both kinds of T.
template <typename T> struct real_of { using type = T; };
template <typename R> struct real_of<complex<R>> { using type = R; };
template <typename T> using real_t = typename real_of<T>::type;

// The conjugate of a (identity for real types).
template <typename T> __device__ __forceinline__ T conj(T a) { return a; }
template <typename R> __device__ __forceinline__ complex<R> conj(complex<R> a) { return {a.re, -a.im}; }
// The real part; |a|^2; finiteness of every component.
template <typename T> __device__ __forceinline__ T real(T a) { return a; }
template <typename R> __device__ __forceinline__ R real(complex<R> a) { return a.re; }
template <typename T> __device__ __forceinline__ T abs2(T a) { return a * a; }
template <typename R> __device__ __forceinline__ R abs2(complex<R> a) { return a.re * a.re + a.im * a.im; }
template <typename T> __device__ __forceinline__ bool is_finite(T a) { return ::isfinite(a); }
template <typename R> __device__ __forceinline__ bool is_finite(complex<R> a) { return isfinite(a); }

// A float through its bits. CuPy compiles every kernel with -ftz=true (dpsolve._system.flushes),
// so any float operation -- a conversion to double, fabs, a comparison, a product -- reads a
// subnormal (below 2^-126) as 0 and writes a result below 2^-126 as 0; where that would change an
// answer (a b or an A whose values all lie there read as 0), the values go through these.
// wide: v in double, exactly; narrow: d in float, rounded to nearest (NumPy's bits).
__device__ __forceinline__ double wide(float v) {
    const unsigned u = __float_as_uint(v);
    if ((u & 0x7f800000u) != 0u) return (double)v;                // normal, Inf, NaN
    const double m = (double)(u & 0x7fffffu) * 0x1p-149;           // subnormal or 0, exactly
    return (u >> 31) != 0u ? -m : m;
}
__device__ __forceinline__ float narrow(double d) {
    const double a = ::fabs(d);
    if (!(a < 0x1p-126)) return (float)d;                         // normal, Inf, NaN
    const unsigned m = __double2uint_rn(a * 0x1p149);              // <= 2^23: 2^-126's bits
    return __uint_as_float((::signbit(d) ? 0x80000000u : 0u) | m);
}
// |v| in double, a float's subnormals included
__device__ __forceinline__ double magnitude(float v) { return ::fabs(wide(v)); }
__device__ __forceinline__ double magnitude(double v) { return ::fabs(v); }
template <typename R> __device__ __forceinline__ double magnitude(complex<R> v) {
    return ::hypot(magnitude(v.re), magnitude(v.im));
}

// The largest and the smallest nonzero magnitude of a value's components folded into (hi, lo)
// (lo = 0: none yet); csr_check turns them into binary exponents once per thread
// (``exponent_words``): a compare and a select per entry, no ilogb in the row loop. A float's
// are compared as their bits (a nonnegative float's order is its bits' order; -ftz=true would
// read a subnormal as 0: ``wide``); a NaN is passed over by hi, as fmax passes it over.
template <typename R> __device__ __forceinline__ void magnitude_range_real(R a, R& hi, R& lo) {
    const R m = ::fabs(a);
    hi = ::fmax(hi, m);
    lo = (m != R(0) && (lo == R(0) || m < lo)) ? m : lo;
}
__device__ __forceinline__ void magnitude_range_real(float a, float& hi, float& lo) {
    const unsigned m = __float_as_uint(a) & 0x7fffffffu, h = __float_as_uint(hi),
                   l = __float_as_uint(lo);
    hi = m <= 0x7f800000u && m > h ? __uint_as_float(m) : hi;
    lo = m != 0u && (l == 0u || m < l) ? __uint_as_float(m) : lo;
}
template <typename T> __device__ __forceinline__ void magnitude_range(T a, T& hi, T& lo) {
    magnitude_range_real(a, hi, lo);
}
template <typename R>
__device__ __forceinline__ void magnitude_range(complex<R> a, R& hi, R& lo) {
    magnitude_range_real(a.re, hi, lo);
    magnitude_range_real(a.im, hi, lo);
}
// (hi, lo) magnitudes as csr_check's biased words (abi.cuh's DPS_EXP_BIAS): e + BIAS of the
// largest, BIAS - e of the smallest, with e frexp's exponent (|a| in [2^(e-1), 2^e); ilogb is
// exact for a double's subnormals, a float's are read from its bits); both 0 where there is no
// nonzero finite value.
__device__ __forceinline__ int exponent_of(float a) {
    const unsigned u = __float_as_uint(a) & 0x7fffffffu, f = u >> 23;
    return f != 0u ? (int)f - 126 : -117 - __clz((int)u);          // u: not 0
}
__device__ __forceinline__ int exponent_of(double a) { return ::ilogb(a) + 1; }
template <typename R> __device__ __forceinline__ bool positive_finite(R a) {
    return a > R(0) && ::isfinite(a);
}
__device__ __forceinline__ bool positive_finite(float a) {      // a subnormal too (its bits)
    const unsigned u = __float_as_uint(a);
    return u != 0u && u < 0x7f800000u;
}
template <typename R> __device__ __forceinline__ void exponent_words(R hi, R lo, int& ehi, int& elo) {
    if (positive_finite(hi)) {
        ehi = exponent_of(hi) + DPS_EXP_BIAS;
        elo = DPS_EXP_BIAS - exponent_of(lo);
    } else {
        ehi = elo = 0;
    }
}
// Whether csr_check's word hi puts A's largest exponent in T's window (abi.cuh), where the
// front end solves A as it is (dpsolve._system.matrix_shift); 0 (no nonzero value) is inside.
template <typename T> __device__ __forceinline__ bool in_matrix_window(int hi) {
    constexpr int w = sizeof(real_t<T>) == 4 ? DPS_MATRIX_WINDOW_F32 : DPS_MATRIX_WINDOW_F64;
    return hi == 0 || (hi - DPS_EXP_BIAS > -w && hi - DPS_EXP_BIAS <= w);
}

// The position of `key` in the sorted keys[lo, hi) (a sparse row's column indices), -1 if absent.
__device__ __forceinline__ int find_sorted(const int* __restrict__ keys, int lo, int hi, int key) {
    const int end = hi;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < end && keys[lo] == key ? lo : -1;
}

// sum_k v[k] * gather(indices[k]) over a row's entries [k, end), in the entries' order. They are
// taken UNROLL at a time: their index and value loads issued together, then their gathers (free
// of each other and of the sum, so in flight together too), so a row costs one round of load
// latency per UNROLL entries, not a chain of dependent loads an entry (block.cu's SpMM,
// batch.cu's SpMV).
template <int UNROLL, typename T, typename Gather>
__device__ __forceinline__ T gather_dot(int k, int end, const int* __restrict__ indices,
                                        const T* __restrict__ v, Gather gather) {
    T s = T(0);
    for (; k < end; k += UNROLL) {
        int c[UNROLL];
        T a[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const bool in = k + u < end;
            c[u] = in ? indices[k + u] : 0;
            a[u] = in ? v[k + u] : T(0);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (k + u < end) s += a[u] * gather(c[u]);
    }
    return s;
}

// Warp shuffles of either kind of value.
template <typename T>
__device__ __forceinline__ T shfl_down(T v, int off, int width = DPS_WARP) {
    return __shfl_down_sync(DPS_FULL_MASK, v, off, width);
}
template <typename R>
__device__ __forceinline__ complex<R> shfl_down(complex<R> v, int off, int width = DPS_WARP) {
    return {__shfl_down_sync(DPS_FULL_MASK, v.re, off, width),
            __shfl_down_sync(DPS_FULL_MASK, v.im, off, width)};
}

// Sum over a warp with shuffles; every lane of the warp must call it. Lane 0 gets the total.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int off = DPS_WARP / 2; off > 0; off >>= 1)
        v += shfl_down(v, off);
    return v;
}

// Sum over a group of W consecutive lanes (W a power of two <= 32); the group's first lane gets it.
template <typename T, int W>
__device__ __forceinline__ T group_sum(T v) {
#pragma unroll
    for (int off = W / 2; off > 0; off >>= 1)
        v += shfl_down(v, off, W);
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024). Thread 0 gets the total.
// `smem` needs 32 elements. Every thread of the block must call it.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* smem) {
    const int lane = threadIdx.x % DPS_WARP, warp = threadIdx.x / DPS_WARP;
    v = warp_sum(v);
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    const int nwarps = blockDim.x / DPS_WARP;
    v = (threadIdx.x < nwarps) ? smem[lane] : T(0);
    if (warp == 0) v = warp_sum(v);
    __syncthreads();   // smem may be reused by the caller right after
    return v;
}

// The block's sum on EVERY thread, on one barrier (the single-block solvers: batch.cu's systems,
// cg_persistent.cu's small one): warp sums into a slot a warp, a barrier, then every thread sums
// the slots in one fixed order (four interleaved chains), so all hold the same bits and take the
// same branches without a broadcast. NW: the warps, known at compile time (the loop unrolled:
// its loads go together), or 0 for blockDim.x / 32 (slots up to the next multiple of 4 must be
// 0). `slots` must not be written again before every thread has passed another barrier.
template <int NW, typename V>
__device__ __forceinline__ V slot_sum(const V* slots) {
    V s0 = V(0), s1 = V(0), s2 = V(0), s3 = V(0);
    auto add = [&](int w) {
        s0 += slots[w];
        s1 += slots[w + 1];
        s2 += slots[w + 2];
        s3 += slots[w + 3];
    };
    if constexpr (NW > 0) {
#pragma unroll
        for (int w = 0; w < NW; w += 4) add(w);
    } else {
        for (int w = 0, nw = blockDim.x / DPS_WARP; w < nw; w += 4) add(w);
    }
    return (s0 + s1) + (s2 + s3);
}

template <int NW = 0, typename V>
__device__ __forceinline__ V sum_everywhere(V v, V* slots) {
    v = warp_sum(v);
    if (threadIdx.x % DPS_WARP == 0) slots[threadIdx.x / DPS_WARP] = v;
    __syncthreads();
    return slot_sum<NW>(slots);
}

// two sums under one barrier
template <int NW = 0, typename V, typename W>
__device__ __forceinline__ void sum2_everywhere(V& v, W& w, V* vslots, W* wslots) {
    v = warp_sum(v);
    w = warp_sum(w);
    if (threadIdx.x % DPS_WARP == 0) {
        vslots[threadIdx.x / DPS_WARP] = v;
        wslots[threadIdx.x / DPS_WARP] = w;
    }
    __syncthreads();
    v = slot_sum<NW>(vslots);
    w = slot_sum<NW>(wslots);
}

// ---------------------------------------------------------------------------------------------
// The accurate inner product of the breakdown tests. SciPy's test |rho| < eps^2 is met, in
// practice, only when rho's sum cancels to 0 or to a few ulps; whether it does depends on the
// summation order, so on a near-orthogonal <r~, r> (orsirr_1 + BiCGStab + Jacobi) one order
// breaks down where another goes on. When the fast sum says |rho| < eps^2, every variant
// recomputes rho with this sum before it stops, and goes on with it when it is not below eps^2:
// a breakdown is then reported only when the inner product of the stored vectors really is that
// small. The -11 tests (<p~, A p> == 0, <r~, v> == 0, and the <t, s> of an |omega| < eps^2) are
// confirmed the same way. Ogita, Rump & Oishi's Dot2 (SIAM J. Sci. Comput. 26, 2005): error-free products
// (TwoProduct through fma) and sums (TwoSum) in the accumulation and in the reduction, so the
// result is as accurate as a sum in twice the working precision, then rounded.

// s + c, the running sum and its carried rounding errors, of one real component.
template <typename R>
struct Sum2 {
    R s, c;
    __device__ __forceinline__ void add(R x) {            // TwoSum(s, x); errors into c
        const R t = s + x, z = t - s;
        c += (s - (t - z)) + (x - z);
        s = t;
    }
    __device__ __forceinline__ void add_prod(R x, R y) {  // TwoProduct(x, y), then both parts
        const R p = mul_rn(x, y);
        c += ::fma(x, y, -p);
        add(p);
    }
    __device__ __forceinline__ void merge(R s2, R c2) { c += c2; add(s2); }
};

// The accurate <a, b> = sum conj(a_i) b_i over the whole of a and b, by one block (every thread
// of the block must call it; every thread gets the result). Deterministic for a given n and
// block size, so blocks that call it redundantly get the same bits. Loads through L2 (ldcg), so
// the persistent kernels may call it on vectors other blocks wrote before a grid.sync; L2 false:
// plain loads, for vectors the block itself wrote, in shared memory too (the batch kernels).
// Reads 2 n values: a rare path, taken only when a breakdown test fails on the fast sum.
template <typename T, bool L2 = true>
__device__ T dot_accurate(int n, const T* __restrict__ a, const T* __restrict__ b) {
    using R = real_t<T>;
    constexpr bool cplx = sizeof(T) == 2 * sizeof(R);
    __shared__ R sh[4][DPS_WARP];
    __shared__ T sh_out;
    Sum2<R> re{R(0), R(0)}, im{R(0), R(0)};
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const T x = L2 ? ldcg(a + i) : a[i];         // L2: coherent inside a persistent kernel
        const T y = L2 ? ldcg(b + i) : b[i];
        if constexpr (cplx) {                                // conj(x) y
            re.add_prod(x.re, y.re);
            re.add_prod(x.im, y.im);
            im.add_prod(x.re, y.im);
            im.add_prod(-x.im, y.re);
        } else {
            re.add_prod(x, y);
        }
    }
    const int lane = threadIdx.x % DPS_WARP, warp = threadIdx.x / DPS_WARP;
    auto warp_merge = [](Sum2<R>& v) {
#pragma unroll
        for (int off = DPS_WARP / 2; off > 0; off >>= 1) {
            const R s2 = __shfl_down_sync(DPS_FULL_MASK, v.s, off);
            const R c2 = __shfl_down_sync(DPS_FULL_MASK, v.c, off);
            v.merge(s2, c2);
        }
    };
    warp_merge(re);
    warp_merge(im);
    if (lane == 0) {
        sh[0][warp] = re.s; sh[1][warp] = re.c; sh[2][warp] = im.s; sh[3][warp] = im.c;
    }
    __syncthreads();
    if (warp == 0) {
        const bool have = lane < (int)(blockDim.x / DPS_WARP);
        re = {have ? sh[0][lane] : R(0), have ? sh[1][lane] : R(0)};
        im = {have ? sh[2][lane] : R(0), have ? sh[3][lane] : R(0)};
        warp_merge(re);
        warp_merge(im);
        if (lane == 0) {
            if constexpr (cplx) sh_out = T(re.s + re.c, im.s + im.c);
            else sh_out = re.s + re.c;
        }
    }
    __syncthreads();
    const T out = sh_out;
    __syncthreads();   // sh_out may be written again by a later call
    return out;
}

// The confirmation in a kernel whose thread 0 makes the decisions: `suspect` (read from thread 0)
// says that the breakdown test fails on the fast value `rho` (an inner product <a, b>, or the
// rho of the name) where the test would be made; then the whole
// block computes the accurate <a, b> and returns it in place of rho (all threads get the same
// value); otherwise rho is returned unchanged. Where the accurate sum is not finite (an
// intermediate overflow near the top of the range), the fast value stands, as the reference's
// dot_accurate does. Every thread of the block must call it.
template <typename T, bool L2 = true>
__device__ __forceinline__ T confirm_dot(bool suspect, T rho, int n, const T* __restrict__ a,
                                         const T* __restrict__ b) {
    __shared__ int sh_suspect;
    if (threadIdx.x == 0) sh_suspect = suspect;
    __syncthreads();
    const bool s = sh_suspect;
    __syncthreads();   // sh_suspect may be written again by a later call
    if (!s) return rho;
    const T acc = dot_accurate<T, L2>(n, a, b);
    return is_finite(acc) ? acc : rho;
}

}  // namespace dps
