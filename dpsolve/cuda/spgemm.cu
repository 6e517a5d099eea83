// spgemm.cu - C = A B for CSR matrices, row by row with a hash table per row (the AMG set-up's
// products A T, A P and R (A P): dpsolve/precond/amg/device.py's ``spgemm``). Replaces cuSPARSE's
// SpGEMM, which on CUDA 13 / CuPy 14.2 returned wrong products and faulted (issue 30).
//
//   spgemm_bound<T>    the row's table size tsize_i: the power of two >= 2 bound_i, at least 32,
//                      bound_i = sum over A's row i of the lengths of the B rows it names (the
//                      products of row i: at least its output length); overflow_i = 1 where a
//                      narrow C's row (dense_cols: C's columns, or 0 on a wide C) is a dense row
//                      at once (tsize_i > shared_slots and >= dense_cols), else 0
//   spgemm_rows<T, 0>  symbolic: count_i = the distinct columns of row i of C
//   spgemm_rows<T, 1>  numeric: row i of C, its columns sorted, into C's arrays at c_ptr[i]
//   spgemm_pattern<T>  numeric over a known pattern (c_ptr, c_idx sorted: a re-set-up after
//                      PreparedSystem.update keeps every level's pattern): c_val over it, each
//                      product's place by binary search in its row; a product whose column is
//                      not in the row is counted (missing), and the caller makes the product anew
//   spgemm_pattern_dense<T>  the same for a narrow C, each warp's row dense in shared memory
//                      (values and a pattern mark per column, as spgemm_dense_shared): no search
//
//   spgemm_rows_small<T, N>  spgemm_rows' shared mode for the rows of tsize_i <=
//                      SPGEMM_SMALL_SLOTS (at most 64 products: AMG's A T and A P on level 0,
//                      rows of 5-7 entries times 1-4), SPGEMM_SMALL_LANES (8) lanes a row, four
//                      rows a warp; spgemm_rows then skips them (its small_slots argument). A
//                      warp a row left 24-31 of its lanes idle there: A T and A P took 2.5-2.8
//                      ms each at 3-D 100^3.
//   spgemm_pattern_small<T>  spgemm_pattern with SPGEMM_SMALL_LANES lanes a row, for products
//                      of few entries a row (the host's choice)
//
// One warp per row, with a hash table (keys: columns, -1 empty; values). Three modes:
// * shared (g_off, d_flags null): every row (or every row not flagged), its table in shared
//   memory, min(tsize_i, SPGEMM_SHARED_SLOTS) slots. A row whose distinct columns do not fit is
//   flagged (overflow_i = 1) and left for one of
// * dense (d_flags given; C of at most device.SPGEMM_DENSE_MAX_COLS columns, whose rows of a
//   table larger than the shared one the host flags at once): the rows listed in `rows`, each
//   warp with a dense row of C in global scratch (d_flags, d_vals: ncols slots a warp), column c
//   at slot c; slot c holds row i's entry when d_flags[c] is row i's stamp (i in
//   the symbolic pass, -2 - i in the numeric one: the scratch, -1 at first, is never reset). The
//   numeric pass reads the row out in column order, a ballot per 32 columns: no hashing and no
//   sort. On AMG's last levels (C of a few thousand columns, rows of ~1,000 entries) the hash
//   tables of the global mode took 24 ms for one product at 160^3.
// * dense in shared memory (spgemm_dense_shared<T, NUMERIC>): the dense mode with each warp's
//   dense row in dynamic shared memory (ncols values, then ncols flags, a warp) where it fits
//   (device.SPGEMM_SHARED_DENSE_BYTES): no stamps (the warp clears its flags per row), and each
//   step of the walk at shared-memory latency instead of L2's. AMG's narrow products are chains
//   of such steps on a few hundred warps: R (A P) at 3-D 100^3, 573 rows of ~550 steps into 573
//   columns, took 4.4 ms with its dense rows in global scratch.
// * global (g_off given): the rows listed in `rows`, each with tsize_i slots of global scratch at
//   g_off[r] (tsize_i >= bound_i: it cannot fill), for a C too wide for dense rows.
// The hash tables and the searched rows (spgemm_pattern*) take the row's products 32 (or 8) at a
// time over the lanes, in A's order (walk_flat), the products that meet on one column summed in
// lane order (add_in_order); the dense rows take B's row k's distinct columns over the lanes, one
// A entry k a step, each step ending with __syncwarp (walk_row). Either way c_ij = sum over k, in
// A's column order, of a_ik * b_kj, each product rounded on its own (mul_rn): SciPy's csr_matmat
// sums in the same order, and the result does not depend on where the hash put an entry -- the
// same bits every run. The flat walk took the set-up from 79.2 to 72.4 ms at 3-D 160^3 (H200,
// benchmarks/spgemm-flat-ab-2026-12-03.py).
#include <dpsolve/common.cuh>

