"""Transports: how the ranks of a distributed solve exchange data (the data plane).

A transport does two things a Krylov iteration needs, and counts what they cost:

* ``allreduce(buf)``: the global sum of a small 1-D array, in place (the inner products and
  norms; the distributed solvers add one error-flag slot to each, see ``solvers.py``);
* ``halo_start(plan, send, recv)`` / ``halo_finish(handle)``: the non-blocking exchange of a
  :class:`~dpsolve.distributed.halo.HaloPlan` (``send``: the packed values ``x_local[send_idx]``,
  length ``plan.n_send``; ``recv``: the ghost buffer, length ``plan.n_ghost``), so that the local
  part of an SpMV runs while the messages travel.

The control plane (the checks before a solve, the error messages and the report gathered after
it) goes through the matrix's mpi4py communicator, not through the transport, so a GPU transport
(NCCL) need provide only the data plane.

:data:`TRANSPORTS` maps a name to a factory ``f(comm) -> Transport``; a GPU transport registers
itself there.
"""
from __future__ import annotations

import socket
import time
import zlib
from dataclasses import dataclass, fields

import numpy as np

HALO_TAG = 0x4841          # "HA": the tag of every halo message


@dataclass
class CommStats:
    """What a transport's data plane did on this rank.

    ``allreduce_calls``, ``allreduce_seconds``: all-reduces and the seconds spent inside them;
    ``halo_calls``, ``halo_seconds``: halo exchanges and the seconds spent inside ``halo_start``
    and ``halo_finish`` (the waiting, not the local SpMV overlapped with it);
    ``allreduce_wait_seconds``: of ``allreduce_seconds``, the time this rank waited for the
    last rank to arrive (ranks of one host only, whose monotonic clocks are one clock; where the
    ranks span hosts it stays 0): load imbalance, not the transport's latency;
    ``bytes_sent``: halo values sent plus this rank's all-reduce payload (``buf.nbytes`` per
    call)."""
    allreduce_calls: int = 0
    allreduce_seconds: float = 0.0
    allreduce_wait_seconds: float = 0.0
    halo_calls: int = 0
    halo_seconds: float = 0.0
    bytes_sent: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    def copy(self) -> "CommStats":
        return CommStats(**{f.name: getattr(self, f.name) for f in fields(self)})

    def add(self, other: "CommStats", times: int = 1) -> None:
        """Count ``times`` more of what ``other`` did (a captured graph's calls per replay)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + times * getattr(other, f.name))

    def since(self, before: "CommStats") -> "CommStats":
        """What was done after the snapshot ``before``."""
        return CommStats(**{f.name: getattr(self, f.name) - getattr(before, f.name)
                            for f in fields(self)})


class Transport:
    """The interface (see the module docstring). Subclasses set ``name`` and implement the
    methods; ``stats`` is a :class:`CommStats` they keep up to date."""
    name: str = "?"

    def __init__(self):
        self.stats = CommStats()

    def allreduce(self, buf) -> None:
        """Replace the small 1-D array ``buf`` with its sum over the ranks, identically on
        every rank."""
        raise NotImplementedError

    def halo_start(self, plan, send, recv):
        """Start the exchange of ``plan``: neighbour ``plan.send_ranks[i]`` gets
        ``send[send_offsets[i]:send_offsets[i + 1]]``, and ``recv[recv_offsets[i]:...]`` will
        hold what ``plan.recv_ranks[i]`` sends. Returns a handle for :meth:`halo_finish`."""
        raise NotImplementedError

    def halo_finish(self, handle) -> None:
        """Wait for the exchange started with ``handle``; ``recv`` is then complete."""
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the transport holds (a transport a solver made for one solve is closed
        at its end; one passed in by the caller is left open)."""

    @property
    def closed(self) -> bool:
        """Whether ``close`` has run (a solve then refuses the transport by name)."""
        return getattr(self, "comm", True) is None


def _is_device(a) -> bool:
    """A CuPy (or other CUDA) array: staged through host memory by :class:`MpiTransport`."""
    return hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray)


def _to_host(a) -> np.ndarray:
    return np.ascontiguousarray(a.get()) if _is_device(a) else a


def _bytes(a):
    """A contiguous NumPy array as raw bytes for MPI (any dtype, complex included)."""
    return a.reshape(-1).view(np.uint8)


class _Halo:
    """An exchange in flight: its requests, the caller's ``recv`` and, for a device ``recv``,
    the host buffer staged into it at the end; ``send`` is kept alive until then; ``t`` the
    seconds spent in halo_start."""
    __slots__ = ("requests", "recv", "host_recv", "send", "t")

    def __init__(self, requests, recv, host_recv, send, t):
        self.requests, self.recv, self.host_recv = requests, recv, host_recv
        self.send, self.t = send, t


