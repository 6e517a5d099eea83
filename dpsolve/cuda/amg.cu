// amg.cu - smoothed-aggregation AMG on the device (dpsolve/precond/amg): the aggregation of the
// set-up and the kernels of the V-cycle, the preconditioner's stream face.
//
// Set-up (one thread per node; the host loops until no node is undecided):
//   mis_init<T>     v_i = UNDECIDED << 60 | key(i), key(i) = (hash(i) & 0x7FFFFFF) << 32 | i, for
//                   the active nodes (every node, or the leftovers: agg_i < 0); -1 otherwise
//   mis2_max<T>     out_i = max(in_i, max over the strong neighbours j of in_j): the first
//                   of the MIS-2's two (distance 1), the MIS-1's one; zeroes the round's count
//   mis2_decide<T>  an undecided i whose maximum is itself becomes IN (a root); one that sees an
//                   IN node within the distance becomes OUT; counts the undecided
//   mis2_max_decide<T>  the MIS-2's second maximum and mis2_decide in one pass, for the
//                   undecided nodes only (it reads the first maximum, never v at a neighbour)
//   agg_join<T>     a node without an aggregate joins the aggregate of its strong neighbour of
//                   largest key among the roots (roots_only) or among the aggregated nodes
//   agg_flags<T>, agg_number<T>, agg_root_order<T>  a pass's new roots flagged, numbered after
//                   the aggregates so far (the flags' inclusive sum), and every aggregate
//                   renumbered in its root's order at the end
//   csr_scale_rows<T>  data of row i *= s_i (D^-1 A T of the prolongator smoothing)
//   smooth_tentative<T>  P = T - c D^-1 (A T) in place over A T's pattern, for a T of one entry
//                   a row (B of one column): row i's entries become -(c (s_i at_ik)), and the one
//                   in T's column agg_i gains T's value t_i first (t_i + that: the bits of the
//                   reference's T - c (D^-1 A T)); a row without that column is counted (missing).
//                   c = omega / rho on the device where rho (a device double) is given: the
//                   re-set-up's, which reads no rho back before its end
//   subtract_scaled<T>  the smoothed restriction RS = R (I - A S): P - S (A P) (then transposed:
//                   a Hermitian A) or R - (R A) S in place over the product's pattern
//   hermitian_misses<T>  counts the entries with no (j, i) equal to conj(a_ij) to tol: which of
//                   the two products makes RS
//   diag_check<T>   a level's diagonal and the count of rows where it is zero, not finite or
//                   not positive (one pass, one host read: device._check_level)
//   power_start<T>  the power iteration's start vector (smoothers.start_vector's values)
//   power_step<T, W>, power_step_ell<T>  rho(D^-1 A) by power iteration, a step a launch (its
//                   last block sums the norm); power_iterate<T, W> all the steps
//                   in one cooperative launch (grid.sync between them) on a small level
//   transpose_count<T>, transpose_fill<T>, transpose_rank<T>  a CSR matrix's transpose without a
//                   sort: column counts, entries scattered into their columns, each column put
//                   in row order by ranks (device.transpose)
//   pattern_asymmetry<T>  counts the entries (i, j) whose (j, i) is not stored (binary search in
//                   row j: rows sorted; an unsorted row only adds misses): 0 for a symmetric
//                   pattern, whose strength graph at theta = 0 is the pattern itself
// These are the rules of the host reference (dpsolve/precond/amg/reference.py: ``aggregate``'s
// three passes), so the host and the device form the same aggregates. (T is unused by the aggregation kernels: one template
// family per source file, instantiated per dtype.)
//
// V-cycle, level l with n rows (W lanes a row for the products with A_l, P_l; s = sizeof(T)):
//   vc_presmooth_residual<T, W>  the Jacobi pre-smoothing fused into the residual: x = s .* b,
//                         res = b - A x (A x gathered from s and b)  reads A + 2n*s, writes 2n*s
//   vc_scale<T>           x = s .* b, the Jacobi pre-smoothing from zero on a level of long
//                         rows (reference.fuse_presmoothing)  reads 2n*s, writes n*s
//   vc_residual<T, W>     res = b - A x                 reads A + 2n*s, writes n*s
//   vc_jacobi<T, W>       y = x + s .* (b - A x)        reads A + 3n*s, writes n*s
//   vc_cheb<T, W>         q = D^-1 (b - A x); d = c1 d + c2 q (c1 = 0: d = c2 q, the first step);
//                         y = x + d                     reads A + 4n*s, writes 2n*s
//                         x null: the first step from zero (x = d = c0 D^-1 b) fused into the
//                         second, x gathered as c0 dinv_c b_c   reads A + 2n*s, writes 2n*s;
//                         x null, c0 = 0: the first step alone (d = y = c2 D^-1 b), no product
//   vc_prolong<T, W>      x += P xc                     reads P + xc + n*s, writes n*s; with s
//                         and b given x = s .* b + P xc (x unread): the pre-smoothing from zero
//                         of a level that restricts by RS (vc_restrict* over RS b: the
//                         pre-smoothing, the residual and R in one product)
//   vc_restrict_scale<T, W>  bc = R res and xc = sc .* bc: the restriction (rows: the coarse
//                         level's) with the next level's Jacobi pre-smoothing from zero, where
//                         that level pre-smooths apart from its residual (one launch fewer);
//                         sc null: bc = R res alone
//   vc_restrict_block<T>  the same a block a row: into a level of few, long rows
//   half_round<T>         float16 rounding of float32 values (precision "half"), one pass, and
//                         the packed words (offset and value) where asked
//   narrow_ell<T>         level 0's ELL column indices as 16-bit offsets per 32 rows (packing)
//   vc_dense<T>           y = Minv b, the coarsest level's dense (pseudo-)inverse, a block a row
//   vc_presmooth_residual_ell<T>, vc_residual_ell<T>, vc_jacobi_ell<T>: the same on level 0 when
//                         the solve holds A in ELL (regular rows, dpsolve.formats.choose_format):
//                         a thread a row over the solve's own column-major arrays, no second copy
//   vc_cheb_ell<T>        vc_cheb's steps over the solve's ELL (level 0, the Chebyshev
//                         preconditioner): from a given x, or the first two from zero
//   vc_presmooth_residual_sell<T>, vc_residual_sell<T>, vc_jacobi_sell<T>, vc_cheb_sell<T>,
//   vc_restrict_sell<T> (bc = R res, and xc = sc .* bc when sc is given), vc_prolong_sell<T>:
//                         the same over a level's matrices in sliced ELL (SELL-32,
//                         device.sell_of), a thread a row
//   vc_restrict_low<T, W>, vc_restrict_sell_low<T, HALF>, vc_prolong_low<T, W>,
//   vc_prolong_sell_low<T, HALF>: level 0's RS b and S b + P xc in a single-precision cycle, b
//                         read in T (the casts fused, as the *_ell_low kernels below)
//   vc_to_single<T>, vc_from_single<T>  the casts around a V-cycle run in single precision
//                         (precision "mixed": T double, the cycle's kernels float; complex alike)
//   vc_presmooth_residual_ell_low<T>, vc_jacobi_ell_low<T>: level 0's ELL kernels of that cycle
//                         with the casts fused (b read, y written in T; the rest single)
// The ELL and SELL kernels take <T, HALF>: HALF = true reads the matrix's values as float16 bits
// (precision "half": dps::mat_value) and multiplies each row's sum by the matrix's power of two
// `scale` (exact); HALF = false reads T, scale 1. The SELL kernels' NARROW: 16-bit column
// offsets (amg::col_t). Both take PACKED last (HALF only, and NARROW for SELL): each entry one
// 32-bit word, offset above value (amg::packed_sum; device.PACK_SELL, device.PACK_ELL).
#include <cooperative_groups.h>

#include <dpsolve/common.cuh>
#include <dpsolve/spmv.cuh>

// Programmatic dependent launch: common.cuh's DPS_PDL, first in every vc_* kernel.

