"""variant="host": the pure-NumPy reference solvers, driven with SciPy's operators."""
from __future__ import annotations

import numpy as np

from .. import methods as method_table
from ..measure import Stopwatch, no_rapl
from .base import Backend, Run


def _to_numpy(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


class HostState:
    def __init__(self, system):
        if system.operator is not None:
            op = system.operator
            self.matvec, self.rmatvec = op.matvec, op.rmatvec
        else:
            A = system.csr.to_scipy()
            AH = A.conj().T.tocsr()
            self.matvec = A.__matmul__
            self.rmatvec = AH.__matmul__
        self.b = None                      # each solve's b (load)
        self.psolve, self.rpsolve = system.M.host()      # the preconditioner's host face


class HostBackend(Backend):
    name = "host"
    uses_format = False

    def availability(self):
        return True, None

    def prepare(self, system, fmt):
        return HostState(system)

    def initial_x(self, system):
        if system.x0 is None:
            return np.zeros(system.n, dtype=system.dtype)
        return _to_numpy(system.x0).copy()

    def load(self, state, system):
        state.b = _to_numpy(system.b)

    def run(self, state, system, x, *, atol, maxiter, callback, sync, energy=False):
        solver = method_table.implementation(system.method, "host")     # the reference solver
        kw = dict(atol=atol, maxiter=maxiter, psolve=state.psolve, callback=callback,
                  **system.options)
        if method_table.get(system.method).adjoint:
            kw.update(rmatvec=state.rmatvec, rpsolve=state.rpsolve)
        with Stopwatch(None if energy else no_rapl()) as sw:
            x, info, its = solver(state.matvec, state.b, x, **kw)
        return Run(x, info, its, {"wall_time": sw.wall, "host_cpu_time": sw.cpu,
                                  "host_energy": sw.host_energy, "host_syncs": 0,
                                  "host_launches": 0, "device": "host CPU"})

    def residual_norm(self, state, system, x):
        return float(np.linalg.norm(state.b - state.matvec(x)))

    def to_output(self, x, system):
        if system.out_cupy:
            import cupy
            return cupy.asarray(x)
        return x
