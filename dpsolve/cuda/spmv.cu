// spmv.cu - sparse matrix-vector products y = A x (step O1 of CG).
//
// Kernels: spmv_csr_scalar<T>, spmv_csr_vector<T, W>, spmv_ell<T>, spmv_csr_adaptive<T>, and
// ell_fill<T> (a CSR's ELL layout, formats/ell.py). All loop grid-stride over rows, so any grid
// size covers any n. Bytes moved per call (values of s bytes, 4-byte indices):
//   CSR:  nnz*(s+4) + (n+1)*4 for A, up to nnz*s for x (gathered), n*s for y.
//   ELL:  width*n*(s+4) for A (padding included), up to nnz*s for x, n*s for y.
#include <dpsolve/common.cuh>
#include <dpsolve/spmv.cuh>

// ELL two rows per thread (DPS_SPMV_ELL_PAIRS, on by default; -DDPS_SPMV_ELL_PAIRS=0 builds one
// row per thread) for float and double when n is even: rows 2i and 2i + 1 sit side by side in
// every column, so one 16-byte (float64) / 8-byte (float32) load brings both values and one 8-byte
// load both indices.
// Measured (H100, float64, scripts/bench-spmv --quick --ab, alternating batches, results checked
// against cuSPARSE): ELL 152.7 -> 139.6 us on 3-D Laplace 160^3 and 118.7 -> 111.0 us on the banded
// matrix. The same pairing of one thread's consecutive CSR-scalar entries made it 1.23x slower, and
// dropping __launch_bounds__ changed nothing (0.998-1.004x, the same registers): neither is kept
// (BENCHMARKS.md).
#ifndef DPS_SPMV_ELL_PAIRS
#define DPS_SPMV_ELL_PAIRS 1
#endif

// two values in one load (complex values are 8 / 16 bytes already: no pairs)
template <typename T> struct Pair { static constexpr bool ok = false; using type = T; };
template <> struct Pair<float> { static constexpr bool ok = true; using type = float2; };
template <> struct Pair<double> { static constexpr bool ok = true; using type = double2; };

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
spmv_csr_scalar(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                const T* __restrict__ data, const T* __restrict__ x, T* __restrict__ y) {
    DPS_PDL();
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        y[row] = dps::csr_row_scalar(row, indptr, indices, data, x);
}

// W lanes per row. The loop bound is uniform across each warp, as the shuffles require.
template <typename T, int W>
__global__ void __launch_bounds__(DPS_BLOCK)
spmv_csr_vector(int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                const T* __restrict__ data, const T* __restrict__ x, T* __restrict__ y) {
    DPS_PDL();
    const int groups_per_block = DPS_BLOCK / W;
    const int lane = threadIdx.x % W;
    const int stride = gridDim.x * groups_per_block;
    for (int base = blockIdx.x * groups_per_block; base < n; base += stride) {
        const int row = base + threadIdx.x / W;
        const T v = dps::csr_row_vector<T, W>(row, n, lane, indptr, indices, data, x);
        if (lane == 0 && row < n) y[row] = v;
    }
}

template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
spmv_ell(int n, int width, const int* __restrict__ indices, const T* __restrict__ data,
         const T* __restrict__ x, T* __restrict__ y) {
    DPS_PDL();
    if constexpr (DPS_SPMV_ELL_PAIRS && Pair<T>::ok) {
        if (n % 2 == 0) {       // rows 2i, 2i + 1 side by side in every column: aligned pairs
            using V = typename Pair<T>::type;
            for (int row = 2 * (blockIdx.x * blockDim.x + threadIdx.x); row < n;
                 row += 2 * gridDim.x * blockDim.x) {
                T s0 = T(0), s1 = T(0);
#pragma unroll 4
                for (int k = 0; k < width; ++k) {
                    const size_t at = (size_t)k * n + row;
                    const int2 c = dps::ld_mat<true>(reinterpret_cast<const int2*>(indices + at));
                    const V v = dps::ld_mat<true>(reinterpret_cast<const V*>(data + at));
                    if (c.x >= 0) s0 += v.x * x[c.x];
                    if (c.y >= 0) s1 += v.y * x[c.y];
                }
                y[row] = s0;
                y[row + 1] = s1;
            }
            return;
        }
    }
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x)
        y[row] = dps::ell_row(row, n, width, indices, data, x);
}

// G lanes per row of rows[0, count): groups of the block take rows from `first_group`, then every
// `group_stride` groups (uniform per warp, as the shuffles require). G = 1: one thread per row.
template <typename T, int G>
__device__ __forceinline__ void csr_rows_grouped(const int* __restrict__ rows, int count,
                                                 int first_group, int group_stride,
                                                 const int* __restrict__ indptr,
                                                 const int* __restrict__ indices,
                                                 const T* __restrict__ data,
                                                 const T* __restrict__ x, T* __restrict__ y) {
    if constexpr (G == 1) {
        for (int i = first_group + threadIdx.x; i < count; i += group_stride) {
            const int row = rows[i];
            y[row] = dps::csr_row_scalar(row, indptr, indices, data, x);
        }
    } else {
        const int lane = threadIdx.x % G;
        for (int base = first_group; base < count; base += group_stride) {
            const int i = base + threadIdx.x / G;
            const bool ok = i < count;
            const int row = ok ? rows[i] : 0;
            // csr_row_vector computes rows < its n: row + 1 admits this row, 0 idles the group
            const T v = dps::csr_row_vector<T, G>(row, ok ? row + 1 : 0, lane, indptr, indices,
                                                  data, x);
            if (lane == 0 && ok) y[row] = v;
        }
    }
}