namespace amg {

constexpr long long STATE_SHIFT = 60;
constexpr long long IN = 2, UNDECIDED = 1;
constexpr long long KEY_MASK = (1LL << STATE_SHIFT) - 1;

// Wang's 32-bit integer hash: the nodes' priorities, the same on the host (reference.py)
__device__ __forceinline__ unsigned int wang_hash(unsigned int h) {
    h = (h ^ 61u) ^ (h >> 16);
    h *= 9u;
    h ^= h >> 4;
    h *= 0x27d4eb2du;
    h ^= h >> 15;
    return h;
}

__device__ __forceinline__ long long key_of(int i) {
    return ((long long)(wang_hash((unsigned int)i) & 0x7FFFFFFu) << 32) | (long long)i;
}

// the type a V-cycle kernel's matrix values are stored in: T, or float16 bits (HALF)
template <typename T, bool HALF> struct stored_t { using type = T; };
template <typename T> struct stored_t<T, true> { using type = unsigned short; };
template <typename T, bool HALF> using stored = typename stored_t<T, HALF>::type;
// a V-cycle kernel's matrix values: with PACKED (HALF, and 16-bit column offsets), 32-bit words
// of an offset and a float16 value each (packed_sum: the SELL copies' and level 0's ELL)
template <typename T, bool HALF, bool PACKED> struct cycle_val_t {
    using type = stored<T, HALF>;
};
template <typename T> struct cycle_val_t<T, true, true> { using type = unsigned int; };
template <typename T, bool HALF, bool PACKED>
using cycle_val = typename cycle_val_t<T, HALF, PACKED>::type;

// Blocks an SM (__launch_bounds__' second argument) of the V-cycle kernels whose chunked row loops
// (strided_sum) the compiler took above 32 registers a thread: level 0's ELL kernels and
// vc_restrict_low. 2048 / DPS_BLOCK for a real type: at most 32 registers, every warp slot of an
// SM resident, which their latency-bound gathers need (the float16 Jacobi sweep for a double b at
// 40 registers ran 160^3's in 150.8 us against 75.8 at 32: ncu, H200); complex types: 1 (no
// minimum). tests/test_cuda_compile checks every vc_* kernel over float and double.
template <typename T> struct full_sm { static constexpr int value = 2048 / DPS_BLOCK; };
template <typename R> struct full_sm<dps::complex<R>> { static constexpr int value = 1; };

// The type a SELL kernel's column indices are stored in: int (padding -1), or with NARROW 16-bit
// offsets from a base column per slice of 32 slots (device.narrow), 0xFFFF the padding. The
// column of the slot at `at` in a slice of base b0; -1 for padding.
template <bool NARROW> struct col_t_ { using type = int; };
template <> struct col_t_<true> { using type = unsigned short; };
template <bool NARROW> using col_t = typename col_t_<NARROW>::type;
constexpr unsigned NARROW_PAD = 0xFFFFu;

template <bool NARROW>
__device__ __forceinline__ int column(const col_t<NARROW>* __restrict__ idx, size_t at, int b0) {
    if constexpr (NARROW) {
        const unsigned d = dps::ld_mat<true>(idx + at);
        return d == NARROW_PAD ? -1 : b0 + (int)d;
    } else {
        return dps::ld_mat<true>(idx + at);
    }
}

// A thread's sum over `count` entries `stride` apart from `start` (a SELL slot's, an ELL row's or
// a CSR lane's), in k's order: sum_k val[at_k] xv(col(at_k)), col(at) the column of the entry at
// `at` (-1: padding). CHUNK entries a round: their column loads issued together, then their value
// and x loads. A compiler's unrolling of a loop of unknown length (`#pragma unroll 4`, CHUNK = 0)
// leaves a remainder loop, one entry (two dependent loads) at a time, and that was most of a short
// row's work (P_0's rows of 2.7 entries at 2-D 1024^2; ELL level 0's 7 at 3-D: 4 unrolled, 3 one
// at a time). AMG_ROW_CHUNK for every V-cycle product, AMG_SMOOTH_CHUNK for the post-smoothing's
// (vc_jacobi_sell, the ELL Jacobi sweep), AMG_CSR_CHUNK (AMG_ROW_CHUNK unless built with -D) for
// the CSR kernels' lanes. Measured (H200, one process, old new / new old x5:
// benchmarks/row-chunk-ab-2026-11-29.py): 4 / 8 against the unrolled loop, V-cycle 1024^2 102.3 ->
// 86.5 us, 100^3 130.4 -> 117.1, 160^3 416.1 -> 365.3, prepared solves 2.84 -> 2.73, 2.96 ->
// 2.83, 8.83 -> 8.39 ms, the same bits; 8 everywhere lost at 3-D (the fused pre-smoothing, two
// gathers an entry, at 40 registers: 92 -> 126 us); 4 everywhere 88.5 / 119.5 / 381.8 us against
// 4 / 8's 86.9 / 118.5 / 376.0 (another run: old 102.1 / 132.5 / 426.1).
#ifndef AMG_ROW_CHUNK
#define AMG_ROW_CHUNK 4
#endif
#ifndef AMG_SMOOTH_CHUNK
#define AMG_SMOOTH_CHUNK 8
#endif
#ifndef AMG_CSR_CHUNK               // the CSR kernels' lanes (vector_rows' one-row path)
#define AMG_CSR_CHUNK AMG_ROW_CHUNK
#endif

template <typename T, int CHUNK = AMG_ROW_CHUNK, typename C, typename V, typename X>
__device__ __forceinline__ T strided_sum(size_t start, size_t stride, int count, C col,
                                         const V* __restrict__ val, X xv) {
    T sum = T(0);
    if constexpr (CHUNK > 0) {
        for (int k0 = 0; k0 < count; k0 += CHUNK) {
            int c[CHUNK];
#pragma unroll
            for (int j = 0; j < CHUNK; ++j)
                c[j] = k0 + j < count ? col(start + (size_t)(k0 + j) * stride) : -1;
#pragma unroll
            for (int j = 0; j < CHUNK; ++j)
                if (c[j] >= 0)
                    sum += dps::mat_value<T>(val + start + (size_t)(k0 + j) * stride) * xv(c[j]);
        }
    } else {
#pragma unroll 4
        for (int k = 0; k < count; ++k) {
            const size_t at = start + (size_t)k * stride;
            const int c = col(at);
            if (c >= 0) sum += dps::mat_value<T>(val + at) * xv(c);
        }
    }
    return sum;
}

// The grid-stride rows of a CSR kernel, W lanes a row, `rows` (1 to MAX_ROWS, uniform: the host's
// choice per level, device.rows_at_once) rows a group at a time: the group forms
// sum_k data[k] * xv(indices[k]) of those rows with their loads interleaved, then its first lane
// calls done(row, sum) for each of them below n. One row at a time a warp of the W = 32 levels
// had one row of loads in flight, and the large levels ran at ~60 % of the copy bandwidth on the
// H100 (latency, not bandwidth: the ELL level 0, 32 rows a warp, ran at 95-105 %). On levels of
// few rows several rows a group leave too few groups, and on rows of several passes (W = 32,
// long rows) the one-row loop, whose passes the compiler unrolls, keeps more in flight: there
// one row at a time is faster (rows = 1 runs dps::csr_row_vector's loop). Each row's sum is
// formed in csr_row_vector's order (lane-strided, then group_sum): the same bits whatever
// `rows`. The loop bound is uniform over the block, so every lane takes part in every shuffle.
constexpr int MAX_ROWS = 4;

template <typename T, int W, typename X, typename F>
__device__ __forceinline__ void vector_rows(int rows, int n, const int* __restrict__ indptr,
                                            const int* __restrict__ indices,
                                            const T* __restrict__ data, X xv, F done) {
    const int groups = DPS_BLOCK / W;
    const int lane = threadIdx.x % W, group = threadIdx.x / W;
    if (rows == 1) {               // one row a group: its passes unroll (long rows: W = 32)
        for (int base = blockIdx.x * groups; base < n; base += gridDim.x * groups) {
            const int row = base + group;
            T sum = T(0);
            if (row < n) {
                const int begin = indptr[row] + lane, end = indptr[row + 1];
                sum = strided_sum<T, AMG_CSR_CHUNK>(   // csr_row_vector's loop, chunked
                    (size_t)begin, W, begin < end ? (end - begin + W - 1) / W : 0,
                    [&](size_t at) { return dps::ld_mat<true>(indices + at); }, data, xv);
            }
            sum = dps::group_sum<T, W>(sum);
            if (lane == 0 && row < n) done(row, sum);
        }
        return;
    }
    for (int base = blockIdx.x * groups * rows; base < n; base += gridDim.x * groups * rows) {
        int k[MAX_ROWS], end[MAX_ROWS];
        T sum[MAX_ROWS];
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) {
            const int row = base + r * groups + group;
            k[r] = end[r] = 0;
            sum[r] = T(0);
            if (r < rows && row < n) {
                k[r] = indptr[row] + lane;
                end[r] = indptr[row + 1];
            }
        }
        bool more = true;
        while (more) {
            more = false;
#pragma unroll
            for (int r = 0; r < MAX_ROWS; ++r) {
                if (k[r] < end[r]) {
                    const int c = dps::ld_mat<true>(indices + k[r]);
                    sum[r] += dps::ld_mat<true>(data + k[r]) * xv(c);
                    k[r] += W;
                }
                more |= k[r] < end[r];
            }
        }
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) {
            if (r < rows) {                                              // uniform
                const T total = dps::group_sum<T, W>(sum[r]);
                const int row = base + r * groups + group;
                if (lane == 0 && row < n) done(row, total);
            }
        }
    }
}

// Sliced ELL, SELL-32 (device.sell_of): slices of 32 slots, slice s holding its slots' entries
// column-major over its own width (sptr[s + 1] - sptr[s]) / 32, entry k of slot q at
// sptr[q / 32] + 32 k + q % 32, padding with index -1; slot q holds row perm[q] (the rows sorted
// by length within windows: sell_row_of, below). A thread a row, as the ELL level 0: its
// loads coalesced over the slice and independent of each other (the CSR-vector kernels of W
// lanes a row ran the coarse levels at 43-73 % of the copy bandwidth, at 600-700 W on the
// H100, against 94-104 % and ~530 W for the ELL level 0). sum_k a_rk xv(c_k), in k's order.
// NARROW: the indices as offsets from the slice's base (col_t).
// Packed entries (V = unsigned int): each one 32-bit word, its 16-bit column offset from b0
// above its float16 value's bits (device.SellMatrix.halved, device.DeviceHierarchy.use_ell),
// read by one load where the unpacked copies take two (2 + 2 bytes, or level 0's ELL 4 + 2);
// strided_sum's values in its order: the same bits.
template <typename V> struct packed_words { static constexpr bool value = false; };
template <> struct packed_words<unsigned int> { static constexpr bool value = true; };

template <typename T, int CHUNK, typename X>
__device__ __forceinline__ T packed_sum(size_t start, size_t stride, int count, int b0,
                                        const unsigned int* __restrict__ words, X xv) {
    T sum = T(0);
    for (int k0 = 0; k0 < count; k0 += CHUNK) {
        unsigned int w[CHUNK];
#pragma unroll
        for (int j = 0; j < CHUNK; ++j)
            w[j] = k0 + j < count ? dps::ld_mat<true>(words + start + (size_t)(k0 + j) * stride)
                                  : NARROW_PAD << 16;
#pragma unroll
        for (int j = 0; j < CHUNK; ++j) {
            if ((w[j] >> 16) != NARROW_PAD)
                sum += T(dps::half_to_float((unsigned short)(w[j] & 0xFFFFu)))
                       * xv(b0 + (int)(w[j] >> 16));
        }
    }
    return sum;
}

template <typename T, bool NARROW, int CHUNK = AMG_ROW_CHUNK, typename V, typename X>
__device__ __forceinline__ T sell_row(int slot, const int* __restrict__ sptr,
                                      const col_t<NARROW>* __restrict__ idx,
                                      const int* __restrict__ base, const V* __restrict__ val,
                                      X xv) {
    const int s = slot >> 5, begin = sptr[s];
    const int b0 = NARROW ? base[s] : 0;
    if constexpr (packed_words<V>::value) {
        static_assert(NARROW, "packed SELL words hold 16-bit column offsets");
        return packed_sum<T, CHUNK>((size_t)(begin + (slot & 31)), 32, (sptr[s + 1] - begin) >> 5,
                                    b0, val, xv);
    } else {
        return strided_sum<T, CHUNK>((size_t)(begin + (slot & 31)), 32,
                                     (sptr[s + 1] - begin) >> 5,
                                     [&](size_t at) { return column<NARROW>(idx, at, b0); }, val,
                                     xv);
    }
}

