// dpsolve/abi.cuh - every number the kernels and the Python side must agree on, named once.
//
// dpsolve/cuda/abi.py mirrors this file name for name; tests/test_abi.py parses both and fails
// when they disagree (a value changed on one side only, or a name on one side only). Change a
// value here and in abi.py together. Only plain `#define NAME <integer or float>` lines belong
// here: the test reads them as such.
#pragma once

// ---- launch geometry
#define DPS_BLOCK 256            // threads per block of every element-wise and SpMV kernel
#define DPS_WARP 32
#define DPS_CHUNK 4096           // entries of a block-mapped csr-adaptive row per block

// ---- W, the row-mapping template argument of the dynamic / persistent kernels; CSR-vector
// passes its lane width (2 .. 32) instead
#define DYN_ELL 0
#define DYN_CSR_SCALAR 1
#define DYN_ADAPTIVE 64

// ---- the result area of a device-driven solve (dynamic, persistent, graph): doubles
#define DYN_STATUS_WORDS 8
#define DYN_INFO 0               // SciPy's info
#define DYN_ITERS 1              // iterations run
#define DYN_STATE 2              // DYN_RUNNING, DYN_DONE or DYN_LAUNCH_FAILED
#define DYN_ERROR 3              // the cudaError_t of a failed device-side launch
#define DYN_TAU 4                // the last residual norm tested
#define DYN_TOL 5                // a fast call's tolerance, max(atol, rtol ||b||) (DPS_FAST_TOL);
                                 // -1: its guard stopped it (cg_persistent.cu's guard_stops)
#define DYN_RES2 6               // a fast call's ||b - A x||^2 of the returned x (DPS_FAST_RESID)
#define DYN_BB 7                 // a fast call's ||b||^2 as summed (DPS_FAST_TOL)
#define DYN_RUNNING 0.0
#define DYN_DONE 1.0
#define DYN_LAUNCH_FAILED 2.0

// ---- CgArgs.flags: the prepared call's fast path (dpsolve/_fast.py), one launch for the whole
// call; 0 everywhere else
#define DPS_FAST_ZERO_X 1        // x = 0 is the start: the kernel zeroes x, r = b (no SpMV)
#define DPS_FAST_TOL 2           // the tolerance max(atol, rtol ||b||) from ||b|| in the kernel
#define DPS_FAST_RESID 4         // ||b - A x||^2 of the returned x into DYN_RES2 at the end

// ---- csr-adaptive's row-bin descriptor (dynamic.cuh's Bins<T>::load): 64-bit words, the
// pointers short_rows, med_rows, long_rows, chunk_long, chunk_begin, first_chunk, counters,
// partials, then n_short, n_med, n_chunks
#define DPS_BINS_WORDS 11

// ---- the step status of the host-driven loops (the STATUS slot), the same for every method;
// negative values are SciPy's breakdown codes (-10, -11). The stop rule: stop.cuh
#define DPS_OK 0
#define DPS_MID_STEP 2           // BiCGStab's ||s|| < atol exit: converged mid-iteration
#define DPS_BREAKDOWN -10        // SciPy's -10; dpsolve's code for a non-finite scalar too

// ---- check.cu's csr_check flags (ORed)
#define DPS_CHECK_INDPTR 1       // a row pointer decreases, or lies outside [0, nnz]
#define DPS_CHECK_COLUMN 2       // a column index outside [0, n)
#define DPS_CHECK_UNSORTED 4     // columns not strictly increasing in a row (unsorted, duplicates)
#define DPS_CHECK_NONFINITE 8    // a value is NaN or Inf
#define DPS_CHECK_ENDS 16        // indptr[0] != 0 or indptr[n] != nnz
// csr_check's words 2 and 3: the largest and the smallest binary exponent e (|a| in
// [2^(e-1), 2^e), frexp's) of the nonzero values' components, as e + DPS_EXP_BIAS and
// DPS_EXP_BIAS - e (both positive; 0: no nonzero value). A matrix whose largest e lies outside
// (-W, W] is solved as A / 2^f (dpsolve._system.matrix_shift), W by the working precision:
#define DPS_EXP_BIAS 4096
#define DPS_MATRIX_WINDOW_F32 32
#define DPS_MATRIX_WINDOW_F64 256

// ---- the device scalar slots of a GPU solve (GpuState.scal, DPS_SLOTS values of T). Kernels
// take pointers to single slots; graph.cu reads TAU and STATUS as one pair, so STATUS must be
// TAU + 1. CG: slots 0-8; BiCG / BiCGStab on the host-driven variants add 9-18; the
// single-reduction CG (dpsolve/methods/cg1) uses CG's and PENDING, and adds 19-21.
#define DPS_SLOTS 32
#define DPS_SLOT_SIGMA 0
#define DPS_SLOT_PV 1
#define DPS_SLOT_ALPHA 2
#define DPS_SLOT_ZETA 3
#define DPS_SLOT_RR 4
#define DPS_SLOT_BETA 5
#define DPS_SLOT_TAU 6
#define DPS_SLOT_STATUS 7
#define DPS_SLOT_ONE 8
#define DPS_SLOT_RHO 9
#define DPS_SLOT_RHO_PREV 10
#define DPS_SLOT_RV 11
#define DPS_SLOT_BI_ALPHA 12
#define DPS_SLOT_BI_BETA 13
#define DPS_SLOT_OMEGA 14
#define DPS_SLOT_TS 15
#define DPS_SLOT_TT 16
#define DPS_SLOT_SS 17
#define DPS_SLOT_PENDING 18
// the single-reduction CG (cg1.cu): gamma' = <r, u>, delta = <u, A u> and <r, r>, reduced over
// the ranks by ONE all-reduce of the three, so they must stay adjacent in this order
#define DPS_SLOT_CG1_GAMMA 19
#define DPS_SLOT_CG1_DELTA 20
#define DPS_SLOT_CG1_RR 21
