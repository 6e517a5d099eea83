// graph.cu - variant "graph": the loop control of a conditional-WHILE CUDA graph.
//
// The graph (built once per prepared system, dpsolve/backends/graph.py) is
//
//   [params H2D copy] -> [set-up: the merge variant's kernels] -> graph_head
//     -> WHILE (handle) { [one iteration: the merge variant's fused kernels] -> graph_step }
//     -> [result D2H copy]
//
// graph_head and graph_step make, on the device, exactly the decisions of the host-driven loop
// (dpsolve/backends/_gpu.py: host_loop, host_cg_loop) from the (tau, status) slots the merge
// kernels write, and set the WHILE node's condition with cudaGraphSetConditional (needs -rdc).
// One thread each: ~1 us per node on Hopper, against ~11 us per CDP2 device launch.
//
//   params[0] = atol, params[1] = maxiter (doubles; copied from pinned host memory by the graph's
//   first node, so one instantiated graph serves every solve); ctl[0] = iterations done;
//   result = the dynamic variants' status layout (info, iterations, state, -, tau).
#include <dpsolve/common.cuh>
#include <dpsolve/dynamic.cuh>

static_assert(DPS_SLOT_STATUS == DPS_SLOT_TAU + 1, "graph.cu reads TAU and STATUS as a pair");

// Modes (abi.cuh): DPS_GRAPH_CG, where STATUS != 0 is CG's non-finite alpha (-10 at j), and
// DPS_GRAPH_KRYLOV, where STATUS < 0 is SciPy's code at j (a breakdown, or -10 for a non-finite
// scalar) and DPS_MID_STEP is BiCGStab's ||s|| < atol exit. Both: a non-finite tau after
// iteration j -> -10 at j + 1 (host_loop's test). tau_status points at the TAU slot; STATUS is
// the next one (abi.cuh).

// Before the loop: tau_0 < atol -> converged in 0 iterations, the WHILE body never runs.
template <typename T>
__global__ void graph_head(cudaGraphConditionalHandle handle, const T* __restrict__ tau_status,
                           const double* __restrict__ params, int* __restrict__ ctl,
                           double* __restrict__ result) {
    const double tau = (double)dps::real(tau_status[0]);
    ctl[0] = 0;
    result[DYN_STATE] = 0.0;
    result[DYN_TAU] = tau;
    const bool done = tau < params[0];                 // SciPy's strict test (NaN goes on)
    if (done) dyn::finish(result, 0, 0);
    cudaGraphSetConditional(handle, done ? 0u : 1u);
}

// After iteration j (ctl[0] == j): the checks of host_loop after its step, then the loop head's.
template <typename T>
__global__ void graph_step(cudaGraphConditionalHandle handle, int mode,
                           const T* __restrict__ tau_status, const double* __restrict__ params,
                           int* __restrict__ ctl, double* __restrict__ result) {
    const int j = ctl[0];
    const double tau = (double)dps::real(tau_status[0]);
    const int status = (int)dps::real(tau_status[DPS_SLOT_STATUS - DPS_SLOT_TAU]);
    const int maxiter = (int)params[1];
    int info = 0, its = 0;
    bool done = true;
    if (mode == DPS_GRAPH_CG && status != 0) { info = -10; its = j; }
    else if (mode == DPS_GRAPH_KRYLOV && status < 0) { info = status; its = j; }
    else if (mode == DPS_GRAPH_KRYLOV && status == DPS_MID_STEP) { info = 0; its = j + 1; }
    else if (!isfinite(tau)) { info = -10; its = j + 1; }
    else if (j + 1 >= maxiter) { info = maxiter; its = maxiter; }
    else if (tau < params[0]) { info = 0; its = j + 1; }
    else done = false;
    ctl[0] = j + 1;
    result[DYN_TAU] = tau;
    if (done) dyn::finish(result, info, its);
    cudaGraphSetConditional(handle, done ? 0u : 1u);
}
