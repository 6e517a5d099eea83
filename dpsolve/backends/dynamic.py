"""variant="dynamic": the host launches one kernel and waits once; the loop runs on the GPU.

The paper's DYNAMIC CG (one parent kernel waiting on child kernels with device-side
cudaDeviceSynchronize) cannot be written for Hopper: CDP2 has no device-side wait. Here the loop is
a chain of CDP2 tail launches, each kernel launching the next one once it has decided, on the
device, whether the solve goes on. Device launches cost ~11 us on Hopper, so every chain is
aggregated to the fewest kernels per iteration (KLAP): each DOT is finished redundantly by every
block of the kernel that consumes it, and every update is folded into the next SpMV's gather.

CG (dpsolve/cuda/cg_dynamic.cu), 2 device launches per iteration:

    host:    cg_dyn_start       r = b - A x; z = D^-1 r; partials of <r,z> (and <r,r>)
    device:  cg_dyn_spmv(j)     O5b O6 O7 O9 + test (tau < atol, maxiter, non-finite) in the
                                prologue, then O8 + O1 + O2a (p = z + beta p formed in the gather)
             cg_dyn_update(j)   O2b in the prologue (non-finite alpha: info -10), then O3 + O4,
                                Jacobi, O5a                       -> cg_dyn_spmv(j + 1)

BiCG (bicg_dynamic.cu), 2 device launches per iteration: the two SpMVs A p and A^H p~ are
independent and share one kernel.

    host:    bicg_dyn_start     r = b - A x; r~ = r; z, z~; partials of <r~,z>, <r,r>
    device:  bicg_dyn_spmv(j)   prologue: rho, ||r||; tests (non-finite ||r|| -10, maxiter,
                                ||r|| < atol, rho -10, non-finite rho or beta -10); p, p~ formed
                                in the gathers; q = A p, q~ = A^H p~; <p~,q> partials
             bicg_dyn_update(j) prologue: <p~,A p> == 0 -> -11, it or alpha non-finite -> -10;
                                x, r, r~, z, z~; partials
                                                                  -> bicg_dyn_spmv(j + 1)

BiCGStab (bicgstab_dynamic.cu), 3 device launches per iteration: its two SpMVs depend on each
other through global reductions (alpha before t = A s^, rho and ||r|| before v = A p^).

    host:    bicgstab_dyn_start     r = b - A x; r~ = r; partials of <r~,r>, <r,r>
    device:  bicgstab_dyn_v(j)      prologue: rho, ||r||; tests (non-finite ||r|| -10, maxiter,
                                    ||r|| < atol, rho -10, omega -11, non-finite rho or beta
                                    -10); p, p^ formed in the gather; v = A p^; <r~,v>
             bicgstab_dyn_t(j)      prologue: <r~,v> == 0 -> -11, it or alpha non-finite -> -10;
                                    s formed in the gather; t = A s^; partials of <s,s>, <t,s>,
                                    <t,t>
             bicgstab_dyn_update(j) prologue: ||s|| < atol -> x += alpha p^, info 0 at j + 1;
                                    else omega (||s||, <t,s>, <t,t> or omega non-finite ->
                                    x += alpha p^, info -10 at j); x, r; partials
                                                                      -> bicgstab_dyn_v(j + 1)

Convergence, maxiter, breakdowns and non-finite scalars (-10, dpsolve's extension for every
method: SciPy iterates on NaN to maxiter) are decided on the device exactly where the reference
(dpsolve/reference) decides them.

1 host launch per solve. After that launch the host enqueues the copies of the small result area
(info, iterations, state, tau) and of the residual history, and waits once (GpuBackend.run's final
wait), then reads them.

Residual history (report field ``residuals``): one entry per iterate, residuals[k] = the
recurrence residual norm the device tested for x_k (the reference's norm(r) at the head of
iteration k; for CG without a preconditioner the equal sqrt(<r, r>); after BiCGStab's mid-iteration
exit, the final entry is that iteration's ||s||, the residual of the returned x). A run of k
iterations gives k + 1 entries, in the working dtype. Runs of one solve are concatenated (a
restart from the true residual adds its run's k + 1 entries). Recorded only when maxiter <=
HISTORY_MAX_ITER (else None): the history buffer has maxiter + 1 entries and is copied whole.
"""
from __future__ import annotations