// CSR-adaptive (load-balanced): rows binned by length once, when the matrix is prepared
// (dpsolve/formats/adaptive.py). One launch, three kinds of block:
//   blocks [0, b_short)                 G lanes per row of `short_rows` (G = 1: one thread per
//                                       row, CSR-scalar's mapping; 2..8: coalesced loads of a
//                                       short row), grid-stride
//   blocks [b_short, b_short + b_med)   one warp per row of `med_rows` (32 lanes, shuffles)
//   the rest                            one block per DPS_CHUNK-entry chunk of a `long_rows` row
//                                       (grid-stride over chunks); each writes its partial sum,
//                                       and the block that finishes a row's last chunk (an atomic
//                                       counter per row) sums the row's partials in chunk order
//                                       -- deterministic -- writes y and resets the counter.
// Bytes as CSR, plus 4 bytes per row for the bins.
template <typename T, int G>
__global__ void __launch_bounds__(DPS_BLOCK)
spmv_csr_adaptive(int n_short, const int* __restrict__ short_rows, int n_med,
                  const int* __restrict__ med_rows, int n_chunks, const int* __restrict__ long_rows,
                  const int* __restrict__ chunk_long, const int* __restrict__ chunk_begin,
                  const int* __restrict__ first_chunk, int* __restrict__ counters,
                  T* __restrict__ partials, int b_short, int b_med, const int* __restrict__ indptr,
                  const int* __restrict__ indices, const T* __restrict__ data,
                  const T* __restrict__ x, T* __restrict__ y) {
    DPS_PDL();
    const int bid = blockIdx.x;
    if (bid < b_short) {
        constexpr int groups = DPS_BLOCK / G;
        csr_rows_grouped<T, G>(short_rows, n_short, bid * groups, b_short * groups, indptr,
                               indices, data, x, y);
    } else if (bid < b_short + b_med) {
        constexpr int warps = DPS_BLOCK / DPS_WARP;
        csr_rows_grouped<T, DPS_WARP>(med_rows, n_med, (bid - b_short) * warps, b_med * warps,
                                      indptr, indices, data, x, y);
    } else {
        __shared__ T smem[DPS_WARP];
        const int b_long = gridDim.x - b_short - b_med;
        for (int c = bid - b_short - b_med; c < n_chunks; c += b_long) {   // uniform per block
            const int li = chunk_long[c];
            const int row = long_rows[li];
            const int end = min(chunk_begin[c] + DPS_CHUNK, indptr[row + 1]);
            T sum = T(0);
            for (int k = chunk_begin[c] + threadIdx.x; k < end; k += blockDim.x)
                sum += dps::ld_mat<true>(data + k) * x[dps::ld_mat<true>(indices + k)];
            sum = dps::block_sum(sum, smem);
            if (threadIdx.x == 0) {
                partials[c] = sum;
                __threadfence();                       // the partial is visible before the count
                const int first = first_chunk[li], count = first_chunk[li + 1] - first;
                if (atomicAdd(counters + li, 1) == count - 1) {     // this row's last chunk
                    __threadfence();
                    T total = T(0);
                    for (int k = first; k < first + count; ++k) total += dps::ldcg(partials + k);
                    y[row] = total;
                    counters[li] = 0;                  // ready for the next SpMV
                }
            }
        }
    }
}


// The ELL layout of a checked CSR (formats/ell.py): row i's k-th entry at k * n + i, the slots
// past its length value 0 and column -1, a thread a row (its writes coalesce across the warp).
// One pass over the CSR: the host path's row ids (a binary search a nonzero), slot arithmetic
// and two scatters took ~15 launches and three int64 temporaries of nnz. DPS_PDL first, as every
// kernel of this file (pdl.SOURCES: a launch inside a capture may be programmatic).
template <typename T>
__global__ void __launch_bounds__(DPS_BLOCK)
ell_fill(int n, int width, const int* __restrict__ indptr, const int* __restrict__ indices,
         const T* __restrict__ data, int* __restrict__ ell_idx, T* __restrict__ ell_val) {
    DPS_PDL();
    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < n; row += gridDim.x * blockDim.x) {
        const int start = indptr[row], len = indptr[row + 1] - start;
        for (int k = 0; k < width; ++k) {
            const size_t slot = (size_t)k * n + row;
            const bool in = k < len;
            ell_idx[slot] = in ? indices[start + k] : -1;
            ell_val[slot] = in ? data[start + k] : T(0);
        }
    }
}
