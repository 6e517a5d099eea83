"""The solve report: what one solve did and what it cost.

Every field a variant cannot measure is ``None``; nothing uses 0 for "unknown".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class SolveReport:
    variant: str
    format: str | None          # SpMV format used on the device; None for the host variant
    sync: str
    method: str                 # "cg", "bicg" or "bicgstab"
    dtype: str
    n: int
    nnz: int
    iterations: int | None = None
    info: int | None = None
    converged: bool | None = None
    residual_norm: float | None = None   # true final ||b - A x||, recomputed once at exit
    tolerance: float | None = None       # max(rtol * ||b||, atol)
    restarts: int = 0                    # restarts from the true residual (see docs)
    wall_time: float | None = None       # seconds, the whole call: setup_time + solve_time
    setup_time: float | None = None      # seconds before the first iteration: checks,
                                         # conversion, transfers, the back end's state and builds
                                         # (a prepared system's solve: b and x0 only)
    solve_time: float | None = None      # seconds from the first iteration to the returned x:
                                         # iterations, restarts, the true residual, the output copy
    gpu_time: float | None = None        # seconds, CUDA events around the iterations
    gpu_energy: float | None = None      # J, NVML; only with energy=True, for solves >= 0.25 s
    gpu_power: float | None = None       # W, mean over the solve (with gpu_energy)
    host_cpu_time: float | None = None   # process CPU seconds (user + system) of the whole call
    host_energy: float | None = None     # J, RAPL, where readable; only with energy=True
    host_syncs: int | None = None        # host waits on the device during the iterations (the
                                         # last one also reads the true residual)
    host_launches: int | None = None     # kernel launches the host issued for the iterations
                                         # (not the set-up's, nor the true-residual check's)
    device_launches_per_iter: float | None = None
    build_time: float | None = None      # s building the variant's device program (graph: state,
                                         # capture, instantiate); 0.0 when it came from a cache
    device: str | None = None            # device name ("host CPU" for the host variant)
    residuals: object | None = None      # residual-norm history where a variant records one
    preconditioner: dict | None = None   # what M was and cost (dpsolve.precond: describe());
                                         # AMG: levels, complexities, set-up split, V-cycle time

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("residuals")
        d.pop("preconditioner")
        return d

    def summary(self) -> str:
        def fmt(v, unit="", scale=1.0, spec=".3g"):
            return "n/a" if v is None else f"{v * scale:{spec}}{unit}"
        return (f"{self.method}/{self.variant}/{self.format or '-'}/{self.sync} {self.dtype} "
                f"n={self.n} nnz={self.nnz}: info={self.info} it={self.iterations} "
                f"|r|={fmt(self.residual_norm)} wall={fmt(self.wall_time, ' ms', 1e3)} "
                f"(setup={fmt(self.setup_time, ' ms', 1e3)} "
                f"solve={fmt(self.solve_time, ' ms', 1e3)}) "
                f"gpu={fmt(self.gpu_time, ' ms', 1e3)} E_gpu={fmt(self.gpu_energy, ' J')} "
                f"cpu={fmt(self.host_cpu_time, ' s')}")