// ELL, column-major (level 0 in the solve's own arrays): entry k of row `row` at k n + row,
// padding -1; sum_k a_rk xv(c_k) in k's order (dps::ell_row's bits, xv any gather). Packed
// (V = unsigned int: the cycle's copy, device.DeviceHierarchy.use_ell): `indices` holds each 32
// rows' base column, the words their offsets (NARROW_PAD: padding) and float16 values.
template <typename T, int CHUNK = AMG_ROW_CHUNK, typename V, typename X>
__device__ __forceinline__ T ell_sum(int row, int n, int width, const int* __restrict__ indices,
                                     const V* __restrict__ data, X xv) {
    if constexpr (packed_words<V>::value) {
        return packed_sum<T, CHUNK>((size_t)row, (size_t)n, width, indices[row >> 5], data, xv);
    } else {
        return strided_sum<T, CHUNK>((size_t)row, (size_t)n, width,
                                     [&](size_t at) { return dps::ld_mat<true>(indices + at); },
                                     data, xv);
    }
}

// x[c]: the operand of a plain product
template <typename T>
struct gather {
    const T* __restrict__ x;
    __device__ __forceinline__ T operator()(int c) const { return x[c]; }
};

// x[c] written by other blocks of this cooperative kernel before a grid.sync (power_iterate):
// loaded through L2 (dps::ldcg), as L1 is not coherent across blocks
template <typename T>
struct gather_coherent {
    const T* x;
    __device__ __forceinline__ T operator()(int c) const { return dps::ldcg(x + c); }
};

// sum_k term(k) over [begin, end) by the whole block (a block a row: vc_dense, vc_restrict_block):
// C sums a thread over entries DPS_BLOCK apart (C loads in flight), added in order, then
// dps::block_sum (the total on thread 0). smem: DPS_WARP slots, free again on return. C =
// AMG_BLOCK_CHUNK for 4-byte types, 2 for wider ones (their 8 sums would take vc_dense above 32
// registers). Measured (H200, one process, 8 against 2, the old loop's bits; 5 rounds ABBA,
// benchmarks/vcycle-config-ab-2026-11-29.py): V-cycle 1024^2 86.0 -> 84.5 us (its coarsest
// level's 2,009 x 2,009 float32 inverse), 160^3 369.0 -> 368.0.
#ifndef AMG_BLOCK_CHUNK
#define AMG_BLOCK_CHUNK 8
#endif
template <typename T, typename F>
__device__ __forceinline__ T block_row_sum(int begin, int end, T* smem, F term) {
    constexpr int C = sizeof(T) > 4 ? 2 : AMG_BLOCK_CHUNK;     // 8-byte T: 32 registers
    T s[C];
#pragma unroll
    for (int j = 0; j < C; ++j) s[j] = T(0);
    for (int k0 = begin + threadIdx.x; k0 < end; k0 += C * DPS_BLOCK) {
#pragma unroll
        for (int j = 0; j < C; ++j)
            if (k0 + j * DPS_BLOCK < end) s[j] += term(k0 + j * DPS_BLOCK);
    }
#pragma unroll
    for (int j = 1; j < C; ++j) s[0] += s[j];
    return dps::block_sum(s[0], smem);
}


// AMG_PDL(prefetch): DPS_PDL with `prefetch` between its two instructions. Launched early (a
// programmatic launch in a captured V-cycle), a kernel on a small level asks L1 for its first
// row's matrix entries (amg::sell_prefetch, csr_prefetch, block_prefetch: the row's place read,
// its first entries prefetched) while the kernel before it finishes; only the hierarchy's
// matrices, which nothing writes while a cycle runs, never a vector. Where a kernel's rows are
// more than one wave of resident threads (AMG_PREFETCH_MAX: 2,048 a SM on 132 SMs) a thread's
// later rows gain nothing from it, and the kernels there skip it. Measured (H200, 12-01,
// graph-captured V-cycles, 5 rounds in one process, the same bits): 2-D 1024^2 78.4 -> 76.8 us,
// 3-D 100^3 101.3 -> 96.9, 160^3 311.1 -> 311.7; on every level 77.4 / 97.6 / 312.2.
// -DAMG_PREFETCH=0: DPS_PDL alone (the A/B). Sessions 26 and 31 prefetched each block's share of
// its matrix into L2 (cp.async.bulk.prefetch) and lost at 3-D.
#ifndef AMG_PREFETCH
#define AMG_PREFETCH 1
#endif
#ifndef AMG_PREFETCH_MAX
#define AMG_PREFETCH_MAX 270000
#endif
#if AMG_PREFETCH
#define AMG_PDL(prefetch)                                                                        \
    do {                                                                                         \
        DPS_PDL_LAUNCH();                                                                        \
        prefetch;                                                                                \
        DPS_PDL_WAIT();                                                                          \
    } while (0)
#else
#define AMG_PDL(prefetch) DPS_PDL()
#endif

__device__ __forceinline__ void prefetch_l1(const void* p) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

// slot q = this thread's first of a SELL copy's n slots: its slice's base, its row, and its first
// CHUNK entries (sptr read: the entries' place)
template <int CHUNK, typename C, typename V>
__device__ __forceinline__ void sell_prefetch(int n, const int* __restrict__ sptr,
                                              const C* __restrict__ idx,
                                              const int* __restrict__ base,
                                              const V* __restrict__ val,
                                              const int* __restrict__ perm) {
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n || n > AMG_PREFETCH_MAX) return;
    const int s = q >> 5;
    const int begin = __ldg(sptr + s), width = (__ldg(sptr + s + 1) - begin) >> 5;
    if (perm != nullptr) prefetch_l1(perm + q);
    if (base != nullptr) prefetch_l1(base + s);
#pragma unroll
    for (int k = 0; k < CHUNK; ++k) {
        if (k < width) {
            const size_t at = (size_t)begin + (q & 31) + 32 * (size_t)k;
            prefetch_l1(val + at);
            if (idx != nullptr) prefetch_l1(idx + at);
        }
    }
}

// the same for vector_rows' first group of rows (W lanes a row, `rows` at a time)
template <int W, typename T>
__device__ __forceinline__ void csr_prefetch(int n, int rows, const int* __restrict__ indptr,
                                             const int* __restrict__ indices,
                                             const T* __restrict__ data) {
    const int groups = DPS_BLOCK / W, lane = threadIdx.x % W, group = threadIdx.x / W;
    const int first = blockIdx.x * groups * rows;
    if (n > AMG_PREFETCH_MAX) return;
    for (int r = 0; r < rows; ++r) {
        const int row = first + r * groups + group;
        if (row >= n) return;
        const int begin = __ldg(indptr + row) + lane, end = __ldg(indptr + row + 1);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (begin + k * W < end) {
                prefetch_l1(indices + begin + k * W);
                prefetch_l1(data + begin + k * W);
            }
        }
    }
}

// a block a row: this block's first row's first 8 entries a thread (indices null: a dense row)
template <typename T>
__device__ __forceinline__ void block_prefetch(int begin, int end, const T* __restrict__ data,
                                               const int* __restrict__ indices) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int k = begin + threadIdx.x + j * DPS_BLOCK;
        if (k < end) {
            prefetch_l1(data + k);
            if (indices != nullptr) prefetch_l1(indices + k);
        }
    }
}


// the same over row blockIdx.x of a CSR matrix of n rows
template <typename T>
__device__ __forceinline__ void block_prefetch_csr(int n, const int* __restrict__ indptr,
                                                   const int* __restrict__ indices,
                                                   const T* __restrict__ data) {
    if (blockIdx.x < n)
        block_prefetch(__ldg(indptr + blockIdx.x), __ldg(indptr + blockIdx.x + 1), data, indices);
}

// One warp's group of a narrow copy (narrow_index: a SELL slice; narrow_ell: 32 rows of level 0's
// ELL): each lane's `count` int32 columns `stride` apart from `start`; the group's base (its least
// column; 0 for padding only) into *base, each entry its column - base (padding -1: NARROW_PAD)
// into out, or, where the group spans more than 0xFFFE columns, a count in *overflow (the copy is
// then not used). Called by every lane of the warp.
__device__ __forceinline__ void narrow_group(size_t start, size_t stride, int count,
                                             const int* __restrict__ idx,
                                             unsigned short* __restrict__ out, int* base,
                                             int* overflow) {
    const int lane = threadIdx.x & 31;
    int lo = 0x7FFFFFFF, hi = -1;
    for (int k = 0; k < count; ++k) {
        const int c = idx[start + stride * k];
        if (c >= 0) {
            lo = min(lo, c);
            hi = max(hi, c);
        }
    }
    lo = __reduce_min_sync(0xFFFFFFFFu, lo);
    hi = __reduce_max_sync(0xFFFFFFFFu, hi);
    const int b0 = hi < 0 ? 0 : lo;
    if (hi - b0 >= (int)NARROW_PAD) {
        if (lane == 0) atomicAdd(overflow, 1);
        return;
    }
    if (lane == 0) *base = b0;
    for (int k = 0; k < count; ++k) {
        const int c = idx[start + stride * k];
        out[start + stride * k] = c < 0 ? (unsigned short)NARROW_PAD : (unsigned short)(c - b0);
    }
}

// A Chebyshev step from x at a row, given ax = (A x)_row, x_row and the previous d_row (read
// only where c1 != 0) (vc_cheb, vc_cheb_ell, vc_cheb_sell): q = D^-1 (b - A x),
// d = c1 d + c2 q, y = x + d
template <typename T, typename D>
__device__ __forceinline__ void cheb_update(int row, T ax, T xr, D dprev,
                                            const T* __restrict__ dinv, const T* __restrict__ b,
                                            T* __restrict__ d, T c1, T c2, T* __restrict__ y) {
    const T q = dinv[row] * (b[row] - ax);
    const T di = (c1 == T(0) ? T(0) : c1 * dprev()) + c2 * q;
    d[row] = di;
    y[row] = xr + di;
}

