"""variant="dynamic": the host launches one kernel and waits once; the loop runs on the GPU.

The paper's DYNAMIC CG (one parent kernel waiting on child kernels with device-side
cudaDeviceSynchronize) cannot be written for Hopper: CDP2 has no device-side wait. Here the loop is
a chain of CDP2 tail launches (dpsolve/cuda/cg_dynamic.cu), each kernel launching the next one once
it has decided, on the device, whether the solve goes on:

    host:    cg_dyn_start       r = b - A x; z = D^-1 r; partials of <r,z> (and <r,r>)
    device:  cg_dyn_spmv(j)     O5b O6 O7 O9 + test (tau < atol, maxiter, non-finite) in the
                                prologue, then O8 + O1 + O2a (p = z + beta p formed in the gather)
             cg_dyn_update(j)   O2b in the prologue (non-finite alpha: info -10), then O3 + O4,
                                Jacobi, O5a                       -> cg_dyn_spmv(j + 1)

2 device launches per iteration, 1 host launch per solve. After that launch the host enqueues one
copy of the small result area (info, iterations, state, tau) and waits once (GpuBackend.run's
final wait), then reads it.
"""
from __future__ import annotations

import numpy as np

from .._device import status as device_status
from ..cuda import ops
from ._gpu import GpuBackend, GpuState, HostScalars


class DynamicState(GpuState):
    """GpuState plus a second p buffer (p is double-buffered by iteration parity), the partials
    of the chain's three DOTs and the device result area with its pinned host copy."""

    def __init__(self, system, fmt):
        import cupy
        super().__init__(system, fmt)
        with self.stream:
            self.p2 = cupy.full(self.n, np.nan, self.dtype)
            self.dyn_partials = cupy.zeros(3 * ops.DOT_MAX_PARTIALS, self.dtype)
            self.dyn_status = cupy.zeros(ops.DYNAMIC_STATUS, np.float64)
        self.dyn_host = HostScalars(ops.DYNAMIC_STATUS, np.float64)
        self.stream.synchronize()


class DynamicBackend(GpuBackend):
    name = "dynamic"
    device_driven = True
    uses_cdp = True          # CUDA dynamic parallelism: compute-sanitizer racecheck cannot run it
    State = DynamicState

    def __init__(self):
        self._available = None

    def extra_availability(self):
        if self._available is None:
            self._available = self._probe()
        return self._available

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

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        stream = st.stream
        ops.cg_dynamic(st.A, st.b, st.inv_diag, x, st.r, st.z, st.p, st.p2, st.v, st.dyn_partials,
                       st.dyn_status, atol, maxiter, stream=stream)
        # one device-to-host copy of the result, read after the run's one host wait
        res = st.dyn_host.copy_async(st.dyn_status, stream)

        def finish():
            info, its, state, err = int(res[0]), int(res[1]), float(res[2]), int(res[3])
            if state != ops.DYNAMIC_DONE:
                what = (f"a device-side launch failed with cudaError {err}"
                        if state == ops.DYNAMIC_LAUNCH_FAILED else "the chain stopped without a result")
                raise RuntimeError(f"variant 'dynamic': {what}")
            return info, its, {"device_launches_per_iter": ops.DYNAMIC_LAUNCHES_PER_ITER,
                               "residuals": None}
        return finish