#define SPGEMM_SHARED_SLOTS 512
#define SPGEMM_BLOCK 128           // 4 warps: 4 x 512 slots of int + complex128 = 40 KB
#define SPGEMM_WARPS (SPGEMM_BLOCK / DPS_WARP)
#define SPGEMM_SMALL_LANES 8       // lanes a row of spgemm_rows_small / spgemm_pattern_small
#define SPGEMM_SMALL_SLOTS 128     // a small row's table (tsize_i <= 128: <= 64 products)
#define SPGEMM_SMALL_GROUPS (SPGEMM_BLOCK / SPGEMM_SMALL_LANES)

namespace spgemm {

__device__ __forceinline__ int table_size(int bound) {
    int ts = 32;
    while (ts < 2 * bound && ts < (1 << 30)) ts <<= 1;
    return ts;
}

__device__ __forceinline__ unsigned slot_of(int col, int ts) {
    return ((unsigned)col * 2654435761u) & (unsigned)(ts - 1);
}

// the slot of `col` in the table, inserting it (`fresh`: this call did); -1 when the table is
// full (after ts probes)
__device__ __forceinline__ int insert(int* keys, int ts, int col, bool& fresh) {
    unsigned h = slot_of(col, ts);
    for (int probe = 0; probe < ts; ++probe) {
        const int prev = atomicCAS(keys + h, -1, col);
        if (prev == -1) { fresh = true; return (int)h; }
        if (prev == col) { fresh = false; return (int)h; }
        h = (h + 1) & (unsigned)(ts - 1);
    }
    fresh = false;
    return -1;
}

// One entry of A's row for the warp's prefetch: this lane's entry p (< a_end) gives the range
// [start, end) of B's row a_idx[p] and, with VALUES, a_ik; past the row's end an empty range.
template <bool VALUES, typename T>
__device__ __forceinline__ void a_entry(int p, int a_end, const int* __restrict__ a_idx,
                                        const T* __restrict__ a_val,
                                        const int* __restrict__ b_ptr, int& start, int& end,
                                        T& a) {
    start = end = 0;
    a = T(0);
    if (p < a_end) {
        const int k = a_idx[p];
        start = b_ptr[k];
        end = b_ptr[k + 1];
        if (VALUES) a = a_val[p];
    }
}

// the value of lane `src` of the caller's segment of `width` lanes (a warp: width 32), real or
// complex
template <typename T> __device__ __forceinline__ T shfl_seg(T v, int src, int width) {
    return __shfl_sync(DPS_FULL_MASK, v, src, width);
}
template <typename R>
__device__ __forceinline__ dps::complex<R> shfl_seg(dps::complex<R> v, int src, int width) {
    return {__shfl_sync(DPS_FULL_MASK, v.re, src, width),
            __shfl_sync(DPS_FULL_MASK, v.im, src, width)};
}

// Calls visit(j, a) for the entries j of the B rows that row i of A names, in A's order, a_ik in
// a (VALUES; else T(0)): A's row 32 entries at a time, each lane loading one entry's B range and
// a_ik, then the warp takes them in order, broadcast by shuffles, a step a B row. The lanes take
// distinct j of one B row (distinct columns: no two lanes of a step touch one slot) and each B
// row ends with __syncwarp, which orders the steps' memory. The dense rows' walk (long B rows);
// the hash tables and the searched rows take walk_flat.
template <bool VALUES, typename T, typename V>
__device__ __forceinline__ void walk_row(int i, int lane, const int* __restrict__ a_ptr,
                                         const int* __restrict__ a_idx,
                                         const T* __restrict__ a_val,
                                         const int* __restrict__ b_ptr, V visit) {
    const int a_end = a_ptr[i + 1];
    for (int p0 = a_ptr[i]; p0 < a_end; p0 += DPS_WARP) {
        int start, end;
        T a_mine;
        a_entry<VALUES>(p0 + lane, a_end, a_idx, a_val, b_ptr, start, end, a_mine);
        const int steps = a_end - p0 < DPS_WARP ? a_end - p0 : DPS_WARP;
        for (int t = 0; t < steps; ++t) {
            const int j_begin = __shfl_sync(DPS_FULL_MASK, start, t);
            const int j_end = __shfl_sync(DPS_FULL_MASK, end, t);
            const T a = VALUES ? shfl_seg(a_mine, t, DPS_WARP) : T(0);
            for (int j = j_begin + lane; j < j_end; j += DPS_WARP) visit(j, a);
            __syncwarp();
        }
    }
}

// Compacts the occupied slots (key >= 0) of a row's table of ts slots to its front, in slot
// order, and returns their number: G lanes a row (lane: within the row's group, seg: the group's
// first lane in the warp), widest the largest ts among the warp's rows (the loop is uniform).
template <int G, typename T>
__device__ __forceinline__ int compact(int lane, int seg, int ts, int widest, int* keys,
                                      T* vals) {
    int c = 0;
    for (int b0 = 0; b0 < widest; b0 += G) {
        const int s = b0 + lane;
        const int key = s < ts ? keys[s] : -1;
        const T val = key >= 0 ? vals[s] : T(0);
        unsigned occ = __ballot_sync(DPS_FULL_MASK, key >= 0);
        if (G < DPS_WARP) occ = (occ >> seg) & ((1u << (G % DPS_WARP)) - 1u);
        __syncwarp();
        if (key >= 0) {
            const int at = c + __popc(occ & ((1u << lane) - 1u));
            keys[at] = key;
            vals[at] = val;
        }
        c += __popc(occ);
        __syncwarp();
    }
    return c;
}

// The c entries compacted to the front of a row's table (keys, vals) into C's row at out, each
// at its rank (the number of the row's columns below its own); lanes lane, lane + stride, ...
template <typename T>
__device__ __forceinline__ void place_by_rank(int lane, int stride, int c, const int* keys,
                                              const T* vals, int out, int* __restrict__ c_idx,
                                              T* __restrict__ c_val) {
    for (int e = lane; e < c; e += stride) {
        const int key = keys[e];
        int rank = 0;
        for (int f = 0; f < c; ++f) rank += keys[f] < key;
        c_idx[out + rank] = key;
        c_val[out + rank] = vals[e];
    }
}

// Row i of C = A B as a dense row of ncols slots, by a warp: flags[col] == stamp marks the row's
// columns (any other value: not yet; the caller makes it so for its rows), vals[col] their sums,
// in walk_row's order. The symbolic pass (NUMERIC 0) writes count[i], the numeric one the row
// in column order at c_ptr[i] (a ballot over 32 columns at a time). Ends with __syncwarp.
template <int NUMERIC, typename T>
__device__ __forceinline__ void dense_row(int i, int lane, int stamp, int* flags, T* vals,
                                          int ncols, const int* __restrict__ a_ptr,
                                          const int* __restrict__ a_idx,
                                          const T* __restrict__ a_val,
                                          const int* __restrict__ b_ptr,
                                          const int* __restrict__ b_idx,
                                          const T* __restrict__ b_val, int* __restrict__ count,
                                          const int* __restrict__ c_ptr, int* __restrict__ c_idx,
                                          T* __restrict__ c_val) {
    int fresh_count = 0;
    walk_row<NUMERIC != 0>(i, lane, a_ptr, a_idx, a_val, b_ptr, [&](int j, T a) {
        const int col = b_idx[j];
        const bool fresh = flags[col] != stamp;
        if (fresh) flags[col] = stamp;
        fresh_count += fresh;
        if (NUMERIC) {
            const T prod = dps::mul_rn(a, b_val[j]);
            vals[col] = fresh ? prod : vals[col] + prod;
        }
        return true;
    });
    if (!NUMERIC) {
        fresh_count = dps::warp_sum(fresh_count);
        if (lane == 0) count[i] = fresh_count;
        __syncwarp();
        return;
    }
    int out = c_ptr[i];                                  // the row, in column order
    for (int base = 0; base < ncols; base += DPS_WARP) {
        const int col = base + lane;
        const bool here = col < ncols && flags[col] == stamp;
        const unsigned occ = __ballot_sync(DPS_FULL_MASK, here);
        if (here) {
            const int at = out + __popc(occ & ((1u << lane) - 1u));
            c_idx[at] = col;
            c_val[at] = vals[col];
        }
        out += __popc(occ);
    }
    __syncwarp();
}

// The warp's lanes below this one (a ballot's bits for them)
__device__ __forceinline__ unsigned lanes_below() {
    unsigned m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}

// Calls visit for a row's products spread over the lanes: G lanes a row (a warp, G = 32, or a
// group, 32 / G rows a warp). A's entries [a_begin, a_end) are taken G at a time, the lengths of
// their B rows scanned over the group; then their products, in A's order, G to a window, lane l
// of the group taking the window's product l (its entry found by a binary search of the scan).
// AMG's B rows (P's, (A P)'s) hold 1-10 entries: a step a B row (walk_row) left most lanes idle
// and chained a load, an insert and a __syncwarp for every A entry. visit(j, a, active) is called
// by every lane of the warp, converged, once a window (active: the lane has a product, B's entry
// j times a = a_ik); it orders the updates that meet on one column by lane (add_in_order), so
// each sum takes its products in A's column order. With CAN_FAIL, visit returns true where its
// table is full, and the walk ends for the warp (returns true); else it returns false.
template <int G, bool VALUES, bool CAN_FAIL, typename T, typename V>
__device__ __forceinline__ bool walk_flat(int a_begin, int a_end, int lane,
                                          const int* __restrict__ a_idx,
                                          const T* __restrict__ a_val,
                                          const int* __restrict__ b_ptr, V visit) {
    const int len = a_end - a_begin;
    int longest = len;
#pragma unroll
    for (int off = DPS_WARP / 2; off >= G; off >>= 1)
        longest = max(longest, __shfl_xor_sync(DPS_FULL_MASK, longest, off));
    for (int p0 = 0; p0 < longest; p0 += G) {
        int start, end;
        T a_mine;
        a_entry<VALUES>(a_begin + p0 + lane, a_end, a_idx, a_val, b_ptr, start, end, a_mine);
        const int count = end - start;
        int upto = count;                          // inclusive scan of the B rows' lengths
#pragma unroll
        for (int off = 1; off < G; off <<= 1) {
            const int y = __shfl_up_sync(DPS_FULL_MASK, upto, off, G);
            if (lane >= off) upto += y;
        }
        const int before = upto - count;           // this entry's first product
        const int total = __shfl_sync(DPS_FULL_MASK, upto, G - 1, G);
        int widest = total;
#pragma unroll
        for (int off = DPS_WARP / 2; off >= G; off >>= 1)
            widest = max(widest, __shfl_xor_sync(DPS_FULL_MASK, widest, off));
        for (int f0 = 0; f0 < widest; f0 += G) {
            const int f = f0 + lane;
            int t = 0;                             // the entry of product f: upto_t > f first
#pragma unroll
            for (int step = G / 2; step >= 1; step >>= 1)
                if (__shfl_sync(DPS_FULL_MASK, upto, t + step - 1, G) <= f) t += step;
            const int j = __shfl_sync(DPS_FULL_MASK, start, t, G) + f -
                          __shfl_sync(DPS_FULL_MASK, before, t, G);
            const T a = VALUES ? shfl_seg(a_mine, t, G) : T(0);
            const bool failed = visit(j, a, f < total);
            if (CAN_FAIL && __any_sync(DPS_FULL_MASK, failed)) return true;     // uniform
        }
    }
    return false;
}

// vals[slot] (+)= prod on the lanes that `take`, called by the whole warp: lanes of one slot
// (within a group of G lanes: each group has its own table) in lane order, the lowest first, one
// round each; the first stores prod instead of adding it where any of them is `fresh` (the
// slot's first product). Ends with __syncwarp.
template <int G, typename T>
__device__ __forceinline__ void add_in_order(bool take, int slot, bool fresh, T prod, T* vals) {
    const int wl = threadIdx.x % DPS_WARP;
    const unsigned group = G == DPS_WARP ? DPS_FULL_MASK
                                         : ((1u << (G % DPS_WARP)) - 1u) << (wl & ~(G - 1));
    const unsigned peers = __match_any_sync(DPS_FULL_MASK, take ? slot : -1) & group;
    const unsigned fresh_bits = __ballot_sync(DPS_FULL_MASK, take && fresh);
    const int rank = __popc(peers & lanes_below());
    const int rounds = __reduce_max_sync(DPS_FULL_MASK, take ? rank + 1 : 0);
    for (int r = 0; r < rounds; ++r) {
        if (take && rank == r)
            vals[slot] = r == 0 && (fresh_bits & peers) ? prod : vals[slot] + prod;
        __syncwarp();
    }
}

}  // namespace spgemm

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
spgemm_bound(int m, const int* __restrict__ a_ptr, const int* __restrict__ a_idx,
             const int* __restrict__ b_ptr, int* __restrict__ tsize, int* __restrict__ overflow,
             int shared_slots, int dense_cols) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += gridDim.x * blockDim.x) {
        long long s = 0;
        for (int p = a_ptr[i]; p < a_ptr[i + 1]; ++p) {
            const int k = a_idx[p];
            s += b_ptr[k + 1] - b_ptr[k];
        }
        const int t = spgemm::table_size(s > (1 << 29) ? (1 << 29) : (int)s);
        tsize[i] = t;
        overflow[i] = dense_cols > 0 && t > shared_slots && t >= dense_cols;
    }
}