class MpiTransport(Transport):
    """The MPI transport (mpi4py): host NumPy arrays; device arrays (CuPy, anything with
    ``.get``/``.set`` and ``__cuda_array_interface__``) are staged through host copies.

    ``allreduce`` is deterministic: the ranks' buffers are all-gathered and summed in rank order
    on every rank (rank 0's, plus rank 1's, ...), so the result is bit for bit the same on every
    rank and in every run with the same number of ranks, whatever the timing -- unlike
    ``MPI_Allreduce``, whose reduction order is unspecified. It costs ``size`` times the payload,
    which for the few scalars of a Krylov iteration is nothing. Halos use non-blocking
    Isend/Irecv with the tag ``HALO_TAG``.
    """
    name = "mpi"

    def __init__(self, comm):
        super().__init__()
        from mpi4py import MPI        # noqa: F401  (a clear ImportError without mpi4py)
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._host_id = float(zlib.crc32(socket.gethostname().encode()))

    def allreduce(self, buf) -> None:
        t0 = time.perf_counter()
        dev = _is_device(buf)
        host = _to_host(buf)
        if host.ndim != 1:
            raise ValueError(f"allreduce takes a 1-D array, got shape {host.shape}")
        host = np.ascontiguousarray(host)
        # each rank's values, then its arrival time and host (two float64) in the same message
        row = np.empty(host.nbytes + 16, dtype=np.uint8)
        row[:host.nbytes] = _bytes(host)
        t_enter = time.monotonic()
        row[host.nbytes:].view(np.float64)[:] = (t_enter, self._host_id)
        gathered = np.empty((self.size, row.size), dtype=np.uint8)
        self.comm.Allgather(row, gathered)
        values = gathered[:, :host.nbytes].copy().view(host.dtype)
        when = gathered[:, host.nbytes:].copy().view(np.float64)
        acc = values[0].copy()
        for r in range(1, self.size):        # in rank order: the same bits everywhere
            acc += values[r]
        if dev:
            buf.set(acc)
        else:
            buf[...] = acc
        st = self.stats
        st.allreduce_calls += 1
        st.bytes_sent += host.nbytes
        st.allreduce_seconds += time.perf_counter() - t0
        if (when[:, 1] == self._host_id).all():  # one host: one monotonic clock
            st.allreduce_wait_seconds += max(0.0, float(when[:, 0].max()) - t_enter)

    def halo_start(self, plan, send, recv):
        t0 = time.perf_counter()
        comm = self.comm
        host_send = _to_host(send)
        host_recv = (np.empty(recv.shape, dtype=recv.dtype) if _is_device(recv) else recv)
        if host_send.shape != (plan.n_send,) or host_recv.shape != (plan.n_ghost,):
            raise ValueError(f"halo buffers of lengths {host_send.shape} and {host_recv.shape} "
                             f"do not fit the plan ({plan.n_send} sent, {plan.n_ghost} "
                             f"received)")
        reqs = []
        ro = plan.recv_offsets
        for i, r in enumerate(plan.recv_ranks):
            reqs.append(comm.Irecv(_bytes(host_recv[ro[i]:ro[i + 1]]), source=r, tag=HALO_TAG))
        so = plan.send_offsets
        for i, r in enumerate(plan.send_ranks):
            reqs.append(comm.Isend(_bytes(host_send[so[i]:so[i + 1]]), dest=r, tag=HALO_TAG))
        st = self.stats
        st.halo_calls += 1
        st.bytes_sent += host_send.nbytes
        return _Halo(reqs, recv, host_recv if host_recv is not recv else None, host_send,
                     time.perf_counter() - t0)

    def halo_finish(self, handle) -> None:
        from mpi4py import MPI
        t0 = time.perf_counter()
        if handle.requests:
            MPI.Request.Waitall(handle.requests)
        if handle.host_recv is not None:
            handle.recv.set(handle.host_recv)
        self.stats.halo_seconds += handle.t + (time.perf_counter() - t0)
        handle.requests, handle.send = [], None

    def barrier(self) -> None:
        self.comm.Barrier()

    def close(self) -> None:
        self.comm = None


def _nccl(comm):
    from .gpu import NcclTransport          # CuPy's NCCL, imported only when asked for
    return NcclTransport(comm)


# name -> factory(comm); "nccl" moves device arrays only (variant "cuda")
TRANSPORTS = {"mpi": MpiTransport, "nccl": _nccl}


def make_transport(transport, comm):
    """A Transport from a name of :data:`TRANSPORTS` (made for this solve: ``owned`` True) or a
    Transport instance (the caller's: ``owned`` False). Returns (transport, owned)."""
    if isinstance(transport, Transport):
        return transport, False
    return TRANSPORTS[transport](comm), True
