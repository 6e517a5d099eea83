"""The report of a distributed solve, the same on every rank."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class DistributedReport:
    method: str
    variant: str
    transport: str
    ranks: int
    dtype: str
    n: int                               # global order
    nnz: int                             # global stored entries
    single_reduction: bool = False       # cg: the single-reduction CG (one all-reduce an iteration)
    iterations: int | None = None
    info: int | None = None
    converged: bool | None = None
    residual_norm: float | None = None   # true global ||b - A x||, recomputed after the solve
    tolerance: float | None = None       # max(rtol * ||b||, atol), ||b|| global
    restarts: int = 0                    # restarts from the true residual (dpsolve's rule)
    wall_times: tuple = field(default_factory=tuple)   # s, per rank (rank order): the call
    comm_times: tuple = field(default_factory=tuple)   # s, per rank: allreduce + halo seconds
    wall_time: float | None = None       # s, max over ranks
    comm_time: float | None = None       # s, max over ranks
    allreduce_calls: int = 0             # per rank (every rank makes the same calls)
    halo_calls: int = 0                  # per rank, each an exchange with all of its neighbours
    allreduce_seconds: tuple = field(default_factory=tuple)   # s, per rank
    halo_seconds: tuple = field(default_factory=tuple)        # s, per rank
    bytes_sent: int = 0                  # all ranks together: halo values + allreduce payload
    bytes_sent_per_rank: tuple = field(default_factory=tuple)
    rows_per_rank: tuple = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        from .._units import human_time

        def num(v, spec=".3g"):
            return "n/a" if v is None else f"{v:{spec}}"
        share = (f" ({100 * self.comm_time / self.wall_time:.0f} %)"
                 if self.wall_time and self.comm_time is not None else "")
        method = self.method + (" (single reduction)" if self.single_reduction else "")
        return (f"{method}/{self.variant}/{self.transport} {self.ranks} rank"
                f"{'s' if self.ranks != 1 else ''} {self.dtype} n={self.n} nnz={self.nnz}: "
                f"info={self.info} it={self.iterations} |r|={num(self.residual_norm)} "
                f"wall={human_time(self.wall_time)} comm={human_time(self.comm_time)}{share} "
                f"(max over ranks) allreduce={self.allreduce_calls} halo={self.halo_calls} "
                f"sent={_human_bytes(self.bytes_sent)}")


def _human_bytes(n) -> str:
    from ..matrices import human_bytes
    return human_bytes(n)