// x_c after the first step from zero, c0 (D^-1 b)_c: what vc_cheb's first step writes, bit for
// bit; the second step gathers it so (vc_cheb* with x null), the first step unlaunched
template <typename T>
struct gather_first {
    const T* __restrict__ dinv;
    const T* __restrict__ b;
    T c0;
    __device__ __forceinline__ T operator()(int c) const { return c0 * (dinv[c] * b[c]); }
};

// The loads in flight of a smoothing sweep's row loop (strided_sum's CHUNK) for its gather:
// fewer for gather_first, which loads two values an entry, a half as many (a quarter for double)
// (at AMG_SMOOTH_CHUNK, vc_cheb_ell over double spilled 32 bytes at the 32 registers its launch
// bounds give; at a half, 16 with float16 values)
template <typename X> struct smooth_chunk { static constexpr int value = AMG_SMOOTH_CHUNK; };
template <typename T> struct smooth_chunk<gather_first<T>> {
    static constexpr int part = AMG_SMOOTH_CHUNK / (sizeof(T) > 4 ? 4 : 2);
    static constexpr int value = part > 1 ? part : 1;
};

// A step of a Chebyshev application at a row: from x (x given; ax = (A x)_row by `sum` over
// gather{x}), or, x null, the first two steps in one: x = d = c0 D^-1 b read where gathered
// (sum over gather_first), the second step's (c1, c2) from it. Saves the first step's launch
// and 6n values (its x and d written and read back, b and D^-1 read twice): Chebyshev-PCG
// 2.5-8.6 % faster on an H200, the same bits (BENCHMARKS.md, issue 30, 2026-11-30).
template <typename T, typename S>
__device__ __forceinline__ void cheb_step(int row, S sum, const T* __restrict__ dinv,
                                          const T* __restrict__ x, const T* __restrict__ b,
                                          T* __restrict__ d, T c0, T c1, T c2,
                                          T* __restrict__ y) {
    if (x != nullptr) {
        cheb_update(row, sum(gather<T>{x}), x[row], [&] { return d[row]; }, dinv, b, d, c1, c2,
                    y);
    } else {
        const T x0 = c0 * (dinv[row] * b[row]);
        cheb_update(row, sum(gather_first<T>{dinv, b, c0}), x0, [&] { return x0; }, dinv, b, d,
                    c1, c2, y);
    }
}

}  // namespace amg

// ---------------------------------------------------------------------------- aggregation

// active: agg null (every node) or the nodes with agg_i < 0 (the leftovers of the second pass);
// an inactive node's value is -1, below every key: it is neither a candidate nor a neighbour
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
mis_init(int n, const int* __restrict__ agg, long long* __restrict__ v) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] = (agg == nullptr || agg[i] < 0)
            ? (amg::UNDECIDED << amg::STATE_SHIFT) | amg::key_of(i) : -1LL;
}

// `zero`, where given, is the round's count of undecided nodes, zeroed here for the decision
// that follows on the same stream (no memset launched a round)
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
mis2_max(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
         const long long* __restrict__ in, long long* __restrict__ out, int* __restrict__ zero) {
    if (zero != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *zero = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        long long m = in[i];
        for (int k = indptr[i]; k < indptr[i + 1]; ++k) m = max(m, in[indices[k]]);
        out[i] = m;
    }
}

namespace amg {
// node i's decision from its maximum m over the distance: IN if m is its own value, OUT if an
// IN node is within reach; returns whether it stays undecided
__device__ __forceinline__ bool decide(long long* __restrict__ v, int i, long long vi,
                                       long long m) {
    const long long key = vi & KEY_MASK;
    if (m == vi) v[i] = (IN << STATE_SHIFT) | key;
    else if ((m >> STATE_SHIFT) == IN) v[i] = key;                        // OUT (state 0)
    else return true;
    return false;
}
}  // namespace amg

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
mis2_decide(int n, long long* __restrict__ v, const long long* __restrict__ m2,
            int* __restrict__ undecided) {
    int left = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const long long vi = v[i];
        if ((vi >> amg::STATE_SHIFT) != amg::UNDECIDED) continue;
        left += amg::decide(v, i, vi, m2[i]);
    }
    if (left) atomicAdd(undecided, left);
}

// m2_i = max(m1_i, max over the strong neighbours j of m1_j) and the decision, an undecided i
// at a time: thread i writes v_i alone and reads v at no other node, so no other thread of the
// pass sees the write (mis2_max of the round read v; the next round's reads it after this pass)
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
mis2_max_decide(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                const long long* __restrict__ m1, long long* __restrict__ v,
                int* __restrict__ undecided) {
    int left = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const long long vi = v[i];
        if ((vi >> amg::STATE_SHIFT) != amg::UNDECIDED) continue;
        long long m = m1[i];
        for (int k = indptr[i]; k < indptr[i + 1]; ++k) m = max(m, m1[indices[k]]);
        left += amg::decide(v, i, vi, m);
    }
    if (left) atomicAdd(undecided, left);
}

// agg_out_i = agg_in_i where it has one; else the aggregate of the strong neighbour of largest
// key among the roots (roots_only) or among the nodes with an aggregate; -1 if none (counted).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
agg_join(int n, int roots_only, const int* __restrict__ indptr, const int* __restrict__ indices,
         const long long* __restrict__ v, const int* __restrict__ agg_in, int* __restrict__ agg_out,
         int* __restrict__ missing) {
    int left = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int a = agg_in[i];
        if (a < 0) {
            long long best = -1;
            for (int k = indptr[i]; k < indptr[i + 1]; ++k) {
                const int j = indices[k];
                const long long vj = v[j];
                const bool take = roots_only ? (vj >> amg::STATE_SHIFT) == amg::IN : agg_in[j] >= 0;
                const long long key = vj & amg::KEY_MASK;
                if (take && key > best) {
                    best = key;
                    a = agg_in[j];
                }
            }
            if (a < 0) ++left;
        }
        agg_out[i] = a;
    }
    if (left) atomicAdd(missing, left);
}

// The aggregation's new roots (device.aggregate), flag_i 1 or 0: without agg (pass 1) the IN
// nodes of v; with agg (pass 2) the IN nodes of v not yet aggregated that have a neighbour not
// yet aggregated (row i's entries with agg < 0 counted, less i's own: reference.aggregate's rule)
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
agg_flags(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
          const long long* __restrict__ v, const int* __restrict__ agg, int* __restrict__ flag) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int f = (v[i] >> amg::STATE_SHIFT) == amg::IN;
        if (agg != nullptr && f) {
            const int left = agg[i] < 0;
            int others = -left;
            for (int k = indptr[i]; k < indptr[i + 1]; ++k) others += agg[indices[k]] < 0;
            f = left && others > 0;
        }
        flag[i] = f;
    }
}

// agg_i = base + csum_i - 1 at the flagged nodes (csum: the flags' inclusive sum), agg_in_i
// elsewhere (agg_in null: -1); the flags' count, csum_{n-1}, into *total
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
agg_number(int n, const int* __restrict__ flag, const int* __restrict__ csum, int base,
           const int* __restrict__ agg_in, int* __restrict__ agg, int* __restrict__ total) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        agg[i] = flag[i] ? base + csum[i] - 1 : (agg_in != nullptr ? agg_in[i] : -1);
    if (blockIdx.x == 0 && threadIdx.x == 0) *total = n > 0 ? csum[n - 1] : 0;
}

// The aggregates renumbered in their roots' order (reference.in_root_order): the aggregate of a
// root i (flag1 or flag2, disjoint) takes i's rank among all roots, csum1_i + csum2_i - 1
// (flag2, csum2 null: the first pass's roots alone)
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
agg_root_order(int n, const int* __restrict__ flag1, const int* __restrict__ csum1,
               const int* __restrict__ flag2, const int* __restrict__ csum2,
               const int* __restrict__ agg, int* __restrict__ renumber) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (flag1[i] || (flag2 != nullptr && flag2[i]))
            renumber[agg[i]] = csum1[i] + (csum2 != nullptr ? csum2[i] : 0) - 1;
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
csr_scale_rows(int n, const int* __restrict__ indptr, T* __restrict__ data,
               const T* __restrict__ s) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const T si = s[i];
        for (int k = indptr[i]; k < indptr[i + 1]; ++k) data[k] = si * data[k];
    }
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
smooth_tentative(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                 T* __restrict__ data, const T* __restrict__ s, const int* __restrict__ agg,
                 const T* __restrict__ t, T c, const double* __restrict__ rho, double omega,
                 int* __restrict__ missing) {
    if (rho != nullptr) c = T(dps::real_t<T>(omega / rho[0]));   // the host's c, rho on the device
    int miss = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const T si = s[i];
        const int a = agg[i];
        bool found = false;
        for (int k = indptr[i]; k < indptr[i + 1]; ++k) {
            const T v = -(c * (si * data[k]));
            if (indices[k] == a) {
                data[k] = t[i] + v;
                found = true;
            } else {
                data[k] = v;
            }
        }
        miss += !found;
    }
    if (miss) atomicAdd(missing, miss);
}

// C = M - X s in place over X's pattern (the smoothed restriction, dpsolve/precond/amg/device.py's
// smoothed_restriction): X's entry (i, j) becomes -(x_ij s_k), k = i (by_row: X = A P, C =
// P - S A P = (I - S A) P) or j (X = R A, C = R - R A S); M's entry (i, j) is added first where
// M has one (m_ij - that: the bits of the reference's M - X S). Rows of both sorted; an entry of
// M that X lacks is counted (missing: the caller then adds them apart).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
subtract_scaled(int rows, const int* __restrict__ x_ptr, const int* __restrict__ x_idx,
                T* __restrict__ x_val, const T* __restrict__ s, int by_row,
                const int* __restrict__ m_ptr, const int* __restrict__ m_idx,
                const T* __restrict__ m_val, int* __restrict__ missing) {
    int miss = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) {
        int m = m_ptr[i];
        const int m_end = m_ptr[i + 1];
        for (int k = x_ptr[i]; k < x_ptr[i + 1]; ++k) {
            const int j = x_idx[k];
            const T t = x_val[k] * s[by_row ? i : j];
            while (m < m_end && m_idx[m] < j) {              // an entry of M not in X
                ++miss;
                ++m;
            }
            if (m < m_end && m_idx[m] == j) x_val[k] = m_val[m++] - t;
            else x_val[k] = -t;
        }
        miss += m_end - m;
    }
    if (miss) atomicAdd(missing, miss);
}

