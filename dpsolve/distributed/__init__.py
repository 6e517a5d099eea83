"""Distributed sparse matrices over MPI: rows partitioned across ranks (PETSc's MATMPIAIJ).

* :class:`Partition` (``partition.py``): global row offsets, ``owner``, ``rows``.
* :class:`HaloPlan` (``halo.py``): what each rank sends to and receives from whom in one SpMV.
* :class:`DistributedMatrix` (``matrix.py``), :func:`scatter`, :func:`gather`.
* :class:`Transport`, :class:`MpiTransport`, :class:`CommStats` (``transport.py``).
"""
from .halo import HaloPlan
from .matrix import DistributedMatrix, gather, scatter
from .partition import Partition
from .transport import TRANSPORTS, CommStats, MpiTransport, Transport

__all__ = ["Partition", "HaloPlan", "DistributedMatrix", "scatter", "gather", "Transport",
           "MpiTransport", "CommStats", "TRANSPORTS"]