// NUMERIC 0: count[i] = row i's distinct columns. NUMERIC 1: row i written at c_ptr[i].
// small_slots: rows of tsize_i at most this are spgemm_rows_small's (0: none; shared mode only).
// Shared mode (g_off, d_flags null): rows 0..m-1 but those already flagged (overflow[i]: by the
// host, for rows it sends to the dense mode at once, or by the symbolic pass), overflow[i] set
// for a row that does not fit. Global mode (g_off) and dense
// mode (d_flags: ncols slots a warp): the m rows rows[0..m-1].
template <typename T, int NUMERIC>
__global__ void __launch_bounds__(SPGEMM_BLOCK)
spgemm_rows(int m, const int* __restrict__ rows, const int* __restrict__ a_ptr,
            const int* __restrict__ a_idx, const T* __restrict__ a_val,
            const int* __restrict__ b_ptr, const int* __restrict__ b_idx,
            const T* __restrict__ b_val, const int* __restrict__ tsize,
            const long long* __restrict__ g_off, int* __restrict__ g_keys, T* __restrict__ g_vals,
            int ncols, int* __restrict__ d_flags, T* __restrict__ d_vals,
            int* __restrict__ overflow, int* __restrict__ count, const int* __restrict__ c_ptr,
            int* __restrict__ c_idx, T* __restrict__ c_val, int small_slots) {
    __shared__ int s_keys[SPGEMM_WARPS][SPGEMM_SHARED_SLOTS];
    __shared__ T s_vals[NUMERIC ? SPGEMM_WARPS : 1][NUMERIC ? SPGEMM_SHARED_SLOTS : 1];
    const int lane = threadIdx.x % DPS_WARP, w = threadIdx.x / DPS_WARP;
    const int warps = gridDim.x * SPGEMM_WARPS;
    const bool global = g_off != nullptr, dense = d_flags != nullptr;
    if (dense) {
        const size_t mine = (size_t)(blockIdx.x * SPGEMM_WARPS + w) * ncols;
        int* flags = d_flags + mine;
        T* vals = NUMERIC ? d_vals + mine : nullptr;
        for (int r = blockIdx.x * SPGEMM_WARPS + w; r < m; r += warps) {   // uniform per warp
            const int i = rows[r];                       // a stamp no other row or pass uses
            spgemm::dense_row<NUMERIC>(i, lane, NUMERIC ? -2 - i : i, flags, vals, ncols, a_ptr,
                                       a_idx, a_val, b_ptr, b_idx, b_val, count, c_ptr, c_idx,
                                       c_val);
        }
        return;
    }
    for (int r = blockIdx.x * SPGEMM_WARPS + w; r < m; r += warps) {       // uniform per warp
        const int i = global ? rows[r] : r;
        if (!global && overflow[i]) continue;      // flagged: by the host, or by the symbolic pass
        if (!global && tsize[i] <= small_slots) continue;      // spgemm_rows_small's row
        int ts = tsize[i];
        int* keys;
        T* vals;
        if (global) {
            keys = g_keys + g_off[r];
            vals = NUMERIC ? g_vals + g_off[r] : nullptr;
        } else {
            ts = ts < SPGEMM_SHARED_SLOTS ? ts : SPGEMM_SHARED_SLOTS;
            keys = s_keys[w];
            vals = NUMERIC ? s_vals[w] : nullptr;
        }
        for (int s = lane; s < ts; s += DPS_WARP) keys[s] = -1;
        __syncwarp();
        int fresh_count = 0;
        const bool full = spgemm::walk_flat<DPS_WARP, NUMERIC != 0, true>(
            a_ptr[i], a_ptr[i + 1], lane, a_idx, a_val, b_ptr, [&](int j, T a, bool active) {
                bool fresh = false;
                const int slot = active ? spgemm::insert(keys, ts, b_idx[j], fresh) : -1;
                fresh_count += fresh;
                if (NUMERIC)
                    spgemm::add_in_order<DPS_WARP>(slot >= 0, slot, fresh,
                                                   slot >= 0 ? dps::mul_rn(a, b_val[j]) : T(0),
                                                   vals);
                return active && slot < 0;
            });
        if (full) {                             // shared mode only: the global tables fit
            if (lane == 0) overflow[i] = 1;
            __syncwarp();
            continue;
        }
        if (!NUMERIC) {
            fresh_count = dps::warp_sum(fresh_count);
            if (lane == 0) count[i] = fresh_count;
            __syncwarp();
            continue;
        }
        // compact the occupied slots to the table's front (in slot order), then each entry's
        // place in the row is the number of columns below its own
        const int c = spgemm::compact<DPS_WARP>(lane, 0, ts, ts, keys, vals);
        spgemm::place_by_rank(lane, DPS_WARP, c, keys, vals, c_ptr[i], c_idx, c_val);
        __syncwarp();
    }
}

