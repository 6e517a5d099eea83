"""The report of a distributed solve, the same on every rank."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .._block import ColumnFigures
from ._collective import format_problems


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
    solve_times: tuple = field(default_factory=tuple)  # s, per rank: the iterations (restarts
    #                                      and the true residual included), without the set-up
    wall_time: float | None = None       # s, max over ranks
    solve_time: float | None = None      # s, MIN over ranks (None: a zero b): the ranks end
    #                                      together, and one whose set-up ended first waits for
    #                                      the others at the first all-reduce; the last to start
    #                                      waited for none (the max held the set-ups' skew)
    comm_time: float | None = None       # s, max over ranks (None: not timed, variant graph)
    allreduce_calls: int = 0             # per rank (every rank makes the same calls)
    halo_calls: int = 0                  # per rank, each an exchange with all of its neighbours
    allreduce_seconds: tuple = field(default_factory=tuple)   # s, per rank
    allreduce_wait_seconds: tuple = field(default_factory=tuple)  # s, per rank: of those, the
    #                                      wait for the last rank to arrive (ranks of one host)
    halo_seconds: tuple = field(default_factory=tuple)        # s, per rank
    bytes_sent: int = 0                  # all ranks together: halo values + allreduce payload
    bytes_sent_per_rank: tuple = field(default_factory=tuple)
    rows_per_rank: tuple = field(default_factory=tuple)
    # GPU energy (NVML's total-energy counter), only with energy=True; see aggregate_energy
    energy_joules: float | None = None   # J, summed over the distinct GPUs; None: not asked, or
                                         # a GPU without a reading (energy_note says why)
    energy_per_gpu: tuple = field(default_factory=tuple)   # ((gpu, J or None), ...): each
                                         # physical GPU once (NVML UUID), in order of first rank
    energy_note: str | None = None       # why energy_joules is None although energy was asked

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        from .._units import human_time

        def num(v, spec=".3g"):
            return "n/a" if v is None else f"{v:{spec}}"
        share = (f" ({100 * self.comm_time / self.wall_time:.0f} %)"
                 if self.wall_time and self.comm_time is not None else "")
        energy = ""
        if self.energy_joules is not None:
            g = len(self.energy_per_gpu)
            energy = f" E_gpu={self.energy_joules:.3g} J ({g} GPU{'s' if g != 1 else ''})"
        elif self.energy_note:
            energy = f" E_gpu=n/a ({self.energy_note})"
        method = self.method + (" (single reduction)" if self.single_reduction else "")
        return (f"{method}/{self.variant}/{self.transport} {self.ranks} rank"
                f"{'s' if self.ranks != 1 else ''} {self.dtype} n={self.n} nnz={self.nnz}: "
                f"info={self.info} it={self.iterations} |r|={num(self.residual_norm)} "
                f"wall={human_time(self.wall_time)} (solve {human_time(self.solve_time)}, min) "
                f"comm={'not timed' if self.comm_time is None else human_time(self.comm_time)}"
                f"{share} "
                f"(max over ranks) allreduce={self.allreduce_calls} halo={self.halo_calls} "
                f"sent={_human_bytes(self.bytes_sent)}{energy}")


@dataclass
class DistributedBlockReport(ColumnFigures):
    """A distributed solve of a block b (each rank's rows of k right-hand sides), its columns
    solved one after another on one set-up: a :class:`DistributedReport` per column
    (``columns``), the same on every rank, and the call's wall time (s, this rank's); ``k``,
    ``iterations``, ``info``, ``residual_norm`` from the columns."""
    columns: list = field(default_factory=list)
    wall_time: float | None = None
    path: str = "columns, one set-up"

    @property
    def energy_joules(self) -> float | None:
        """J summed over the columns' solves (None when a column has no reading)."""
        return self.summed("energy_joules")

    def summary(self) -> str:
        from .._units import human_time
        return f"{self.heading()}, wall {human_time(self.wall_time)}"


def aggregate_energy(records, min_seconds=0.0):
    """The GPU energy of a distributed solve from its ranks' records (a list in rank order, each
    a dict: ``gpu`` the GPU's name, the same on every rank that uses it (NVML's UUID);
    ``joules`` NVML's counter over the rank's window, or None; ``t_start``, ``t_end`` the
    window's edges in seconds; ``reason`` why there is no reading, or None).

    Returns ``(total, per_gpu, note)``: ``per_gpu`` is ``((gpu, joules or None), ...)``, one
    entry per distinct GPU in order of its first rank; ``total`` their sum in J, or None when
    any GPU has no reading (never a partial sum, never a silent 0), ``note`` then saying why,
    rank by rank; ``note`` is None when ``total`` is not.

    Each physical GPU counts once. Ranks sharing a GPU all read its one counter (the whole
    GPU's energy, every process's work on it) over nearly the same window, so adding their
    readings would count it once per rank. The rule: a GPU's reading is that of its rank with
    the longest window (the lowest such rank on a tie), among the ranks that have a reading.
    The solvers open every window just after one all-reduce (of ||b||) and close it just after
    the solve's last (the true residual), so the longest window covers the others but for the
    skew of a collective. A window shorter than ``min_seconds`` gives no reading: NVML's counter
    ticks about every 100 ms, so a short window reads 0 or one tick (the single-GPU report's
    rule, ``ENERGY_MIN_SECONDS``).
    """
    groups: dict = {}
    for rank, rec in enumerate(records):
        gpu = rec.get("gpu") or f"rank {rank}'s GPU"
        groups.setdefault(gpu, []).append((rank, rec))
    reasons = [None] * len(records)
    per_gpu = []
    for gpu, recs in groups.items():
        read = [(rank, rec) for rank, rec in recs if rec.get("joules") is not None]
        joules = None
        if read:
            rank, rec = max(read, key=lambda p: (p[1]["t_end"] - p[1]["t_start"], -p[0]))
            seconds = rec["t_end"] - rec["t_start"]
            if seconds < min_seconds:
                reasons[rank] = (f"the solve took {seconds:.3g} s on {gpu}, under the "
                                 f"{min_seconds:g} s that NVML's energy counter (about one "
                                 f"tick per 100 ms) needs")
            else:
                joules = float(rec["joules"])
        else:
            for rank, rec in recs:
                reasons[rank] = rec.get("reason") or f"no energy reading from {gpu}"
        per_gpu.append((gpu, joules))
    if not per_gpu:
        return None, (), "no ranks"
    if any(j is None for _, j in per_gpu):
        return None, tuple(per_gpu), format_problems(reasons)
    return sum(j for _, j in per_gpu), tuple(per_gpu), None


def _human_bytes(n) -> str:
    from ..matrices import human_bytes
    return human_bytes(n)
