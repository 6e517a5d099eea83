"""variant="persistent": one cooperative kernel runs the whole solve (beyond the paper).

The host launches one kernel per solve with a cooperative launch (every block resident, the grid
sized from the occupancy calculator and capped at 4 blocks per SM) and waits once. The
iteration's global barriers are ``grid.sync()``, ~1 us each on Hopper, where the ``dynamic``
chain pays a ~13 us CDP2 launch per kernel:

* CG (dpsolve/cuda/cg_persistent.cu): 2 grid.sync per iteration.
* BiCG (bicg_persistent.cu): 2 per iteration (both SpMVs, A p and A^H p~, in one phase).
* BiCGStab (bicgstab_persistent.cu): 3 per iteration (v = A p^; t = A s^; the x, r update).

Convergence, maxiter and breakdowns are decided in the kernel exactly where the reference
(dpsolve/reference) and the dynamic chains decide them; BiCG and BiCGStab, like SciPy, iterate on
NaN to maxiter. Every method records the residual history (report field ``residuals``).

The device state, the result area, the residual history and how the result is read back are the
dynamic variant's (dpsolve/backends/dynamic.py): only the kernel differs.
"""
from __future__ import annotations

import numpy as np

from .._device import status as device_status
from ..cuda import ops
from .dynamic import DynamicBackend, device_result


class PersistentBackend(DynamicBackend):
    name = "persistent"
    uses_cdp = False          # one cooperative kernel: compute-sanitizer racecheck can run it

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
        hist = st.history(maxiter)
        ops.cg_persistent(st.A, st.b, st.inv_diag, x, st.r, st.z, st.p, st.p2, st.v,
                          st.dyn_partials, st.dyn_status, atol, maxiter, hist=hist,
                          stream=st.stream)
        return device_result(st, hist, 0.0, self.name)

    def bicg(self, st, x, *, atol, maxiter, sync, callback):
        pre = st.inv_diag is not None
        rt = st.vec("rt")
        hist = st.history(maxiter)
        ops.bicg_persistent(st.A, st.AH, st.b, st.inv_diag, x, st.r, rt, st.z,
                            st.vec("zt") if pre else rt, st.p, st.p2, st.vec("pt"), st.vec("pt2"),
                            st.v, st.vec("qt"), st.dyn_partials, st.dyn_status, atol, maxiter,
                            hist=hist, stream=st.stream)
        return device_result(st, hist, 0.0, self.name)

    def bicgstab(self, st, x, *, atol, maxiter, sync, callback):
        hist = st.history(maxiter)
        ops.bicgstab_persistent(st.A, st.b, st.inv_diag, x, st.r, st.vec("rt"), st.p, st.p2,
                                st.v, st.vec("v2"), st.vec("s"), st.vec("t"), st.dyn_partials,
                                st.dyn_status, atol, maxiter, hist=hist, stream=st.stream)
        return device_result(st, hist, 0.0, self.name)
