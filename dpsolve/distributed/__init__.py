"""Distributed solvers over MPI: one rank per GPU (here, per process), rows partitioned across the
ranks, as PETSc's MATMPIAIJ and Ginkgo's distributed matrices.

    from mpi4py import MPI
    import dpsolve.distributed as dd

    A = dd.DistributedMatrix.laplace3d(64, 64, 64, MPI.COMM_WORLD)    # each rank: its rows only
    b = A.matvec(np.ones(A.n_local), dd.MpiTransport(MPI.COMM_WORLD)) # this rank's rows of b
    x, info, report = dd.cg(A, b, rtol=1e-8, full_output=True)        # x: this rank's rows
    if A.rank == 0:
        print(report.summary())

Pieces (each its own module):

* :class:`Partition` (``partition.py``): global row offsets, ``owner``, ``rows``.
* :class:`HaloPlan` (``halo.py``): what each rank sends to and receives from whom in one SpMV,
  computed once, collectively.
* :class:`DistributedMatrix` (``matrix.py``): a rank's rows split into a local (diagonal) CSR and
  a remote CSR over compressed ghost columns; ``matvec`` overlaps the halo exchange with the local
  product; ``conj_transpose`` (A^H, for BiCG); constructors ``from_global``, ``from_rows``,
  ``laplace3d``; vector helpers :func:`scatter` and :func:`gather`.
* :class:`Transport`, :class:`MpiTransport`, :class:`CommStats` (``transport.py``): the data
  plane (global sums, halo exchanges) and what it cost; ``TRANSPORTS`` maps names to them.
* :func:`cg`, :func:`bicg`, :func:`bicgstab` (``solvers.py``): SciPy's semantics on local vectors,
  running the reference solvers of ``dpsolve.reference`` through :class:`DistributedSpace`;
  ``VARIANTS`` maps a variant name to its implementation; a block b (n_local, k) is solved
  column by column on one set-up.
* :func:`prepare` (``prepared.py``): a :class:`DistributedSystem` set up once (A's checks, A
  in the working dtype, a GPU variant's rows, halo and graph) and solved per right-hand side.
* :class:`DistributedReport`, :class:`DistributedBlockReport` (a block b of k columns: one
  report per column) (``report.py``), :class:`~dpsolve.DistributedError`.

Every collective checks its inputs collectively: a bad input on one rank is the same error on
every rank, never a hang. mpi4py is imported only where a communicator is used (``pip install
-e '.[mpi]'``).
"""
from .._errors import DistributedError
from .halo import HaloPlan
from .matrix import DistributedMatrix, gather, scatter
from .partition import Partition
from .prepared import DistributedSystem, prepare
from .report import DistributedBlockReport, DistributedReport
from .solvers import (METHODS, VARIANTS, DistributedJob, DistributedSpace, Outcome, bicg,
                      bicgstab, cg, run_host, solve)
from .transport import TRANSPORTS, CommStats, MpiTransport, Transport

__all__ = ["Partition", "HaloPlan", "DistributedMatrix", "scatter", "gather", "Transport",
           "MpiTransport", "CommStats", "TRANSPORTS", "cg", "bicg", "bicgstab", "solve",
           "METHODS", "VARIANTS", "DistributedJob", "DistributedSpace", "Outcome", "run_host",
           "DistributedReport", "DistributedBlockReport", "DistributedError", "prepare",
           "DistributedSystem"]
