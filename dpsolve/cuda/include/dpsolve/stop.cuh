// dpsolve/stop.cuh - the stop rule of every device-side loop, written once.
//
// Its host twin is dpsolve/backends/_gpu.py (head_test, host_loop); both state the reference
// solvers' order of tests (dpsolve/reference), with SciPy's info codes:
//
//   at the head of iteration j, tau = ||r_j||:
//     j > 0 and tau non-finite   -> DPS_BREAKDOWN (-10) at j: step j - 1 overflowed
//     j >= maxiter               -> maxiter at maxiter (the budget is spent, whatever tau says)
//     tau < atol                 -> 0 at j (SciPy's strict test; NaN goes on)
//   after iteration j of a host-driven step (graph.cu), its STATUS slot first:
//     status < 0                 -> that code at j (the step stopped where the reference stops)
//     status == DPS_MID_STEP     -> 0 at j + 1 (BiCGStab's ||s|| < atol exit)
//     otherwise                  -> the head test of iteration j + 1
//
// A method's own tests at the loop head (BiCG's rho breakdown, ...) come after head_test, only
// when it says go.
#pragma once
#include <dpsolve/abi.cuh>

namespace dps {

struct Stop {
    int info;       // SciPy's info when the loop stops here
    int its;        // iterations run
    bool go;        // true: run iteration j
};

__device__ __forceinline__ Stop head_test(int j, double tau, double atol, int maxiter) {
    if (j > 0 && !isfinite(tau)) return {DPS_BREAKDOWN, j, false};
    if (j >= maxiter) return {maxiter, maxiter, false};
    if (tau < atol) return {0, j, false};
    return {0, j, true};
}

__device__ __forceinline__ Stop step_test(int j, int status, double tau, double atol,
                                          int maxiter) {
    if (status < 0) return {status, j, false};
    if (status == DPS_MID_STEP) return {0, j + 1, false};
    return head_test(j + 1, tau, atol, maxiter);
}

}  // namespace dps
