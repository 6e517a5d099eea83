// graph.cu - variant "graph": the loop control of a conditional-WHILE CUDA graph.
//
// The graph (built once per prepared system, dpsolve/backends/graph.py) is
//
//   [params H2D copy] -> [set-up: the merge variant's kernels] -> graph_head
//     -> WHILE (handle) { [one iteration: the merge variant's fused kernels] -> graph_step }
//     -> [result D2H copy]
//
// graph_head and graph_step make, on the device, exactly the decisions of the host-driven loop
// (dpsolve/backends/_gpu.py: host_loop) from the (tau, status) slots the merge kernels write,
// with the one stop rule (stop.cuh), and set the WHILE node's condition with cudaGraphSetConditional (needs -rdc).
// One thread each: ~1 us per node on Hopper, against ~11 us per CDP2 device launch.
//
//   params[0] = atol, params[1] = maxiter, params[2] = rtol or -1 (doubles; copied from pinned
//   host memory by the graph's first node, so one instantiated graph serves every solve);
//   ctl[0] = iterations done; result = the dynamic variants' status layout (info, iterations,
//   state, -, tau, tol, -, ||b||^2).
//
//   rtol >= 0 is the prepared call's fast path (dpsolve/_fast.py: FastGraph), whose x is 0, so
//   that the set-up's tau is ||b||: graph_head makes SciPy's tolerance max(atol, rtol ||b||) on
//   the device (into params[0], which the loop and the merge kernels read), records it and
//   ||b||^2, and stops at once (x = 0) where ||b|| is 0 or not finite: the host decides.
#include <dpsolve/common.cuh>
#include <dpsolve/dynamic.cuh>

static_assert(DPS_SLOT_STATUS == DPS_SLOT_TAU + 1, "graph.cu reads TAU and STATUS as a pair");

// STATUS (every method's step): OK, SciPy's code at j (a breakdown, or -10 for a non-finite
// scalar), or DPS_MID_STEP (BiCGStab's ||s|| < atol exit); dps::step_test decides. tau_status
// points at the TAU slot; STATUS is the next one (abi.cuh).

// Before the loop: tau_0 < atol -> converged in 0 iterations, the WHILE body never runs.
template <typename T>
__global__ void graph_head(cudaGraphConditionalHandle handle, const T* __restrict__ tau_status,
                           double* __restrict__ params, int* __restrict__ ctl,
                           double* __restrict__ result) {
    DPS_PDL();
    const double tau = (double)dps::real(tau_status[0]);
    ctl[0] = 0;
    result[DYN_STATE] = 0.0;
    result[DYN_TAU] = tau;
    if (params[2] >= 0.0) {                            // the fast path: r = b (see above)
        params[0] = fmax(params[0], params[2] * tau);
        result[DYN_BB] = tau * tau;
        result[DYN_TOL] = params[0];
        if (!(tau > 0.0 && dps::is_finite(tau))) {
            dyn::finish(result, 0, 0);
            cudaGraphSetConditional(handle, 0u);
            return;
        }
    }
    const dps::Stop s = dps::head_test(0, tau, params[0], (int)params[1]);
    if (!s.go) dyn::finish(result, s.info, s.its);
    cudaGraphSetConditional(handle, s.go ? 1u : 0u);
}

// After iteration j (ctl[0] == j): the checks of host_loop after its step, then the loop head's.
template <typename T>
__global__ void graph_step(cudaGraphConditionalHandle handle,
                           const T* __restrict__ tau_status, const double* __restrict__ params,
                           int* __restrict__ ctl, double* __restrict__ result) {
    DPS_PDL();
    const int j = ctl[0];
    const double tau = (double)dps::real(tau_status[0]);
    const int status = (int)dps::real(tau_status[DPS_SLOT_STATUS - DPS_SLOT_TAU]);
    const dps::Stop s = dps::step_test(j, status, tau, params[0], (int)params[1]);
    ctl[0] = j + 1;
    result[DYN_TAU] = tau;
    if (!s.go) dyn::finish(result, s.info, s.its);
    cudaGraphSetConditional(handle, s.go ? 1u : 0u);
}