// Counts the entries (i, j) of A whose (j, i) is not stored or differs from conj(a_ij) by more
// than tol (|a_ij - conj(a_ji)|, binary search in row j: rows sorted): 0 for a Hermitian A
// (to tol). tol = rel x A's largest magnitude, read from its max_abs slot (the float64's bits)
// here rather than by the host. The smoothed restriction's choice of product
// (device.smoothed_restriction).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
hermitian_misses(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                 const T* __restrict__ data, double rel,
                 const unsigned long long* __restrict__ top, int* __restrict__ missing) {
    const double tol = rel * __longlong_as_double((long long)top[0]);   // the host's product
    int miss = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        for (int k = indptr[i]; k < indptr[i + 1]; ++k) {
            const int j = indices[k];
            const int at = dps::find_sorted(indices, indptr[j], indptr[j + 1], i);
            miss += at < 0 || (double)dps::abs2(data[k] - dps::conj(data[at])) > tol * tol;
        }
    }
    if (miss) atomicAdd(missing, miss);
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
pattern_asymmetry(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                  int* __restrict__ missing) {
    int miss = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        for (int k = indptr[i]; k < indptr[i + 1]; ++k) {
            const int j = indices[k];
            miss += dps::find_sorted(indices, indptr[j], indptr[j + 1], i) < 0;   // i in row j
        }
    }
    if (miss) atomicAdd(missing, miss);
}

// The transpose of a CSR matrix without a sort (device.transpose: sparse.transpose's arrays).
// transpose_count: each column's entries into counts (zeroed), the largest count into *longest.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
transpose_count(int nnz, const int* __restrict__ indices, int* __restrict__ counts,
                int* __restrict__ longest) {
    __shared__ int part[DPS_BLOCK / DPS_WARP];
    int most = 0;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < nnz; k += gridDim.x * blockDim.x)
        most = max(most, atomicAdd(counts + indices[k], 1) + 1);
    for (int o = DPS_WARP / 2; o > 0; o >>= 1)
        most = max(most, __shfl_xor_sync(0xFFFFFFFFu, most, o));
    if ((threadIdx.x & (DPS_WARP - 1)) == 0) part[threadIdx.x / DPS_WARP] = most;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < DPS_BLOCK / DPS_WARP; ++w) most = max(most, part[w]);
        if (most > 0) atomicMax(longest, most);
    }
}

// transpose_fill: row i's entries k into their columns' segments of t_ptr, in no set order
// (counts counted back down to zero): src[slot] = k, src_row[slot] = i
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
transpose_fill(int m, const int* __restrict__ indptr, const int* __restrict__ indices,
               const int* __restrict__ t_ptr, int* __restrict__ counts, int* __restrict__ src,
               int* __restrict__ src_row) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += gridDim.x * blockDim.x)
        for (int k = indptr[i]; k < indptr[i + 1]; ++k) {
            const int c = indices[k];
            const int slot = t_ptr[c] + atomicSub(counts + c, 1) - 1;
            src[slot] = k;
            src_row[slot] = i;
        }
}

// transpose_rank: a warp a column puts its segment in row order (the stable sort's: an entry's
// position k grows with its row), each entry at its rank among the segment's positions:
// order[t] = k, t_idx[t] = its row. O(length^2 / 32) a column: device.TRANSPOSE_RANK_MAX caps it.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
transpose_rank(int ncols, const int* __restrict__ t_ptr, const int* __restrict__ src,
               const int* __restrict__ src_row, int* __restrict__ order, int* __restrict__ t_idx) {
    const int lane = threadIdx.x & (DPS_WARP - 1);
    const int warps = gridDim.x * (blockDim.x / DPS_WARP);
    for (int c = (blockIdx.x * blockDim.x + threadIdx.x) / DPS_WARP; c < ncols; c += warps) {
        const int b = t_ptr[c], e = t_ptr[c + 1];
        for (int s = b + lane; s < e; s += DPS_WARP) {
            const int k = src[s];
            int rank = 0;
            for (int u = b; u < e; ++u) rank += src[u] < k;
            order[b + rank] = k;
            t_idx[b + rank] = src_row[s];
        }
    }
}

// ---------------------------------------------------------------------------- the V-cycle

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_residual(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
            const T* __restrict__ data, const T* __restrict__ x, const T* __restrict__ b,
            T* __restrict__ res, int rows) {
    AMG_PDL(amg::csr_prefetch<W>(n, rows, indptr, indices, data));
    amg::vector_rows<T, W>(rows, n, indptr, indices, data, amg::gather<T>{x},
                           [&](int row, T ax) { res[row] = b[row] - ax; });
}

// the single precision of a value type (the identity for a single one)
template <typename T> struct single_of { using type = T; };
template <> struct single_of<double> { using type = float; };
template <> struct single_of<dps::complex<double>> { using type = dps::complex<float>; };

template <typename To, typename From> __device__ __forceinline__ To cast_to(From v) {
    return To(v);
}
template <> __device__ __forceinline__ dps::complex<float> cast_to(dps::complex<double> v) {
    return {(float)v.re, (float)v.im};
}
template <> __device__ __forceinline__ dps::complex<double> cast_to(dps::complex<float> v) {
    return {(double)v.re, (double)v.im};
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_to_single(int n, const T* __restrict__ in, typename single_of<T>::type* __restrict__ out) {
    DPS_PDL();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = cast_to<typename single_of<T>::type>(in[i]);
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_from_single(int n, const typename single_of<T>::type* __restrict__ in, T* __restrict__ out) {
    DPS_PDL();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = cast_to<T>(in[i]);
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_scale(int n, const T* __restrict__ s, const T* __restrict__ b, T* __restrict__ x) {
    DPS_PDL();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = s[i] * b[i];
}

// The Jacobi pre-smoothing from x = 0 fused into the residual: x = s .* b and res = b - A x,
// with A x gathered as sum a_rj s_j b_j, so x is written and never read back.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_presmooth_residual(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                      const T* __restrict__ data, const T* __restrict__ s,
                      const T* __restrict__ b, T* __restrict__ x, T* __restrict__ res,
                      int rows) {
    AMG_PDL(amg::csr_prefetch<W>(n, rows, indptr, indices, data));
    amg::vector_rows<T, W>(rows, n, indptr, indices, data, [&](int c) { return s[c] * b[c]; },
                           [&](int row, T sum) {
                               x[row] = s[row] * b[row];
                               res[row] = b[row] - sum;
                           });
}

namespace amg {
// A power step's end: the block's sum of |w_i|^2 into partials[blockIdx.x], and the grid's
// last block to get here (`done` counts them; that block resets it) sums the partials in one
// order, a thread over every blockDim.x-th then dps::block_sum (the bits of the one-block
// power_norm it replaced, launched after each step until 2026-12-03): norm[0] = sqrt(sum),
// scale_out[0] = 1 / norm[0]. Every thread of the block calls it.
__device__ __forceinline__ void power_partial(double acc, double* smem, double* partials,
                                              unsigned int* done, double* norm,
                                              double* scale_out) {
    __shared__ bool last;
    acc = dps::block_sum(acc, smem);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = acc;
        __threadfence();                               // the partial is visible before the count
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    double sum = 0.0;
    for (int i = threadIdx.x; i < gridDim.x; i += blockDim.x) sum += dps::ldcg(partials + i);
    sum = dps::block_sum(sum, smem);
    if (threadIdx.x == 0) {
        const double nrm = sqrt(sum);
        norm[0] = nrm;
        scale_out[0] = 1.0 / nrm;
        *done = 0u;                                    // ready for the next step
    }
}
}  // namespace amg

// rho(D^-1 A) by power iteration (the set-up), in the wide type: w = scale * D^-1 (A v) with
// scale = 1 / ||v|| (the previous step's norm, on the device; nullptr: 1), and each block's
// partial sum of |w_i|^2; the last block sums them (amg::power_partial): norm = sqrt(sum),
// scale_out = 1 / norm.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
power_step(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
           const T* __restrict__ data, const T* __restrict__ dinv, const T* __restrict__ v,
           const double* __restrict__ scale, T* __restrict__ w, double* __restrict__ partials,
           int rows, unsigned int* __restrict__ done, double* __restrict__ norm,
           double* __restrict__ scale_out) {
    __shared__ double smem[DPS_WARP];
    const double sc = scale != nullptr ? scale[0] : 1.0;
    double acc = 0.0;
    amg::vector_rows<T, W>(rows, n, indptr, indices, data, amg::gather<T>{v}, [&](int row, T av) {
        const T wi = dinv[row] * av * T(sc);
        w[row] = wi;
        acc += (double)dps::abs2(wi);
    });
    amg::power_partial(acc, smem, partials, done, norm, scale_out);
}

// The same step over level 0's ELL (the solve's own arrays, a thread a row: dps::ell_row), where
// the solve holds A in ELL in the power steps' type (device.spectral_radius's ``ell``): on 3-D
// 160^3 the CSR-vector steps ran at ~1.7 TB/s (ncu: 200 us a step at 8 lanes)
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
power_step_ell(int n, int width, const int* __restrict__ indices, const T* __restrict__ data,
               const T* __restrict__ dinv, const T* __restrict__ v,
               const double* __restrict__ scale, T* __restrict__ w, double* __restrict__ partials,
               unsigned int* __restrict__ done, double* __restrict__ norm,
               double* __restrict__ scale_out) {
    __shared__ double smem[DPS_WARP];
    const double sc = scale != nullptr ? scale[0] : 1.0;
    double acc = 0.0;
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x) {
        const T wi = dinv[row] * dps::ell_row<T>(row, n, width, indices, data, v) * T(sc);
        w[row] = wi;
        acc += (double)dps::abs2(wi);
    }
    amg::power_partial(acc, smem, partials, done, norm, scale_out);
}

// The power iteration's start vector (smoothers.start_vector): v_i = 1 + ((i * 2654435761) mod
// 1000) / 1000, the product exact in unsigned 64-bit integers, the rest in double (the same bits
// as the reference's NumPy expression, in one launch instead of six of CuPy's)
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
power_start(int n, T* __restrict__ v) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const unsigned long long p = (unsigned long long)i * 2654435761ull;
        v[i] = T(1.0 + (double)(p % 1000ull) / 1000.0);
    }
}