// The dense mode in shared memory (see the header): rows[0..m-1], a warp a row, blockDim.x / 32
// warps a block, each with ncols values and ncols flags of the dynamic shared memory.
template <typename T, int NUMERIC>
__global__ void __launch_bounds__(SPGEMM_BLOCK)
spgemm_dense_shared(int m, const int* __restrict__ rows, const int* __restrict__ a_ptr,
                    const int* __restrict__ a_idx, const T* __restrict__ a_val,
                    const int* __restrict__ b_ptr, const int* __restrict__ b_idx,
                    const T* __restrict__ b_val, int ncols, int* __restrict__ count,
                    const int* __restrict__ c_ptr, int* __restrict__ c_idx,
                    T* __restrict__ c_val) {
    extern __shared__ __align__(16) unsigned char dense_smem[];
    const int lane = threadIdx.x % DPS_WARP, w = threadIdx.x / DPS_WARP;
    const int per_block = blockDim.x / DPS_WARP;
    T* vals = reinterpret_cast<T*>(dense_smem) + (size_t)w * ncols;
    int* flags =
        reinterpret_cast<int*>(reinterpret_cast<T*>(dense_smem) + (size_t)per_block * ncols) +
        (size_t)w * ncols;
    for (int r = blockIdx.x * per_block + w; r < m; r += gridDim.x * per_block) {   // per warp
        const int i = rows[r];
        for (int c = lane; c < ncols; c += DPS_WARP) flags[c] = 0;
        __syncwarp();
        spgemm::dense_row<NUMERIC>(i, lane, 1, flags, vals, ncols, a_ptr, a_idx, a_val, b_ptr,
                                   b_idx, b_val, count, c_ptr, c_idx, c_val);
    }
}

