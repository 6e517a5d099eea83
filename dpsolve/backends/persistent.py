"""variant="persistent": one cooperative kernel runs the whole solve (beyond the paper).

The host launches one kernel per solve with a cooperative launch (every block resident, the grid
sized from the occupancy calculator and capped at 4 blocks per SM) and waits once. The
iteration's global barriers are ``grid.sync()``, ~1 us each on Hopper, where the ``dynamic``
chain pays a ~13 us CDP2 launch per kernel:

* CG (dpsolve/cuda/cg_persistent.cu): 2 grid.sync per iteration; a small CSR system (n <= 4,096,
  rows of at most 7 entries, its values in one block's shared memory: ops.cta_plan) runs in ONE
  block instead (cg_persistent_cta: __syncthreads, 3.5 us an iteration at 2-D 64^2 on an H100).
* BiCG (bicg_persistent.cu): 2 per iteration (both SpMVs, A p and A^H p~, in one phase).
* BiCGStab (bicgstab_persistent.cu): 3 per iteration (v = A p^; t = A s^; the x, r update).

Convergence, maxiter, breakdowns and non-finite scalars (-10 for every method: dpsolve's
extension, where SciPy iterates on NaN to maxiter) are decided in the kernel exactly where the
reference (dpsolve/reference) and the dynamic chains decide them. Every method records the
residual history (report field ``residuals``).

The device state, the result area, the residual history and how the result is read back are the
dynamic variant's (dpsolve/backends/dynamic.py): only the kernel differs.
"""
from __future__ import annotations

from .._device import status as device_status
from ..cuda import ops
from .dynamic import DynamicBackend


class PersistentBackend(DynamicBackend):
    name = "persistent"
    uses_cdp = False          # one cooperative kernel: compute-sanitizer racecheck can run it
    # the dynamic variant's solve through the cooperative kernels (no device-side launches)
    PERSISTENT = True
    LAUNCHES_PER_ITER = {"cg": 0.0, "bicg": 0.0, "bicgstab": 0.0}
    # the methods it runs, named here (a variant registers only what its class defines): the
    # dynamic variant's operand lists, launched through the cooperative kernels
    cg, bicg, bicgstab = DynamicBackend.cg, DynamicBackend.bicg, DynamicBackend.bicgstab

    @staticmethod
    def _probe():
        if not device_status().cooperative_launch:
            return False, f"{device_status().name} does not support cooperative launches"
        try:
            ops.persistent_grid_probe()
        except Exception as e:
            return False, (f"the cooperative kernel could not be built or sized here "
                           f"({type(e).__name__}: {e})")
        return True, None