// the power steps, `iterations` times, in one cooperative launch, for a small level
// (device.POWER_ONE_LAUNCH_NNZ), whose launched steps (then two launches each) were bound by the
// host's launch cost (~15 us each from Python: 0.6 ms for a level of 484 rows): w alternates
// between w0 and w1 (v0 the start), each block sums the step's partials (2 x gridDim slots: a
// step writes one half while the last step's are read) in one order, so all hold the same scale
// without a broadcast; norm[0] = the last step's norm. The same steps as the launched ones; only
// the grid, so the partials' grouping, differs (rho to rounding).
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
power_iterate(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
              const T* __restrict__ data, const T* __restrict__ dinv, const T* v0, T* w0, T* w1,
              double* partials, int iterations, int rows, double* __restrict__ norm) {
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    __shared__ double smem[DPS_WARP];
    const T* src = v0;
    double sc = 1.0, nrm = 0.0;
    for (int k = 0; k < iterations; ++k) {
        T* dst = (k & 1) ? w1 : w0;
        double* part = partials + (k & 1) * gridDim.x;
        double acc = 0.0;
        amg::vector_rows<T, W>(rows, n, indptr, indices, data, amg::gather_coherent<T>{src},
                               [&](int row, T av) {
                                   const T wi = dinv[row] * av * T(sc);
                                   dst[row] = wi;
                                   acc += (double)dps::abs2(wi);
                               });
        acc = dps::block_sum(acc, smem);
        if (threadIdx.x == 0) part[blockIdx.x] = acc;
        grid.sync();
        double tot = 0.0;
        for (int i = threadIdx.x; i < gridDim.x; i += blockDim.x) tot += __ldcg(part + i);
        tot = dps::sum_everywhere(tot, smem);
        __syncthreads();                         // smem is block_sum's again in the next step
        nrm = sqrt(tot);
        sc = 1.0 / nrm;
        src = dst;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) norm[0] = nrm;
}

// A level's diagonal (0 where a row stores none; rows sorted, no duplicates: dps::find_sorted)
// into d, and the count of rows whose diagonal is zero, not finite or of a real part <= 0
// (device._check_level's one pass: the error's text is made apart, where the count is not 0).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
diag_check(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
           const T* __restrict__ data, T* __restrict__ d, int* __restrict__ bad) {
    int mine = 0;
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n;
         row += gridDim.x * blockDim.x) {
        const int at = dps::find_sorted(indices, indptr[row], indptr[row + 1], row);
        const T v = at < 0 ? T(0) : data[at];
        d[row] = v;
        mine += !dps::is_finite(v) || !((double)dps::real(v) > 0.0);
    }
    mine = __reduce_add_sync(0xffffffffu, mine);
    if (threadIdx.x % DPS_WARP == 0 && mine) atomicAdd(bad, mine);
}

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_jacobi(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
          const T* __restrict__ data, const T* __restrict__ s, const T* __restrict__ x,
          const T* __restrict__ b, T* __restrict__ y, int rows) {
    AMG_PDL(amg::csr_prefetch<W>(n, rows, indptr, indices, data));
    amg::vector_rows<T, W>(rows, n, indptr, indices, data, amg::gather<T>{x},
                           [&](int row, T ax) { y[row] = x[row] + s[row] * (b[row] - ax); });
}

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_cheb(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
        const T* __restrict__ data, const T* __restrict__ dinv, const T* __restrict__ x,
        const T* __restrict__ b, T* __restrict__ d, T c0, T c1, T c2, T* __restrict__ y,
        int rows) {
    DPS_PDL();
    if (x == nullptr && c0 == T(0)) {                     // the first step alone: no product
        for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n;
             row += gridDim.x * blockDim.x) {
            const T di = c2 * (dinv[row] * b[row]);
            d[row] = di;
            y[row] = di;
        }
        return;
    }
    auto step = [&](auto xv) {
        amg::vector_rows<T, W>(rows, n, indptr, indices, data, xv, [&](int row, T ax) {
            amg::cheb_step(row, [&](auto) { return ax; }, dinv, x, b, d, c0, c1, c2, y);
        });
    };
    if (x != nullptr)
        step(amg::gather<T>{x});
    else
        step(amg::gather_first<T>{dinv, b, c0});
}

// x += P xc; with s given, x = s .* b + P xc: the Jacobi pre-smoothing from zero, which the
// smoothed restriction (vc_restrict* over R (I - A S)) left unwritten, is added here (x unread)
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_prolong(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
           const T* __restrict__ data, const T* __restrict__ xc, const T* __restrict__ s,
           const T* __restrict__ b, T* __restrict__ x, int rows) {
    AMG_PDL(amg::csr_prefetch<W>(n, rows, indptr, indices, data));
    // two loops, not a select in one: s[row] * b[row] + px contracts as vc_prolong_low's does
    if (s != nullptr)
        amg::vector_rows<T, W>(rows, n, indptr, indices, data, amg::gather<T>{xc},
                               [&](int row, T px) { x[row] = s[row] * b[row] + px; });
    else
        amg::vector_rows<T, W>(rows, n, indptr, indices, data, amg::gather<T>{xc},
                               [&](int row, T px) { x[row] = x[row] + px; });
}

// The same on level 0 of a single-precision cycle with the casts fused (T the system's type, b
// of it; the rest single): x = s .* b + P xc, b cast where it is read
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_prolong_low(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
               const typename single_of<T>::type* __restrict__ data,
               const typename single_of<T>::type* __restrict__ xc,
               const typename single_of<T>::type* __restrict__ s, const T* __restrict__ b,
               typename single_of<T>::type* __restrict__ x, int rows) {
    AMG_PDL(amg::csr_prefetch<W>(n, rows, indptr, indices, data));
    using L = typename single_of<T>::type;
    amg::vector_rows<L, W>(rows, n, indptr, indices, data, amg::gather<L>{xc}, [&](int row, L px) {
        x[row] = s[row] * cast_to<L>(b[row]) + px;
    });
}

template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_restrict_scale(int nc, const int* __restrict__ indptr, const int* __restrict__ indices,
                  const T* __restrict__ data, const T* __restrict__ res, const T* __restrict__ sc,
                  T* __restrict__ bc, T* __restrict__ xc, int rows) {
    AMG_PDL(amg::csr_prefetch<W>(nc, rows, indptr, indices, data));
    amg::vector_rows<T, W>(rows, nc, indptr, indices, data, amg::gather<T>{res}, [&](int row, T r) {
        bc[row] = r;
        if (sc != nullptr) xc[row] = sc[row] * r;           // sc null: the restriction alone
    });
}

// vc_restrict_scale a block a row (device.RESTRICT_BLOCK_MEAN): the restriction into a level of
// few, long rows (into 3-D 160^3's coarsest level, 32 lanes a row kept 9 % of the warp slots
// busy, each lane 30-odd dependent gathers long): amg::block_row_sum.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_restrict_block(int nc, const int* __restrict__ indptr, const int* __restrict__ indices,
                  const T* __restrict__ data, const T* __restrict__ res, const T* __restrict__ sc,
                  T* __restrict__ bc, T* __restrict__ xc) {
    AMG_PDL(amg::block_prefetch_csr(nc, indptr, indices, data));
    __shared__ T smem[DPS_WARP];
    for (int row = blockIdx.x; row < nc; row += gridDim.x) {
        const T r = amg::block_row_sum(indptr[row], indptr[row + 1], smem, [&](int k) {
            return dps::ld_mat<true>(data + k) * res[dps::ld_mat<true>(indices + k)];
        });
        if (threadIdx.x == 0) {
            bc[row] = r;
            if (sc != nullptr) xc[row] = sc[row] * r;           // sc null: the restriction alone
        }
    }
}

// bc = R b with b of the system's type T cast where it is read, bc single: level 0's smoothed
// restriction in a single-precision cycle with the casts fused
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK, amg::full_sm<T>::value)
vc_restrict_low(int nc, const int* __restrict__ indptr, const int* __restrict__ indices,
                const typename single_of<T>::type* __restrict__ data, const T* __restrict__ b,
                typename single_of<T>::type* __restrict__ bc, int rows) {
    AMG_PDL(amg::csr_prefetch<W>(nc, rows, indptr, indices, data));
    using L = typename single_of<T>::type;
    amg::vector_rows<L, W>(rows, nc, indptr, indices, data,
                           [&](int c) { return cast_to<L>(b[c]); },
                           [&](int row, L r) { bc[row] = r; });
}

// Precision "half"'s rounding in one pass (reference.half_bits and half_values, float32 values
// only: T unused): h = float16(x * inv) rounded to nearest even, bits[i] = h and vals[i] =
// float(h) * scale, either output null. CuPy's multiply and casts took four passes. With `words`
// (16-bit column offsets in `offsets`, or else the offsets of the packed words `kept` over the
// same pattern): words[i] = offset << 16 | h, the packed layout amg::packed_sum reads.
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
half_round(int n, const float* __restrict__ x, float inv, float scale,
           unsigned short* __restrict__ bits, float* __restrict__ vals,
           const unsigned short* __restrict__ offsets, const unsigned int* __restrict__ kept,
           unsigned int* __restrict__ words) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned short h;
        const float v = x[i] * inv;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        if (bits != nullptr) bits[i] = h;
        if (words != nullptr)                                                 // amg::packed_sum
            words[i] = (offsets != nullptr ? (unsigned int)offsets[i] << 16
                                           : kept[i] & 0xFFFF0000u) | h;
        if (vals != nullptr) vals[i] = dps::half_to_float(h) * scale;
    }
}

