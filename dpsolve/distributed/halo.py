"""The halo plan: which values each rank sends to, and receives from, which neighbours in one
SpMV (PETSc's VecScatter of MATMPIAIJ, computed once per matrix).

A rank's rows reference columns owned by other ranks: its *ghosts*, kept as sorted unique global
indices. Sorted global indices are grouped by owner rank in rank order (ownership is contiguous),
so the ghost vector receives neighbour ``recv_ranks[i]``'s values into
``recv[recv_offsets[i]:recv_offsets[i + 1]]``. In the other direction, neighbour
``send_ranks[i]`` asked for the local rows ``send_idx[send_offsets[i]:send_offsets[i + 1]]``: a
transport sends ``x_local[send_idx]`` (packed once, then sliced per neighbour).

:meth:`HaloPlan.build` is collective: each rank tells each owner what it needs (an all-to-all of
counts, then of the indices), and every rank checks the result, raising on every rank if any
rank's ghosts are wrong. :meth:`HaloPlan.from_requests` is the same plan made from the exchanged
requests without a communicator (the unit tests use it to build several ranks' plans in one
process).
"""
from __future__ import annotations

import numpy as np

from ._collective import agree, disagreement, everywhere, exchange_counts, format_problems
from .partition import Partition


def _ghost_problem(ghosts, partition: Partition, rank: int) -> str | None:
    """Why ``ghosts`` are not this rank's sorted unique ghost indices, or None."""
    if ghosts.ndim != 1:
        return f"ghost indices must be 1-D, got shape {ghosts.shape}"
    if ghosts.size == 0:
        return None
    if ghosts.dtype.kind not in "iu":
        return f"ghost indices must be integers, got dtype {ghosts.dtype}"
    if (np.diff(ghosts) <= 0).any():
        return "ghost indices must be sorted and unique"
    if ghosts[0] < 0 or ghosts[-1] >= partition.n:
        bad = int(ghosts[0]) if ghosts[0] < 0 else int(ghosts[-1])
        return f"ghost index {bad} is outside the partition's rows 0:{partition.n}"
    start, stop = partition.rows(rank)
    mine = ghosts[(ghosts >= start) & (ghosts < stop)]
    if mine.size:
        return (f"ghost index {int(mine[0])} is owned by this rank itself (rows "
                f"{start}:{stop}), not by another rank")
    return None