import numpy as np

from .._device import status as device_status
from ..cuda import abi, ops
from ._gpu import GpuBackend, GpuState, HostScalars, poisoned


HISTORY_MAX_ITER = 10**6     # residual history recorded when maxiter <= this (8 MB in float64)
HISTORY_HEAD = 1024          # entries copied back with the result; the rest only when needed


class DynamicState(GpuState):
    """GpuState plus second p (and, for BiCG / BiCGStab, p~ / v) buffers (double-buffered by
    iteration parity), the partials of the chains' DOTs, the device result area with its pinned
    host copy, and the residual history buffers (sized by ``ensure_history`` before a run)."""

    def __init__(self, system, fmt):
        import cupy
        super().__init__(system, fmt)
        with self.stream:
            self.p2 = poisoned(self.n, self.dtype, 1, self.stream)[0]
            self.dyn_partials = cupy.zeros(ops.DYNAMIC_PARTIAL_SETS * ops.DOT_MAX_PARTIALS,
                                           self.dtype)
            self.dyn_status = cupy.zeros(ops.DYNAMIC_STATUS, np.float64)
        self.dyn_host = HostScalars(ops.DYNAMIC_STATUS, np.float64)
        self.hist = None             # device: residual norms, one per iterate of a run
        self.hist_host = None        # pinned host copy
        self.history_runs = []       # the histories of this state's runs so far (None: not kept)

    def ensure_history(self, maxiter):
        """Make the history buffers hold maxiter + 1 entries (allocated once, grown if needed);
        outside the timed region of a run. No history when maxiter > HISTORY_MAX_ITER."""
        if maxiter > HISTORY_MAX_ITER:
            return
        if self.hist is None or self.hist.size < maxiter + 1:
            self.hist = poisoned(maxiter + 1, self.real_dtype, 1, self.stream)[0]
            if self.hist_host is None:
                self.hist_host = HostScalars(HISTORY_HEAD, self.real_dtype)

    def load(self, system):
        super().load(system)
        self.history_runs = []        # a new solve: its own residual history

    def ensure_vectors(self):
        """Allocate the method's named work vectors (poisoned) before a run, not inside it."""
        names = {"bicg": ("rt", "pt", "pt2", "qt") + (("zt",) if self.fused else ()),
                 "bicgstab": ("rt", "v2", "s", "t")}.get(self.method, ())
        if any(name not in self._vectors for name in names):
            for name in names:
                self.vec(name)

    def history(self, maxiter):
        """The device history array of a run of at most maxiter iterations, or None."""
        if maxiter > HISTORY_MAX_ITER or self.hist is None or self.hist.size < maxiter + 1:
            return None
        return self.hist[:maxiter + 1]