// A block a row (grid: one block per row, grid-stride beyond; amg::block_row_sum over the
// row's columns). A warp a row, as first, kept one load a lane in flight: 2,009 rows (2-D
// 1024^2's coarsest, 16 MB in float32) took 12.4 us at 1.6 TB/s on an H200; a block a row with
// two loads a thread in flight 9.1 us (ncu).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_dense(int n, const T* __restrict__ minv, const T* __restrict__ b, T* __restrict__ y) {
    AMG_PDL(amg::block_prefetch(0, n, minv + (size_t)blockIdx.x * n, (const int*)nullptr));
    __shared__ T smem[DPS_WARP];
    for (int row = blockIdx.x; row < n; row += gridDim.x) {
        const T* __restrict__ m = minv + (size_t)row * n;
        const T sum = amg::block_row_sum(0, n, smem, [&](int k) { return m[k] * b[k]; });
        if (threadIdx.x == 0) y[row] = sum;
    }
}

// ---------------------------------------------------------------------------- level 0 in ELL

namespace vc {

// Level 0 in ELL, row by row, with b of type B cast to the cycle's type L where it is read (B = L:
// no cast), values of type V (L, or float16 bits: dps::mat_value) and each row's sum multiplied by
// `scale` (1, or precision "half"'s power of two). The fused pre-smoothing and residual:
// x = s .* b, res = b - A x (x gathered as s .* b).
template <typename L, typename B, typename V>
__device__ __forceinline__ void presmooth_residual_ell_row(int row, int n, int width,
                                                           const int* __restrict__ indices,
                                                           const V* __restrict__ data, L scale,
                                                           const L* __restrict__ s,
                                                           const B* __restrict__ b,
                                                           L* __restrict__ x,
                                                           L* __restrict__ res) {
    const L sum = amg::ell_sum<L>(row, n, width, indices, data,
                                  [&](int c) { return s[c] * cast_to<L>(b[c]); });
    const L br = cast_to<L>(b[row]);
    x[row] = s[row] * br;
    res[row] = br - scale * sum;
}

// the post-smoothing's Jacobi step: x + s .* (b - A x) at a row
template <typename L, typename B, typename V>
__device__ __forceinline__ L jacobi_ell_row(int row, int n, int width,
                                            const int* __restrict__ indices,
                                            const V* __restrict__ data, L scale,
                                            const L* __restrict__ s, const L* __restrict__ x,
                                            const B* __restrict__ b) {
    // one expression: with ax taken into a variable first (and no register bound), the float16
    // instantiation for a double b took 40 registers, not 32, and ran the 160^3 sweep in 150.8 us
    // rather than 75.8 (ncu, H200)
    return x[row] + s[row] * (cast_to<L>(b[row])
                              - scale * amg::ell_sum<L, AMG_SMOOTH_CHUNK>(row, n, width, indices,
                                                                          data, amg::gather<L>{x}));
}

}  // namespace vc

// Level 0 over the solve's ELL (or the cycle's float16 copy of it: HALF, times `scale`; PACKED:
// its words of offset and value, `indices` each 32 rows' base column: amg::ell_sum)
template <typename T, bool HALF, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK, amg::full_sm<T>::value)
vc_presmooth_residual_ell(int n, int width, const int* __restrict__ indices,
                          const amg::cycle_val<T, HALF, PACKED>* __restrict__ data, T scale,
                          const T* __restrict__ s, const T* __restrict__ b, T* __restrict__ x,
                          T* __restrict__ res) {
    DPS_PDL();
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        vc::presmooth_residual_ell_row<T, T>(row, n, width, indices, data, scale, s, b, x, res);
}

template <typename T, bool HALF, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK, amg::full_sm<T>::value)
vc_residual_ell(int n, int width, const int* __restrict__ indices,
                const amg::cycle_val<T, HALF, PACKED>* __restrict__ data, T scale,
                const T* __restrict__ x,
                const T* __restrict__ b, T* __restrict__ res) {
    DPS_PDL();
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        res[row] = b[row] - scale * amg::ell_sum<T>(row, n, width, indices, data,
                                                    amg::gather<T>{x});
}

template <typename T, bool HALF, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK, amg::full_sm<T>::value)
vc_jacobi_ell(int n, int width, const int* __restrict__ indices,
              const amg::cycle_val<T, HALF, PACKED>* __restrict__ data, T scale,
              const T* __restrict__ s,
              const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y) {
    DPS_PDL();
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        y[row] = vc::jacobi_ell_row<T, T>(row, n, width, indices, data, scale, s, x, b);
}

// a Chebyshev step from x, or (x null) the first two from zero (amg::cheb_step); the first
// alone reads no matrix: vc_cheb with x null and c0 = 0
template <typename T, bool HALF, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK, amg::full_sm<T>::value)
vc_cheb_ell(int n, int width, const int* __restrict__ indices,
            const amg::cycle_val<T, HALF, PACKED>* __restrict__ data, T scale,
            const T* __restrict__ dinv, const T* __restrict__ x, const T* __restrict__ b,
            T* __restrict__ d, T c0, T c1, T c2, T* __restrict__ y) {
    DPS_PDL();
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        amg::cheb_step(row, [&](auto xv) {
                           return scale * amg::ell_sum<T, amg::smooth_chunk<decltype(xv)>::value>(
                               row, n, width, indices, data, xv);
                       }, dinv, x, b, d, c0, c1, c2, y);
}

// Level 0 of a V-cycle run in single precision (AMG precision "auto" / "mixed" / "half"), on the
// solve's ELL with the pre-smoothing fused: vc_presmooth_residual_ell and vc_jacobi_ell over the
// single hierarchy (L), reading b and writing y in the system's precision T, the values of type
// V (L, or float16 bits under "half", times `scale`). vc_to_single and vc_from_single fused
// away: each b value is cast where it is read, y cast where it is written, so the values are
// those of the casts' path bit for bit, with two launches fewer and 2n (T + L) - 3n (T - L)
// bytes less.
template <typename T, bool HALF, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK, amg::full_sm<T>::value)
vc_presmooth_residual_ell_low(int n, int width, const int* __restrict__ indices,
                              const amg::cycle_val<typename single_of<T>::type, HALF, PACKED>* data,
                              typename single_of<T>::type scale,
                              const typename single_of<T>::type* __restrict__ s,
                              const T* __restrict__ b, typename single_of<T>::type* __restrict__ x,
                              typename single_of<T>::type* __restrict__ res) {
    DPS_PDL();
    using L = typename single_of<T>::type;
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        vc::presmooth_residual_ell_row<L, T>(row, n, width, indices, data, scale, s, b, x, res);
}

template <typename T, bool HALF, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK, amg::full_sm<T>::value)
vc_jacobi_ell_low(int n, int width, const int* __restrict__ indices,
                  const amg::cycle_val<typename single_of<T>::type, HALF, PACKED>* __restrict__
                      data,
                  typename single_of<T>::type scale,
                  const typename single_of<T>::type* __restrict__ s,
                  const typename single_of<T>::type* __restrict__ x, const T* __restrict__ b,
                  T* __restrict__ y) {
    DPS_PDL();
    using L = typename single_of<T>::type;
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        y[row] = cast_to<T>(vc::jacobi_ell_row<L, T>(row, n, width, indices, data, scale, s, x,
                                                     b));
}

// ---------------------------------------------------------------------------- levels in SELL-32

// SELL-32 with its rows sorted by length within windows of device.SELL_SIGMA rows (SELL-C-sigma):
// slot q of the layout holds row perm[q] (perm null: row q), so a slice's 32 rows are of like
// length and its padding small (2-D Poisson 1024^2, level 1: 1.31 slots an entry unsorted, 1.05
// at sigma 256). A row's entries keep their order in its slot: its sum is the same bits.
__device__ __forceinline__ int sell_row_of(const int* __restrict__ perm, int slot) {
    return perm != nullptr ? perm[slot] : slot;
}

// SELL-C-sigma's row order (device.sell_of): slot q of each window of `sigma` rows holds its
// rows longest first, ties in row order, as a stable sort by (window, -length) orders them; a row's
// slot is its window's start plus the count of the window's rows that are longer, or as long and
// before it (a warp's threads read the same row lengths: one load for the warp)
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
sell_order(int n, int sigma, const int* __restrict__ indptr, int* __restrict__ perm) {
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += gridDim.x * blockDim.x) {
        const int w0 = r - r % sigma, w1 = min(w0 + sigma, n);
        const int len = indptr[r + 1] - indptr[r];
        int rank = 0;
        for (int u = w0; u < w1; ++u) {
            const int lu = indptr[u + 1] - indptr[u];
            rank += (lu > len) || (lu == len && u < r);
        }
        perm[w0 + rank] = r;
    }
}

// sptr_next[s] = 32 x the longest row of slice s (the host's cumsum makes sptr from it)
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
sell_widths(int n, const int* __restrict__ indptr, const int* __restrict__ perm,
            int* __restrict__ sptr_next) {
    const int slices = (n + 31) / 32;
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < slices; s += gridDim.x * blockDim.x) {
        int w = 0;
        for (int q = 32 * s; q < 32 * s + 32 && q < n; ++q) {
            const int r = sell_row_of(perm, q);
            w = max(w, indptr[r + 1] - indptr[r]);
        }
        sptr_next[s] = 32 * w;
    }
}

// The SELL arrays of a CSR matrix over sptr: every slot of row r's column of its slice, the
// padding as index -1 and value 0, the last slice's slots past n all padding (never read; set so
// that two copies of one matrix are equal bit for bit); indices null: the values only (a numeric
// re-set-up).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
sell_fill(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
          const T* __restrict__ data, const int* __restrict__ perm, const int* __restrict__ sptr,
          int* __restrict__ idx, T* __restrict__ val) {
    const int slots = (n + 31) & ~31;
    for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < slots; q += gridDim.x * blockDim.x) {
        const int r = q < n ? sell_row_of(perm, q) : 0;
        const int begin = q < n ? indptr[r] : 0, len = q < n ? indptr[r + 1] - begin : 0;
        const int s = q >> 5, at0 = sptr[s] + (q & 31), width = (sptr[s + 1] - sptr[s]) >> 5;
        for (int k = 0; k < width; ++k) {
            const int at = at0 + 32 * k;
            if (indices != nullptr) idx[at] = k < len ? indices[begin + k] : -1;
            val[at] = k < len ? data[begin + k] : T(0);
        }
    }
}

