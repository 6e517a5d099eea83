"""A distributed system set up once and solved for many right-hand sides (PETSc's
``KSPSetOperators`` once, then ``KSPSolve`` per b): ``dd.prepare(A, "cg", ...)``.

A one-shot ``dd.cg(A, b, variant="cuda" | "graph")`` checks A, uploads each rank's rows and
builds the halo in every call: at 8M rows a rank on two H200 that was 360-390 ms beside a
349 ms solve. A :class:`DistributedSystem` keeps, per rank, what depends on A alone in a
:class:`SetupCache`: A's checked magnitudes, A in the working dtype (and as the solve scales
it), and for the GPU variants the device state (rows, halo, vectors) and variant graph's
captured graph. Each ``solve(b)`` makes every check of b, x0 and the options that the one-shot
call makes, collectively, and gives the one-shot call's x and info bit for bit.

A is a snapshot: ``prepare`` copies this rank's values, so changing A's arrays afterwards does
not reach the system. Collective: ``prepare``, ``solve`` and ``close`` are called on every rank,
in the same order. ``close()`` (or a ``with`` block) frees the device state and graphs, and a
transport the system made from a name. A graph holds the NCCL communicator (ncclCommDestroy
waits for every graph that captured it): closing a transport of your own first frees the
graphs of the systems prepared on it (``NcclTransport.held_by``), never a hang.
"""
from __future__ import annotations

from .matrix import DistributedMatrix
from .solvers import require_distributed, solve
from .transport import TRANSPORTS, make_transport


class SetupCache:
    """What a distributed solve derives from A alone, kept between the solves of one system
    (``solvers._solve`` and ``gpu.py`` read and fill it; every rank holds the same keys, so
    the collectives they skip are skipped on every rank).

    ``mags``: ``solvers.magnitudes(A)``; ``matrices``: (dtype, scales) -> (A in the working
    dtype as the solve runs it, its scaling exponent); ``adjoints``: id of such an A -> its
    A^H (the host variant's BiCG, ``solvers._adjoint``); ``states``: key -> a GPU variant's
    state (``gpu.cached_state``; BiCG's holds its A^H)."""

    def __init__(self):
        self.mags = None
        self.matrices = {}
        self.adjoints = {}
        self.states = {}

    def drop_states(self) -> None:
        """Free the device states and graphs (after an error, and at ``close``)."""
        for entry in self.states.values():
            release = getattr(entry["state"], "release", None)
            if release is not None:
                entry["state"].stream.synchronize()
                release()
        self.states.clear()


class DistributedSystem:
    """``dd.prepare``'s result: ``solve(b, x0=None, *, rtol, atol, maxiter, callback,
    full_output, energy)`` as ``dd.<method>(A, b, ...)`` with the options given to prepare (a
    block b of k columns too); ``close()``. See the module docstring."""

    def __init__(self, method, A, *, M=None, variant="host", transport="mpi", format="auto",
                 single_reduction=False):
        require_distributed(A)                 # before the snapshot reads A
        self.method, self.M, self.variant, self.format = method, M, variant, format
        self.single_reduction = single_reduction
        self.A = DistributedMatrix(A.comm, A.partition, A.local.copy(), A.remote.copy(),
                                   A.ghosts, A.halo)               # the snapshot
        # a transport named here is made once, for every solve (collective); anything else is
        # passed on as it is, for the solve's own checks to name
        owned = isinstance(transport, str) and transport in TRANSPORTS
        self.transport, self._owned = (make_transport(transport, A.comm) if owned
                                       else (transport, False))
        self.cache = SetupCache()
        self._closed = False
        if hasattr(self.transport, "held_by"):    # NCCL: its close frees this system's graphs
            self.transport.held_by(self)

    def solve(self, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, callback=None,
              full_output=False, energy=False):
        """``dd.<method>(A, b, x0, ...)`` on the prepared A (collective)."""
        if self._closed:
            raise RuntimeError("this distributed system is closed; prepare it again")
        return solve(self.method, self.A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter,
                     M=self.M, callback=callback, variant=self.variant,
                     transport=self.transport, format=self.format, full_output=full_output,
                     energy=energy, single_reduction=self.single_reduction, cache=self.cache)

    def close(self) -> None:
        """Free the device state and graphs, and a transport made by ``prepare`` (collective;
        a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        self.cache.drop_states()
        if self._owned:
            self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def prepare(A, method="cg", *, M=None, variant="host", transport="mpi", format="auto",
            single_reduction=False) -> DistributedSystem:
    """Set up the distributed ``method`` ("cg", "bicg" or "bicgstab") on ``A`` once, for many
    solves (collective); the options are ``dd.<method>``'s. Returns a
    :class:`DistributedSystem`: ``solve(b, ...)`` per right-hand side, then ``close()``."""
    return DistributedSystem(method, A, M=M, variant=variant, transport=transport,
                             format=format, single_reduction=single_reduction)