class DynamicBackend(GpuBackend):
    name = "dynamic"
    device_driven = True
    uses_cdp = True          # CUDA dynamic parallelism: compute-sanitizer racecheck cannot run it
    formats = ("csr-scalar", "csr-vector", "ell", "csr-adaptive")   # dynamic.cuh's row loops
    State = DynamicState

    @staticmethod
    def _probe():
        cc = device_status().compute_capability
        if cc is None or tuple(cc) < (5, 0):
            return False, f"CUDA dynamic parallelism (CDP2) needs compute capability 5.0+, not {cc}"
        try:
            # compiles (and links libcudadevrt into) the whole chain for one format
            from ..cuda._loader import get_kernel
            get_kernel("cg_dynamic", "cg_dyn_start<{T}, 1>", np.float64)
        except Exception as e:  # NVRTC without -rdc support, libcudadevrt missing, ...
            return False, (f"CUDA dynamic parallelism is not usable here: building "
                           f"cg_dynamic.cu with -rdc=true failed ({type(e).__name__}: {e})")
        return True, None

    def run(self, state, system, x, *, atol, maxiter, callback, sync, energy=False):
        state.ensure_vectors()                   # allocations stay out of the measured run
        state.ensure_history(maxiter)
        return super().run(state, system, x, atol=atol, maxiter=maxiter, callback=callback,
                           sync=sync, energy=energy)

    # the solve's one host launch: dpsolve.cuda.ops.<method>_device, with the CDP2 chain's first
    # kernel here; variant "persistent" runs the same state and operands through its cooperative
    # kernels. method -> device launches per iteration (reported)
    PERSISTENT = False
    LAUNCHES_PER_ITER = {"cg": ops.DYNAMIC_LAUNCHES_PER_ITER,
                         "bicg": ops.BICG_DYNAMIC_LAUNCHES_PER_ITER,
                         "bicgstab": ops.BICGSTAB_DYNAMIC_LAUNCHES_PER_ITER}

    def _solve(self, method, st, operands, atol, maxiter):
        """Issue ``method``'s one host launch over ``operands`` (the wrapper's arguments before
        the partials) and return the closure that reads the result after the one wait."""
        hist = st.history(maxiter)
        getattr(ops, f"{method}_device")(*operands, st.dyn_partials, st.dyn_status, atol, maxiter,
                                         hist=hist, stream=st.stream, persistent=self.PERSISTENT)
        return device_result(st, hist, self.LAUNCHES_PER_ITER[method], self.name)

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        return self._solve("cg", st, (st.A, st.b, st.pc_args, x, st.r, st.z, st.p, st.p2, st.v),
                           atol, maxiter)

    def bicg(self, st, x, *, atol, maxiter, sync, callback):
        pre = st.fused
        rt = st.vec("rt")
        return self._solve("bicg", st, (st.A, st.AH, st.b, st.pc_args, x, st.r, rt, st.z,
                                        st.vec("zt") if pre else rt, st.p, st.p2, st.vec("pt"),
                                        st.vec("pt2"), st.v, st.vec("qt")), atol, maxiter)

    def bicgstab(self, st, x, *, atol, maxiter, sync, callback):
        return self._solve("bicgstab", st, (st.A, st.b, st.pc_args, x, st.r, st.vec("rt"), st.p,
                                            st.p2, st.v, st.vec("v2"), st.vec("s"), st.vec("t")),
                           atol, maxiter)


def device_result(st, hist, launches_per_iter, variant):
    """Queue the copies of the result area (and history) after a device-driven solve's one host
    launch; return the closure that reads them after the run's one host wait (dynamic and
    persistent)."""
    stream = st.stream
    res = st.dyn_host.copy_async(st.dyn_status, stream)
    # the history's head comes with the result; a longer history is fetched after the wait
    head = min(hist.size, HISTORY_HEAD) if hist is not None else 0
    hres = st.hist_host.copy_async(hist[:head], stream) if hist is not None else None

    def finish():
        info, its = int(res[abi.DYN_INFO]), int(res[abi.DYN_ITERS])
        state, err = float(res[abi.DYN_STATE]), int(res[abi.DYN_ERROR])
        if state != ops.DYNAMIC_DONE:
            what = (f"a device-side launch failed with cudaError {err}"
                    if state == ops.DYNAMIC_LAUNCH_FAILED else "the solve ended without a result")
            raise RuntimeError(f"variant {variant!r}: {what}")
        runs = st.history_runs
        if runs is not None:
            if hres is None:
                st.history_runs = runs = None
            elif its + 1 <= head:
                runs.append(np.array(hres[:its + 1]))
            else:
                runs.append(np.concatenate([hres[:head], hist[head:its + 1].get(stream=stream)]))
        residuals = np.concatenate(runs) if runs else None
        return info, its, {"device_launches_per_iter": launches_per_iter,
                           "residuals": residuals}
    return finish