// spgemm_rows' shared mode for the rows of tsize_i <= small_slots (<= SPGEMM_SMALL_SLOTS), a
// group of SPGEMM_SMALL_LANES lanes a row with a table of tsize_i slots (>= 2 x its products: it
// cannot fill). The same inserts, in the same order, and the same read-out as spgemm_rows.
template <typename T, int NUMERIC>
__global__ void __launch_bounds__(SPGEMM_BLOCK)
spgemm_rows_small(int m, const int* __restrict__ a_ptr, const int* __restrict__ a_idx,
                  const T* __restrict__ a_val, const int* __restrict__ b_ptr,
                  const int* __restrict__ b_idx, const T* __restrict__ b_val,
                  const int* __restrict__ tsize, int* __restrict__ count,
                  const int* __restrict__ c_ptr, int* __restrict__ c_idx,
                  T* __restrict__ c_val, int small_slots) {
    constexpr int G = SPGEMM_SMALL_LANES;
    __shared__ int s_keys[SPGEMM_SMALL_GROUPS][SPGEMM_SMALL_SLOTS];
    __shared__ T s_vals[NUMERIC ? SPGEMM_SMALL_GROUPS : 1][NUMERIC ? SPGEMM_SMALL_SLOTS : 1];
    const int lane = threadIdx.x % G, group = threadIdx.x / G;
    const int seg = (threadIdx.x % DPS_WARP) & ~(G - 1);         // the group's first warp lane
    int* keys = s_keys[group];
    T* vals = NUMERIC ? s_vals[group] : nullptr;
    const int groups = gridDim.x * SPGEMM_SMALL_GROUPS;
    for (int base = blockIdx.x * SPGEMM_SMALL_GROUPS; base < m; base += groups) {   // uniform
        const int i = base + group;
        const int ts = i < m && tsize[i] <= small_slots ? tsize[i] : 0;          // 0: not ours
        for (int s = lane; s < ts; s += G) keys[s] = -1;
        __syncwarp();
        int fresh_count = 0;
        spgemm::walk_flat<G, NUMERIC != 0, false>(ts ? a_ptr[i] : 0, ts ? a_ptr[i + 1] : 0, lane,
                                                  a_idx, a_val, b_ptr,
                                                  [&](int j, T a, bool active) {
            bool fresh = false;
            const int slot = active ? spgemm::insert(keys, ts, b_idx[j], fresh) : -1;
            fresh_count += fresh;
            if (NUMERIC)
                spgemm::add_in_order<G>(slot >= 0, slot, fresh,
                                        slot >= 0 ? dps::mul_rn(a, b_val[j]) : T(0), vals);
            return false;
        });
        if (!NUMERIC) {
            fresh_count = dps::group_sum<int, G>(fresh_count);
            if (lane == 0 && ts) count[i] = fresh_count;
            __syncwarp();
            continue;
        }
        int widest = ts;                               // the warp's largest table: uniform loop
#pragma unroll
        for (int off = DPS_WARP / 2; off >= G; off >>= 1)
            widest = max(widest, __shfl_xor_sync(DPS_FULL_MASK, widest, off));
        const int c = spgemm::compact<G>(lane, seg, ts, widest, keys, vals);   // as spgemm_rows
        if (ts) spgemm::place_by_rank(lane, G, c, keys, vals, c_ptr[i], c_idx, c_val);
        __syncwarp();
    }
}