class HaloPlan:
    """One rank's halo exchange. Attributes:

    ``rank``, ``size``           this rank and the number of ranks
    ``send_ranks``              tuple of the ranks this rank sends to, ascending
    ``send_offsets``            int64, ``len(send_ranks) + 1``: neighbour i's slice of ``send_idx``
    ``send_idx``                int32 local row indices to pack, concatenated per neighbour
                                (sorted within each)
    ``recv_ranks``              tuple of the ranks this rank receives from, ascending
    ``recv_offsets``            int64, ``len(recv_ranks) + 1``: neighbour i's slice of the ghost
                                vector (ghosts grouped by owner in rank order, sorted within)
    ``n_send``, ``n_ghost``     values sent / received per exchange

    ``bytes_per_exchange(itemsize)``: bytes this rank sends in one exchange.
    """

    __slots__ = ("rank", "size", "send_ranks", "send_offsets", "send_idx", "recv_ranks",
                 "recv_offsets")

    def __init__(self, rank, size, send_ranks, send_offsets, send_idx, recv_ranks, recv_offsets):
        self.rank, self.size = int(rank), int(size)
        self.send_ranks = tuple(int(r) for r in send_ranks)
        self.send_offsets = np.asarray(send_offsets, dtype=np.int64)
        self.send_idx = np.asarray(send_idx, dtype=np.int32)
        self.recv_ranks = tuple(int(r) for r in recv_ranks)
        self.recv_offsets = np.asarray(recv_offsets, dtype=np.int64)
        for a in (self.send_offsets, self.send_idx, self.recv_offsets):
            a.setflags(write=False)

    @property
    def n_send(self) -> int:
        return int(self.send_offsets[-1])

    @property
    def n_ghost(self) -> int:
        return int(self.recv_offsets[-1])

    def bytes_per_exchange(self, itemsize) -> int:
        """Bytes this rank sends in one halo exchange of values of ``itemsize`` bytes."""
        return self.n_send * int(itemsize)

    def __repr__(self):
        return (f"HaloPlan(rank={self.rank}, send={dict(self._pairs(True))}, "
                f"recv={dict(self._pairs(False))})")

    def _pairs(self, send):
        ranks, off = ((self.send_ranks, self.send_offsets) if send
                      else (self.recv_ranks, self.recv_offsets))
        return [(r, int(off[i + 1] - off[i])) for i, r in enumerate(ranks)]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_requests(cls, rank, partition: Partition, ghosts, requested) -> "HaloPlan":
        """The plan of ``rank`` from its ``ghosts`` (sorted unique global indices owned by other
        ranks) and ``requested[s]``, the global indices rank ``s`` asked this rank for (sorted;
        empty where none). No communication; a bad input is a ValueError naming it."""
        ghosts = np.asarray(ghosts, dtype=np.int64) if np.size(ghosts) else np.empty(0, np.int64)
        problem = _ghost_problem(ghosts, partition, rank)
        if problem:
            raise ValueError(f"rank {rank}: {problem}")
        start, stop = partition.rows(rank)
        if stop - start > np.iinfo(np.int32).max:
            raise ValueError(f"rank {rank} owns {stop - start} rows, more than int32 send "
                             f"indices can address")
        owners = partition.owner(ghosts)
        counts = np.bincount(owners, minlength=partition.size) if ghosts.size else \
            np.zeros(partition.size, np.int64)
        recv_ranks = [int(r) for r in np.flatnonzero(counts)]
        recv_offsets = np.concatenate([[0], np.cumsum(counts[recv_ranks])]).astype(np.int64)
        send_ranks, send_offsets, send_idx = [], [0], []
        for s in range(partition.size):
            req = np.asarray(requested[s], dtype=np.int64) if np.size(requested[s]) else None
            if req is None:
                continue
            if s == rank:
                raise ValueError(f"rank {rank} asked itself for {req.size} value(s)")
            if req.min() < start or req.max() >= stop:
                bad = int(req.min()) if req.min() < start else int(req.max())
                raise ValueError(f"rank {s} asked rank {rank} for global row {bad}, which rank "
                                 f"{rank} does not own (its rows are {start}:{stop}): do the "
                                 f"ranks use the same partition?")
            if (np.diff(req) <= 0).any():
                raise ValueError(f"rank {s} asked rank {rank} for indices that are not sorted "
                                 f"and unique")
            send_ranks.append(s)
            send_idx.append(req - start)
            send_offsets.append(send_offsets[-1] + req.size)
        send_idx = np.concatenate(send_idx) if send_idx else np.empty(0, np.int64)
        return cls(rank, partition.size, send_ranks, send_offsets, send_idx, recv_ranks,
                   recv_offsets)

    @classmethod
    def build(cls, ghosts, partition: Partition, comm) -> "HaloPlan":
        """The plan of this rank (``comm.Get_rank()``), computed collectively from every rank's
        ghosts: an all-to-all of request counts, then an all-to-allv of the requested indices.
        The ranks' partitions must agree and each rank's ghosts must be sorted, unique, within
        the partition and owned by other ranks; otherwise every rank raises the same ValueError
        naming the offending rank(s)."""
        from mpi4py import MPI
        rank, size = comm.Get_rank(), comm.Get_size()
        ghosts = np.asarray(ghosts)
        ghosts = ghosts.astype(np.int64) if ghosts.size else np.empty(0, np.int64)
        problem = None
        if partition.size != size:
            problem = (f"the partition has {partition.size} rank(s), the communicator {size}")
        else:
            problem = _ghost_problem(ghosts, partition, rank)
        facts = comm.allgather((problem, partition.offsets.tolist()))
        problems = [p for p, _ in facts]
        differ = disagreement("the partition's row offsets", [o for _, o in facts])
        if any(problems) or differ:
            msg = "; ".join(m for m in (differ, format_problems(problems)) if m)
            raise everywhere(ValueError(f"halo plan: {msg}"))
        want, give, sdis, rdis = exchange_counts(comm, partition.owner(ghosts), size)
        asked = np.empty(int(give.sum()), dtype=np.int64)
        comm.Alltoallv([ghosts, (want.tolist(), sdis.tolist()), MPI.INT64_T],
                       [asked, (give.tolist(), rdis.tolist()), MPI.INT64_T])
        requested = [asked[rdis[s]:rdis[s] + give[s]] for s in range(size)]
        plan, problem = None, None
        try:
            plan = cls.from_requests(rank, partition, ghosts, requested)
        except ValueError as e:
            problem = str(e)
        agree(comm, problem, "halo plan: ")
        return plan