// The narrow copy of a SELL-32 layout's int32 column indices (device.narrow), a warp per slice:
// slot q's entries are at sptr[q / 32] + q % 32 + 32 k over its slice's width. The slice's base
// is its least column, each entry stored as its column - base, padding (-1) as amg::NARROW_PAD;
// a slice whose columns span more than 0xFFFE is counted in `overflow` (the copy is then not
// used). Slots at or beyond n are padding whatever idx holds there (they are never read).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
narrow_index(int n, const int* __restrict__ sptr, const int* __restrict__ idx,
             unsigned short* __restrict__ out, int* __restrict__ base, int* __restrict__ overflow) {
    const int lane = threadIdx.x & 31, slices = (n + 31) / 32;
    for (int g = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < slices;
         g += (gridDim.x * blockDim.x) >> 5) {                         // uniform over the warp
        const int width = (sptr[g + 1] - sptr[g]) >> 5;
        const bool row = 32 * g + lane < n;
        for (int k = 0; !row && k < width; ++k)
            out[(size_t)(sptr[g] + lane) + 32 * (size_t)k] = (unsigned short)amg::NARROW_PAD;
        amg::narrow_group((size_t)(sptr[g] + lane), 32, row ? width : 0, idx, out, base + g,
                          overflow);
    }
}

// The narrow copy of level 0's ELL column indices (column-major: entry k of row r at k n + r)
// for the cycle's packed copy (device.DeviceHierarchy.use_ell), a warp per 32 rows: base[g] the
// least column of rows 32 g .. 32 g + 31, each entry its column - base, padding (-1)
// amg::NARROW_PAD; a group spanning more than 0xFFFE columns is counted in `overflow` (the copy
// is then not used).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
narrow_ell(int n, int width, const int* __restrict__ idx, unsigned short* __restrict__ out,
           int* __restrict__ base, int* __restrict__ overflow) {
    const int lane = threadIdx.x & 31, groups = (n + 31) / 32;
    for (int g = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < groups;
         g += (gridDim.x * blockDim.x) >> 5) {                         // uniform over the warp
        const int row = 32 * g + lane;
        amg::narrow_group((size_t)row, (size_t)n, row < n ? width : 0, idx, out, base + g,
                          overflow);
    }
}

// the slots q of a level's n rows, grid-stride, each with its row (sell_row_of)
#define DPS_ROWS(n)                                                                              \
    for (int q = blockIdx.x * blockDim.x + threadIdx.x, row = 0;                                 \
         q < (n) && ((row = sell_row_of(perm, q)), true); q += gridDim.x * blockDim.x)

// The V-cycle over SELL copies, values of type V (T, or float16 bits with V = unsigned short:
// dps::mat_value), each row's sum multiplied by `scale` (1, or the matrix's power of two 2^e of
// precision "half": exact); indices of type amg::col_t<NARROW> (NARROW: offsets from the
// slice's base[q / 32], device.narrow; base unread otherwise). SELL_ARGS: those parameters.
#define SELL_ARGS                                                                                \
    const int* __restrict__ sptr, const amg::col_t<NARROW>* __restrict__ idx,                    \
        const int* __restrict__ base

template <typename T, bool HALF, bool NARROW, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_presmooth_residual_sell(int n, SELL_ARGS,
                           const amg::cycle_val<T, HALF, PACKED>* __restrict__ val, T scale,
                           const int* __restrict__ perm,
                           const T* __restrict__ s, const T* __restrict__ b, T* __restrict__ x,
                           T* __restrict__ res) {
    AMG_PDL(amg::sell_prefetch<AMG_ROW_CHUNK>(n, sptr, idx, base, val, perm));
    DPS_ROWS(n) {
        const T sum = amg::sell_row<T, NARROW>(q, sptr, idx, base, val,
                                               [&](int c) { return s[c] * b[c]; });
        x[row] = s[row] * b[row];
        res[row] = b[row] - scale * sum;
    }
}

template <typename T, bool HALF, bool NARROW, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_residual_sell(int n, SELL_ARGS,
                 const amg::cycle_val<T, HALF, PACKED>* __restrict__ val, T scale,
                 const int* __restrict__ perm,
                 const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ res) {
    AMG_PDL(amg::sell_prefetch<AMG_ROW_CHUNK>(n, sptr, idx, base, val, perm));
    DPS_ROWS(n) {
        res[row] = b[row] - scale * amg::sell_row<T, NARROW>(q, sptr, idx, base, val,
                                                             amg::gather<T>{x});
    }
}

template <typename T, bool HALF, bool NARROW, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_jacobi_sell(int n, SELL_ARGS,
               const amg::cycle_val<T, HALF, PACKED>* __restrict__ val, T scale,
               const int* __restrict__ perm,
               const T* __restrict__ s, const T* __restrict__ x, const T* __restrict__ b,
               T* __restrict__ y) {
    AMG_PDL(amg::sell_prefetch<AMG_ROW_CHUNK>(n, sptr, idx, base, val, perm));
    DPS_ROWS(n) {
        const T ax = scale * amg::sell_row<T, NARROW, AMG_SMOOTH_CHUNK>(q, sptr, idx, base, val,
                                                                         amg::gather<T>{x});
        y[row] = x[row] + s[row] * (b[row] - ax);
    }
}

template <typename T, bool HALF, bool NARROW, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_cheb_sell(int n, SELL_ARGS,
             const amg::cycle_val<T, HALF, PACKED>* __restrict__ val, T scale,
             const int* __restrict__ perm,
             const T* __restrict__ dinv, const T* __restrict__ x, const T* __restrict__ b,
             T* __restrict__ d, T c0, T c1, T c2, T* __restrict__ y) {
    AMG_PDL(amg::sell_prefetch<AMG_ROW_CHUNK>(n, sptr, idx, base, val, perm));
    DPS_ROWS(n) {
        amg::cheb_step(row, [&](auto xv) {
                           return scale * amg::sell_row<T, NARROW,
                                                        amg::smooth_chunk<decltype(xv)>::value>(
                               q, sptr, idx, base, val, xv);
                       }, dinv, x, b, d, c0, c1, c2, y);
    }
}

// bc = R res over R's nc rows, and xc = sc .* bc where sc is given (vc_restrict_scale's fusion)
template <typename T, bool HALF, bool NARROW, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_restrict_sell(int nc, SELL_ARGS,
                 const amg::cycle_val<T, HALF, PACKED>* __restrict__ val, T scale,
                 const int* __restrict__ perm,
                 const T* __restrict__ res, const T* __restrict__ sc, T* __restrict__ bc,
                 T* __restrict__ xc) {
    AMG_PDL(amg::sell_prefetch<AMG_ROW_CHUNK>(nc, sptr, idx, base, val, perm));
    DPS_ROWS(nc) {
        const T r = scale * amg::sell_row<T, NARROW>(q, sptr, idx, base, val, amg::gather<T>{res});
        bc[row] = r;
        if (sc != nullptr) xc[row] = sc[row] * r;
    }
}

// bc = R b over R's nc rows, b of the system's type T cast where it is read (vc_restrict_low)
template <typename T, bool HALF, bool NARROW, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_restrict_sell_low(int nc, SELL_ARGS,
                     const amg::cycle_val<typename single_of<T>::type, HALF, PACKED>* __restrict__
                         val,
                     typename single_of<T>::type scale, const int* __restrict__ perm,
                     const T* __restrict__ b, typename single_of<T>::type* __restrict__ bc) {
    AMG_PDL(amg::sell_prefetch<AMG_ROW_CHUNK>(nc, sptr, idx, base, val, perm));
    using L = typename single_of<T>::type;
    DPS_ROWS(nc) {
        bc[row] = scale * amg::sell_row<L, NARROW>(q, sptr, idx, base, val,
                                                   [&](int c) { return cast_to<L>(b[c]); });
    }
}

// x += P xc, or with s given x = s .* b + P xc (vc_prolong)
template <typename T, bool HALF, bool NARROW, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_prolong_sell(int n, SELL_ARGS,
                const amg::cycle_val<T, HALF, PACKED>* __restrict__ val, T scale,
                const int* __restrict__ perm, const T* __restrict__ xc, const T* __restrict__ s,
                const T* __restrict__ b, T* __restrict__ x) {
    AMG_PDL(amg::sell_prefetch<AMG_ROW_CHUNK>(n, sptr, idx, base, val, perm));
    if (s != nullptr) {              // two loops, as vc_prolong's
        DPS_ROWS(n) {
            const T px = scale * amg::sell_row<T, NARROW>(q, sptr, idx, base, val,
                                                          amg::gather<T>{xc});
            x[row] = s[row] * b[row] + px;
        }
    } else {
        DPS_ROWS(n) {
            x[row] = x[row] + scale * amg::sell_row<T, NARROW>(q, sptr, idx, base, val,
                                                               amg::gather<T>{xc});
        }
    }
}

// x = s .* b + P xc with b of the system's type (vc_prolong_low)
template <typename T, bool HALF, bool NARROW, bool PACKED = false>
__global__ void __launch_bounds__(DPS_BLOCK)
vc_prolong_sell_low(int n, SELL_ARGS,
                    const amg::cycle_val<typename single_of<T>::type, HALF, PACKED>* __restrict__
                        val,
                    typename single_of<T>::type scale, const int* __restrict__ perm,
                    const typename single_of<T>::type* __restrict__ xc,
                    const typename single_of<T>::type* __restrict__ s, const T* __restrict__ b,
                    typename single_of<T>::type* __restrict__ x) {
    AMG_PDL(amg::sell_prefetch<AMG_ROW_CHUNK>(n, sptr, idx, base, val, perm));
    using L = typename single_of<T>::type;
    DPS_ROWS(n) {
        const L px = scale * amg::sell_row<L, NARROW>(q, sptr, idx, base, val, amg::gather<L>{xc});
        x[row] = s[row] * cast_to<L>(b[row]) + px;
    }
}

#undef SELL_ARGS
#undef DPS_ROWS