// spgemm_pattern with a group of SPGEMM_SMALL_LANES lanes a row (rows of few products)
template <typename T>
__global__ void __launch_bounds__(SPGEMM_BLOCK)
spgemm_pattern_small(int m, const int* __restrict__ a_ptr, const int* __restrict__ a_idx,
                     const T* __restrict__ a_val, const int* __restrict__ b_ptr,
                     const int* __restrict__ b_idx, const T* __restrict__ b_val,
                     const int* __restrict__ c_ptr, const int* __restrict__ c_idx,
                     T* __restrict__ c_val, int* __restrict__ missing) {
    constexpr int G = SPGEMM_SMALL_LANES;
    const int lane = threadIdx.x % G, group = threadIdx.x / G;
    const int groups = gridDim.x * SPGEMM_SMALL_GROUPS;
    int miss = 0;
    for (int base = blockIdx.x * SPGEMM_SMALL_GROUPS; base < m; base += groups) {   // uniform
        const int i = base + group;
        const bool mine = i < m;
        const int c_begin = mine ? c_ptr[i] : 0, c_end = mine ? c_ptr[i + 1] : 0;
        for (int e = c_begin + lane; e < c_end; e += G) c_val[e] = T(0);
        __syncwarp();
        spgemm::walk_flat<G, true, false>(mine ? a_ptr[i] : 0, mine ? a_ptr[i + 1] : 0, lane,
                                          a_idx, a_val, b_ptr, [&](int j, T a, bool active) {
            const int at = active ? dps::find_sorted(c_idx, c_begin, c_end, b_idx[j]) : -1;
            miss += active && at < 0;
            spgemm::add_in_order<G>(at >= 0, at, false, at >= 0 ? dps::mul_rn(a, b_val[j]) : T(0),
                                    c_val);
            return false;
        });
    }
    miss = dps::warp_sum(miss);
    if (threadIdx.x % DPS_WARP == 0 && miss) atomicAdd(missing, miss);
}

