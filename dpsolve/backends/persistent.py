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
NaN to maxiter. BiCG and BiCGStab also record the residual history (report field ``residuals``,
the dynamic variant's layout: one entry per iterate, runs of one solve concatenated, recorded when
maxiter <= dynamic.HISTORY_MAX_ITER).
"""
from __future__ import annotations

import numpy as np

from .._device import status as device_status
from ..cuda import ops
from ._gpu import GpuBackend, GpuState, HostScalars
from .dynamic import DynamicState


class PersistentState(GpuState):
    """GpuState plus the second p buffer, per-block partials of the method's DOTs (3 sets for CG
    and BiCG, 6 for BiCGStab), the device result area and its pinned host copy; for BiCG and
    BiCGStab the named work vectors (allocated here, poisoned, so that no allocation happens in a
    run) and the residual history buffers (sized by ``ensure_history`` before a run)."""

    # the dynamic variant's history buffers, same layout: hist has maxiter + 1 entries
    ensure_history = DynamicState.ensure_history
    history = DynamicState.history

    def __init__(self, system, fmt):
        import cupy
        super().__init__(system, fmt)
        sets = ops.PERSISTENT_PARTIAL_SETS.get(self.method, 3)
        with self.stream:
            self.p2 = cupy.full(self.n, np.nan, self.dtype)
            self.pers_partials = cupy.zeros(sets * ops.DOT_MAX_PARTIALS, self.dtype)
            self.pers_status = cupy.zeros(ops.DYNAMIC_STATUS, np.float64)
        self.pers_host = HostScalars(ops.DYNAMIC_STATUS, np.float64)
        # q is ``v`` (BiCG); p_j and p~_j / v_j alternate between p, p2 and pt, pt2 / v, v2
        names = {"bicg": ("rt", "pt", "pt2", "qt") + (("zt",) if self.inv_diag is not None else ()),
                 "bicgstab": ("rt", "v2", "s", "t")}.get(self.method, ())
        for name in names:
            self.vec(name)
        self.hist = None             # device: residual norms, one per iterate of a run
        self.hist_host = None        # pinned host copy
        self.history_runs = []       # the histories of this state's runs so far (None: not kept)
        self.stream.synchronize()


class PersistentBackend(GpuBackend):
    name = "persistent"
    device_driven = True
    State = PersistentState
    methods = ("cg", "bicg", "bicgstab")

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

    def run(self, state, system, x, *, atol, maxiter, callback, sync):
        if state.method != "cg":
            state.ensure_history(maxiter)        # allocations stay out of the measured run
        return super().run(state, system, x, atol=atol, maxiter=maxiter, callback=callback,
                           sync=sync)

    @staticmethod
    def _finisher(st, hist):
        """Queue the copies of the result area (and history) after the one host launch; return
        the closure that reads them after the run's one host wait."""
        stream = st.stream
        res = st.pers_host.copy_async(st.pers_status, stream)
        hres = st.hist_host.copy_async(hist, stream) if hist is not None else None

        def finish():
            info, its, state = int(res[0]), int(res[1]), float(res[2])
            if state != ops.DYNAMIC_DONE:
                raise RuntimeError("variant 'persistent': the kernel ended without a result")
            runs = st.history_runs
            if runs is not None:
                if hres is None:
                    st.history_runs = runs = None
                else:
                    runs.append(np.array(hres[:its + 1]))
            residuals = np.concatenate(runs) if runs else None
            return info, its, {"device_launches_per_iter": 0.0, "residuals": residuals}
        return finish

    def bicg(self, st, x, *, atol, maxiter, sync, callback):
        pre = st.inv_diag is not None
        rt = st.vec("rt")
        hist = st.history(maxiter)
        ops.bicg_persistent(st.A, st.AH, st.b, st.inv_diag, x, st.r, rt, st.z,
                            st.vec("zt") if pre else rt, st.p, st.p2, st.vec("pt"), st.vec("pt2"),
                            st.v, st.vec("qt"), st.pers_partials, st.pers_status, atol, maxiter,
                            hist=hist, stream=st.stream)
        return self._finisher(st, hist)

    def bicgstab(self, st, x, *, atol, maxiter, sync, callback):
        hist = st.history(maxiter)
        ops.bicgstab_persistent(st.A, st.b, st.inv_diag, x, st.r, st.vec("rt"), st.p, st.p2,
                                st.v, st.vec("v2"), st.vec("s"), st.vec("t"), st.pers_partials,
                                st.pers_status, atol, maxiter, hist=hist, stream=st.stream)
        return self._finisher(st, hist)
