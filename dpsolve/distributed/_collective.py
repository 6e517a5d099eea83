"""Errors that every rank raises together, never one rank alone (which would leave the others
waiting in their next collective forever).

Each collective constructor or check first finds its own rank's problem locally (a string, or
None), then :func:`agree` all-gathers the problems; if any rank has one, every rank raises the
same ValueError naming the rank(s). Such an exception carries ``everywhere = True``: the command
line prints it once (on rank 0), not once per rank.
"""
from __future__ import annotations


def describe(exc) -> str:
    """An exception as the error messages name it: ``Type: message``, or ``Type`` alone when
    the message is empty (a bare ``KeyboardInterrupt``)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def everywhere(exc):
    """Mark ``exc`` as raised identically on every rank; returns it."""
    exc.everywhere = True
    return exc


def format_problems(problems) -> str:
    """"rank 1: b contains NaN or Inf; ranks 0, 2: ..." from a list indexed by rank (None: no
    problem); ranks with the same message are named together."""
    by_msg: dict[str, list[int]] = {}
    for r, p in enumerate(problems):
        if p:
            by_msg.setdefault(p, []).append(r)
    parts = []
    for msg, ranks in by_msg.items():
        who = (f"rank {ranks[0]}" if len(ranks) == 1
               else "ranks " + ", ".join(str(r) for r in ranks))
        parts.append(f"{who}: {msg}")
    return "; ".join(parts)


def agree(comm, problem, what=""):
    """All-gather each rank's ``problem`` (str or None); if any rank has one, raise on every rank
    a ValueError ``"{what}rank r: problem; ..."``. Collective."""
    problems = comm.allgather(problem or None)
    if any(problems):
        raise everywhere(ValueError(f"{what}{format_problems(problems)}"))


def disagreement(name, values) -> str | None:
    """"ranks disagree on NAME: rank 0: 'cg'; ranks 1, 2: 'bicg'" when the per-rank ``values``
    (a list indexed by rank) are not all equal, else None."""
    if all(v == values[0] for v in values):
        return None
    groups: dict[str, list[int]] = {}
    for r, v in enumerate(values):
        groups.setdefault(repr(v), []).append(r)
    parts = []
    for shown, ranks in groups.items():
        who = (f"rank {ranks[0]}" if len(ranks) == 1
               else "ranks " + ", ".join(str(r) for r in ranks))
        parts.append(f"{who}: {shown}")
    return f"ranks disagree on {name} ({'; '.join(parts)})"


def exchange_counts(comm, dest, size):
    """The counts and displacements of an all-to-all where this rank sends entry i (in rank order
    of ``dest``, already sorted) to rank ``dest[i]``: (send, recv, send displacements, receive
    displacements), int64 arrays of ``size``. Collective (one Alltoall of the counts)."""
    import numpy as np
    from mpi4py import MPI
    send = (np.bincount(dest, minlength=size) if len(dest)
            else np.zeros(size, np.int64)).astype(np.int64)
    recv = np.empty(size, dtype=np.int64)
    comm.Alltoall([send, MPI.INT64_T], [recv, MPI.INT64_T])
    sdis = np.concatenate([[0], np.cumsum(send)[:-1]]).astype(np.int64)
    rdis = np.concatenate([[0], np.cumsum(recv)[:-1]]).astype(np.int64)
    return send, recv, sdis, rdis