template <typename T>
__global__ void __launch_bounds__(SPGEMM_BLOCK)
spgemm_pattern(int m, const int* __restrict__ a_ptr, const int* __restrict__ a_idx,
               const T* __restrict__ a_val, const int* __restrict__ b_ptr,
               const int* __restrict__ b_idx, const T* __restrict__ b_val,
               const int* __restrict__ c_ptr, const int* __restrict__ c_idx, T* __restrict__ c_val,
               int* __restrict__ missing) {
    const int lane = threadIdx.x % DPS_WARP, w = threadIdx.x / DPS_WARP;
    const int warps = gridDim.x * SPGEMM_WARPS;
    int miss = 0;
    for (int i = blockIdx.x * SPGEMM_WARPS + w; i < m; i += warps) {       // uniform per warp
        const int c_begin = c_ptr[i], c_end = c_ptr[i + 1];
        for (int e = c_begin + lane; e < c_end; e += DPS_WARP) c_val[e] = T(0);
        __syncwarp();
        spgemm::walk_flat<DPS_WARP, true, false>(a_ptr[i], a_ptr[i + 1], lane, a_idx, a_val,
                                                 b_ptr, [&](int j, T a, bool active) {
            const int at = active ? dps::find_sorted(c_idx, c_begin, c_end, b_idx[j]) : -1;
            miss += active && at < 0;
            spgemm::add_in_order<DPS_WARP>(at >= 0, at, false,
                                           at >= 0 ? dps::mul_rn(a, b_val[j]) : T(0), c_val);
            return false;
        });
    }
    miss = dps::warp_sum(miss);
    if (lane == 0 && miss) atomicAdd(missing, miss);
}

