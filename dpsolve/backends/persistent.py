"""variant="persistent": one cooperative kernel runs the whole solve (beyond the paper).

The host launches ``cg_persistent`` once with a cooperative launch (every block resident, the
grid sized from the occupancy calculator and capped at 4 blocks per SM) and waits once. The
iteration's global barriers are ``grid.sync()`` -- two per CG iteration, ~1 us each on Hopper,
where the ``dynamic`` chain pays a ~13 us CDP2 launch per kernel. See dpsolve/cuda/cg_persistent.cu.
"""
from __future__ import annotations

import numpy as np

from .._device import status as device_status
from ..cuda import ops
from ._gpu import GpuBackend, GpuState, HostScalars


class PersistentState(GpuState):
    """GpuState plus the second p buffer, per-block partials of the three DOTs, the device
    result area and its pinned host copy."""

    def __init__(self, system, fmt):
        import cupy
        super().__init__(system, fmt)
        with self.stream:
            self.p2 = cupy.full(self.n, np.nan, self.dtype)
            self.pers_partials = cupy.zeros(3 * ops.DOT_MAX_PARTIALS, self.dtype)
            self.pers_status = cupy.zeros(ops.DYNAMIC_STATUS, np.float64)
        self.pers_host = HostScalars(ops.DYNAMIC_STATUS, np.float64)
        self.stream.synchronize()


class PersistentBackend(GpuBackend):
    name = "persistent"
    device_driven = True
    State = PersistentState

    def __init__(self):
        self._available = None

    def extra_availability(self):
        if self._available is None:
            self._available = self._probe()
        return self._available

    @staticmethod
    def _probe():
        import cupy
        dev = cupy.cuda.Device()
        if not dev.attributes.get("CooperativeLaunch", 0):
            return False, f"{device_status().name} does not support cooperative launches"
        try:
            ops.persistent_grid_probe(np.float64)
        except Exception as e:
            return False, (f"the cooperative kernel could not be built or sized here "
                           f"({type(e).__name__}: {e})")
        return True, None

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        ops.cg_persistent(st.A, st.b, st.inv_diag, x, st.r, st.z, st.p, st.p2, st.v,
                                 st.pers_partials, st.pers_status, atol, maxiter,
                                 stream=st.stream)
        res = st.pers_host.copy_async(st.pers_status, st.stream)

        def finish():
            info, its, state = int(res[0]), int(res[1]), float(res[2])
            if state != ops.DYNAMIC_DONE:
                raise RuntimeError("variant 'persistent': the kernel ended without a result")
            return info, its, {"device_launches_per_iter": 0.0, "residuals": None}
        return finish