// spgemm_pattern for a C of ncols columns whose dense row fits the block's shared memory
// (device.SPGEMM_SHARED_DENSE_BYTES), blockDim.x / 32 warps a block: each warp marks its row's
// pattern in a dense row, sums the products there in the walk's order (from zero, as
// spgemm_pattern) and writes the row's values out; a product outside the pattern is counted.
template <typename T>
__global__ void __launch_bounds__(SPGEMM_BLOCK)
spgemm_pattern_dense(int m, const int* __restrict__ a_ptr, const int* __restrict__ a_idx,
                     const T* __restrict__ a_val, const int* __restrict__ b_ptr,
                     const int* __restrict__ b_idx, const T* __restrict__ b_val, int ncols,
                     const int* __restrict__ c_ptr, const int* __restrict__ c_idx,
                     T* __restrict__ c_val, int* __restrict__ missing) {
    extern __shared__ __align__(16) unsigned char dense_smem[];
    const int lane = threadIdx.x % DPS_WARP, w = threadIdx.x / DPS_WARP;
    const int per_block = blockDim.x / DPS_WARP;
    T* vals = reinterpret_cast<T*>(dense_smem) + (size_t)w * ncols;
    int* mark = reinterpret_cast<int*>(reinterpret_cast<T*>(dense_smem) + (size_t)per_block * ncols)
        + (size_t)w * ncols;
    int miss = 0;
    for (int i = blockIdx.x * per_block + w; i < m; i += gridDim.x * per_block) {   // per warp
        const int c_begin = c_ptr[i], c_end = c_ptr[i + 1];
        for (int c = lane; c < ncols; c += DPS_WARP) mark[c] = 0;
        __syncwarp();
        for (int e = c_begin + lane; e < c_end; e += DPS_WARP) {
            mark[c_idx[e]] = 1;
            vals[c_idx[e]] = T(0);
        }
        __syncwarp();
        spgemm::walk_flat<DPS_WARP, true, false>(a_ptr[i], a_ptr[i + 1], lane, a_idx, a_val,
                                                 b_ptr, [&](int j, T a, bool active) {
            const int col = active ? b_idx[j] : -1;
            const bool here = col >= 0 && mark[col];
            miss += active && !here;
            spgemm::add_in_order<DPS_WARP>(here, col, false, here ? dps::mul_rn(a, b_val[j]) : T(0),
                                           vals);
            return false;
        });
        for (int e = c_begin + lane; e < c_end; e += DPS_WARP) c_val[e] = vals[c_idx[e]];
        __syncwarp();
    }
    miss = dps::warp_sum(miss);
    if (lane == 0 && miss) atomicAdd(missing, miss);
}
