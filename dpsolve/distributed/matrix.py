"""The distributed sparse matrix: rows partitioned over the ranks, each rank's block split into a
local (diagonal) part and a remote (off-diagonal) part with compressed ghost columns, as PETSc's
MATMPIAIJ and Ginkgo's distributed matrix.

On rank ``r``, owning global rows ``start:stop`` (``partition.rows(r)``):

* ``local``:  SciPy CSR, ``n_local x n_local``, the columns ``start:stop``, as local indices;
* ``remote``: SciPy CSR, ``n_local x n_ghost``, every other column, as indices into ``ghosts``;
* ``ghosts``: int64, the sorted global indices of those columns (hence grouped by owner rank);
* ``halo``:   the :class:`~dpsolve.distributed.halo.HaloPlan` that fills the ghost vector.

``A @ x`` restricted to this rank's rows is ``local @ x_local + remote @ x[ghosts]``. Both parts
keep their columns sorted, so every rank's products are deterministic.

Every constructor is collective (call it on every rank of ``comm``) and checks its inputs
collectively: a bad input on any rank raises the same ValueError on every rank, naming the rank,
instead of leaving the other ranks waiting.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from ..formats.validate import check_indices

from ._collective import agree, disagreement, everywhere, exchange_counts, format_problems
from .halo import HaloPlan
from .partition import Partition

_INT32_MAX = np.iinfo(np.int32).max


def _index_dtype(*sizes):
    return np.int32 if max(sizes, default=0) <= _INT32_MAX else np.int64


def _working_dtype(dt):
    """The dtype a matrix is kept in: float32/float64/complex64/complex128; integers, bools and
    float16 become float64 (SciPy's coercion, as ``dpsolve._system``); others are refused."""
    from .._system import coerce
    dt = np.dtype(dt)
    if dt.kind in "biuf" and dt.char not in "gG":
        return coerce(dt.char, dt.char)
    if dt.char in "FD":
        return dt
    raise ValueError(f"unsupported dtype {dt}; dpsolve solves in float32, float64, complex64 or "
                     f"complex128")


def _canonical_rows(rows, dtype=None, what="rows"):
    """A private canonical CSR copy (sorted columns, duplicates summed) of ``rows``, in its
    working dtype (or ``dtype``). The caller's matrix is never touched; ``what`` names it in
    errors."""
    if sp.issparse(rows):
        check_indices(rows, what)         # before SciPy's conversion reads them (FormatError)
        M = sp.csr_array(rows, copy=True)
    else:
        if hasattr(rows, "get") and not isinstance(rows, np.ndarray):
            rows = rows.get()
        a = np.asarray(rows)
        if a.dtype == object or a.ndim != 2:
            raise ValueError(f"{what} must be a 2-D sparse matrix or array, got "
                             f"{type(rows).__name__} with shape {a.shape}")
        M = sp.csr_array(a)
    M.sum_duplicates()
    dt = _working_dtype(M.dtype) if dtype is None else np.dtype(dtype)
    if M.dtype != dt:
        M = M.astype(dt)
    return M


def _csr(data, indices, row_of, n_rows, n_cols):
    """CSR from entries in row-major order (``row_of`` their rows, nondecreasing)."""
    counts = np.bincount(row_of, minlength=n_rows) if row_of.size else np.zeros(n_rows, np.int64)
    idx = _index_dtype(n_cols, data.size)
    indptr = np.zeros(n_rows + 1, dtype=idx)
    np.cumsum(counts, out=indptr[1:])
    M = sp.csr_array((data, indices.astype(idx, copy=False), indptr), shape=(n_rows, n_cols),
                     copy=False)
    M.has_sorted_indices = True
    M.has_canonical_format = True
    return M


def _split(rows, start, stop):
    """(local, remote, ghosts) of canonical rows ``rows`` (global columns) owning ``start:stop``."""
    n_local = rows.shape[0]
    cols = rows.indices.astype(np.int64, copy=False)
    row_of = np.repeat(np.arange(n_local, dtype=np.int64), np.diff(rows.indptr))
    inside = (cols >= start) & (cols < stop)
    local = _csr(rows.data[inside], cols[inside] - start, row_of[inside], n_local, n_local)
    out = ~inside
    rcols = cols[out]
    ghosts = np.unique(rcols)
    remote = _csr(rows.data[out], np.searchsorted(ghosts, rcols), row_of[out], n_local,
                  ghosts.size)
    return local, remote, ghosts


class DistributedMatrix:
    """One rank's rows of a square sparse matrix distributed by rows (see the module docstring).

    Attributes: ``comm`` (mpi4py communicator), ``partition``, ``rank``, ``n`` (global order),
    ``n_local``, ``shape`` (global, ``(n, n)``), ``dtype``, ``local``, ``remote``, ``ghosts``,
    ``halo``; also ``row_start``/``row_stop`` (this rank's global rows) and ``nnz_local``.

    Build it with a collective constructor: :meth:`from_global`, :meth:`from_rows` or
    :meth:`laplace3d`.
    """

    def __init__(self, comm, partition, local, remote, ghosts, halo):
        self.comm = comm
        self.partition = partition
        self.rank = comm.Get_rank()
        self.local = local
        self.remote = remote
        self.ghosts = ghosts
        self.halo = halo

    # ------------------------------------------------------------------ attributes
    @property
    def n(self) -> int:
        return self.partition.n

    @property
    def n_local(self) -> int:
        return self.local.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def dtype(self) -> np.dtype:
        return self.local.dtype

    @property
    def row_start(self) -> int:
        return self.partition.rows(self.rank)[0]

    @property
    def row_stop(self) -> int:
        return self.partition.rows(self.rank)[1]

    @property
    def nnz_local(self) -> int:
        """Stored entries of this rank's rows (local plus remote part)."""
        return int(self.local.nnz + self.remote.nnz)

    def __repr__(self):
        return (f"DistributedMatrix(rank {self.rank} of {self.partition.size}: rows "
                f"{self.row_start}:{self.row_stop} of n={self.n}, {self.dtype}, "
                f"nnz local={self.local.nnz} remote={self.remote.nnz}, "
                f"ghosts={self.ghosts.size})")

    # ------------------------------------------------------------------ assembly
    @classmethod
    def _assemble(cls, comm, partition, rows):
        """From this rank's canonical rows with global columns (checked by the caller):
        split, then build the halo plan (collective)."""
        start, stop = partition.rows(comm.Get_rank())
        local, remote, ghosts = _split(rows, start, stop)
        halo = HaloPlan.build(ghosts, partition, comm)
        return cls(comm, partition, local, remote, ghosts, halo)

    def astype(self, dtype) -> "DistributedMatrix":
        """This matrix with its values in ``dtype`` (not collective: the partition, ghosts and
        halo plan are shared)."""
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        return DistributedMatrix(self.comm, self.partition, self.local.astype(dtype),
                                 self.remote.astype(dtype), self.ghosts, self.halo)

    def times_power_of_two(self, e: int) -> "DistributedMatrix":
        """This matrix times 2^e, values copied (exact where none leaves the normal range: the
        solvers' scaling of an A far from 1, ``dpsolve._system.exponent_shift``); not
        collective: the partition, ghosts and halo plan are shared."""
        from .._system import times_power_of_two

        def scaled(m):
            m = m.copy()
            m.data = times_power_of_two(m.data, e)
            return m
        return DistributedMatrix(self.comm, self.partition, scaled(self.local),
                                 scaled(self.remote), self.ghosts, self.halo)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_global(cls, A, comm, root=0, partition=None) -> "DistributedMatrix":
        """Scatter the rows of ``A`` (a SciPy sparse matrix or a 2-D array on rank ``root``;
        ignored elsewhere, pass None) by ``partition`` (default: even). Collective. The
        partition is the root's; a rank passing a different one is an error (on every rank)."""
        rank, size = comm.Get_rank(), comm.Get_size()
        problem, n, dtype, M = None, None, None, None
        if partition is not None and not isinstance(partition, Partition):
            problem = f"partition must be a Partition or None, got {type(partition).__name__}"
        if rank == root and problem is None:
            try:
                if A is None:
                    raise ValueError("A is None on the root rank")
                M = _canonical_rows(A, what="A")
                if M.shape[0] != M.shape[1]:
                    raise ValueError(f"expected a square matrix, got shape {M.shape}")
                if M.shape[0] == 0:
                    raise ValueError("A is empty (shape (0, 0)); there is no system to solve")
                n, dtype = M.shape[0], M.dtype.str
                if partition is not None and partition.n != n:
                    raise ValueError(f"the partition covers {partition.n} rows, but A has {n}")
            except ValueError as e:
                problem = str(e)
        if partition is not None and partition.size != size:
            problem = problem or (f"the partition has {partition.size} rank(s), the "
                                  f"communicator {size}")
        offsets = partition.offsets.tolist() if isinstance(partition, Partition) else None
        facts = comm.allgather((problem, n, dtype, offsets))
        problems = [f[0] for f in facts]
        if any(problems):
            raise everywhere(ValueError(f"from_global: {format_problems(problems)}"))
        n, dtype = facts[root][1], np.dtype(facts[root][2])
        given = [f[3] for f in facts]
        root_offsets = given[root]
        part = (Partition(root_offsets) if root_offsets is not None
                else Partition.even(n, size))
        shown = [o if o is not None else part.offsets.tolist() for o in given]
        differ = disagreement("the partition (row offsets; None takes the root's)", shown)
        if differ:
            raise everywhere(ValueError(f"from_global: {differ}"))
        if rank == root:
            pieces = []
            for r in range(size):
                a, b = part.rows(r)
                blk = M[a:b]
                pieces.append((blk.data, blk.indices, blk.indptr))
        else:
            pieces = None
        data, indices, indptr = comm.scatter(pieces, root=root)
        rows = sp.csr_array((data, indices, indptr), shape=(indptr.size - 1, n), copy=False)
        rows.has_sorted_indices = True
        rows.has_canonical_format = True
        if rows.dtype != dtype:
            rows = rows.astype(dtype)
        return cls._assemble(comm, part, rows)

    @classmethod
    def from_rows(cls, rows, comm, n=None) -> "DistributedMatrix":
        """Each rank passes its own rows (a SciPy sparse matrix or 2-D array of shape
        ``n_local x n`` with GLOBAL column indices); the partition is the ranks' row counts in
        rank order. Collective. Ranks that disagree on ``n`` or on the dtype, a column index
        outside ``0:n``, or row counts that do not add up to ``n``, raise the same ValueError on
        every rank, naming the rank(s)."""
        problem, M, info = None, None, (None, None, None)
        if n is not None and (isinstance(n, bool) or not isinstance(n, numbers.Integral)
                              or n < 1):
            problem = f"n must be a positive integer or None, got {n!r}"
        else:
            try:
                M = _canonical_rows(rows)
                cols = int(n) if n is not None else M.shape[1]
                if n is not None and M.shape[1] != cols:
                    raise ValueError(f"rows have {M.shape[1]} columns, but n = {cols}")
                if M.indices.size:
                    lo, hi = int(M.indices.min()), int(M.indices.max())
                    if lo < 0 or hi >= cols:
                        raise ValueError(f"column index {lo if lo < 0 else hi} is outside "
                                         f"0:{cols} (n = {cols})")
                info = (M.shape[0], cols, M.dtype.str)
            except ValueError as e:
                problem = str(e)
        facts = comm.allgather((problem,) + info)
        problems = [f[0] for f in facts]
        if any(problems):
            raise everywhere(ValueError(f"from_rows: {format_problems(problems)}"))
        counts = [f[1] for f in facts]
        msgs = [disagreement("the number of columns n", [f[2] for f in facts]),
                disagreement("the dtype", [np.dtype(f[3]).name for f in facts])]
        if not msgs[0] and sum(counts) != facts[0][2]:
            msgs.append(f"the ranks' rows add up to {sum(counts)}, but the matrix has n = "
                        f"{facts[0][2]} columns (rows per rank: {counts}): it must be square")
        msgs = [m for m in msgs if m]
        if msgs:
            raise everywhere(ValueError(f"from_rows: {'; '.join(msgs)}"))
        part = Partition.from_sizes(np.asarray(counts, dtype=np.int64))
        return cls._assemble(comm, part, M)

    @classmethod
    def laplace3d(cls, nx, ny, nz, comm, dtype=np.float64, partition=None) -> "DistributedMatrix":
        """The 7-point 3-D Laplacian on an nx x ny x nz grid (Dirichlet boundary; 6 on the
        diagonal, -1 for each neighbour, unscaled: exactly ``dpsolve.matrices.laplace_3d``),
        each rank generating only its own rows. ``partition`` defaults to even. Collective."""
        from ..matrices import grid_rows
        size = comm.Get_size()
        problem = None
        try:
            dims = []
            for name, v in (("nx", nx), ("ny", ny), ("nz", nz)):
                if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                    raise ValueError(f"grid sizes must be integers >= 1, got {name}={v!r}")
                dims.append(int(v))
            dt = _working_dtype(dtype)
            n = dims[0] * dims[1] * dims[2]
            if partition is None:
                part = Partition.even(n, size)
            elif not isinstance(partition, Partition):
                raise ValueError(f"partition must be a Partition or None, got "
                                 f"{type(partition).__name__}")
            elif partition.n != n or partition.size != size:
                raise ValueError(f"the partition ({partition.n} rows over {partition.size} "
                                 f"ranks) does not fit the grid ({n} rows over {size} ranks)")
            else:
                part = partition
        except ValueError as e:
            problem = str(e)
        agree(comm, problem, "laplace3d: ")
        start, stop = part.rows(comm.Get_rank())
        rows = grid_rows(dims, 6, [-1, -1, -1], [-1, -1, -1], dt, start, stop)
        return cls._assemble(comm, part, rows)

    # ------------------------------------------------------------------ operations
    def matvec(self, x_local, transport):
        """This rank's rows of ``A @ x``: start the halo exchange, multiply the local part while
        it travels, finish it, add the remote part. Collective (every rank calls it)."""
        plan = self.halo
        send = x_local[plan.send_idx]
        recv = np.empty(plan.n_ghost, dtype=x_local.dtype)
        handle = transport.halo_start(plan, send, recv)
        y = self.local @ x_local
        transport.halo_finish(handle)
        if plan.n_ghost:
            y += self.remote @ recv
        return y

    def diagonal(self):
        """This rank's part of the diagonal (length ``n_local``; the Jacobi preconditioner)."""
        return self.local.diagonal()

    def _global_rows(self):
        """This rank's rows as canonical CSR with global column indices (``n_local x n``)."""
        start = self.row_start
        lo = sp.coo_array(self.local)
        re = sp.coo_array(self.remote)
        rows = np.concatenate([lo.row, re.row]).astype(np.int64)
        cols = np.concatenate([lo.col.astype(np.int64) + start,
                               self.ghosts[re.col.astype(np.int64)]])
        data = np.concatenate([lo.data, re.data])
        M = sp.csr_array((data, (rows, cols)), shape=(self.n_local, self.n))
        M.sum_duplicates()
        return M

    def to_global(self, root=0):
        """The whole matrix as SciPy CSR on rank ``root`` (None elsewhere). Collective; for
        tests and small systems."""
        M = self._global_rows()
        parts = self.comm.gather((M.data, M.indices, M.indptr), root=root)
        if self.comm.Get_rank() != root:
            return None
        blocks = [sp.csr_array((d, i, p), shape=(p.size - 1, self.n)) for d, i, p in parts]
        out = sp.csr_array(sp.vstack(blocks, format="csr"))
        out.sum_duplicates()
        return out

    def conj_transpose(self) -> "DistributedMatrix":
        """The distributed ``A^H`` on the same partition (BiCG needs it). Collective: each
        entry ``(i, j, v)`` goes to the owner of column ``j`` as ``(j, i, conj(v))``."""
        from mpi4py import MPI
        comm, part = self.comm, self.partition
        size = part.size
        M = self._global_rows()
        row_of = np.repeat(np.arange(self.n_local, dtype=np.int64), np.diff(M.indptr))
        gi = row_of + self.row_start
        gj = M.indices.astype(np.int64)
        vals = np.conj(M.data) if np.iscomplexobj(M.data) else M.data.copy()
        dest = part.owner(gj) if gj.size else np.empty(0, np.int64)
        order = np.argsort(dest, kind="stable")
        gi, gj, vals = gi[order], gj[order], np.ascontiguousarray(vals[order])
        send, recv, sd, rd = exchange_counts(comm, dest, size)
        total = int(recv.sum())
        new_rows, new_cols = np.empty(total, np.int64), np.empty(total, np.int64)
        new_vals = np.empty(total, dtype=vals.dtype)
        for src, dst in ((gj, new_rows), (gi, new_cols)):
            comm.Alltoallv([src, (send.tolist(), sd.tolist()), MPI.INT64_T],
                           [dst, (recv.tolist(), rd.tolist()), MPI.INT64_T])
        item = vals.dtype.itemsize
        comm.Alltoallv([vals.view(np.uint8), ((send * item).tolist(), (sd * item).tolist()),
                        MPI.BYTE],
                       [new_vals.view(np.uint8), ((recv * item).tolist(), (rd * item).tolist()),
                        MPI.BYTE])
        AH = sp.csr_array((new_vals, (new_rows - self.row_start, new_cols)),
                          shape=(self.n_local, self.n))
        AH.sum_duplicates()
        return DistributedMatrix._assemble(comm, part, AH)


# --------------------------------------------------------------------------- vectors
def scatter(b_global, A: DistributedMatrix, root=0):
    """Rank ``root``'s vector ``b_global`` (length n; ignored elsewhere) cut into the ranks'
    pieces by ``A``'s partition; returns this rank's piece (a new array). Collective."""
    comm, part = A.comm, A.partition
    rank = comm.Get_rank()
    problem, dtype = None, None
    if rank == root:
        b = b_global
        if hasattr(b, "get") and not isinstance(b, np.ndarray):
            b = b.get()
        b = np.asarray(b) if b is not None else None
        if b is None or b.dtype == object:
            problem = "the vector on the root rank is missing or not numeric"
        elif b.shape not in ((part.n,), (part.n, 1)):
            problem = f"the vector has shape {b.shape}, the matrix has n = {part.n} rows"
        else:
            dtype = b.dtype.str
    facts = comm.bcast((problem, dtype), root=root)
    if facts[0]:
        raise everywhere(ValueError(f"scatter: rank {root}: {facts[0]}"))
    if rank == root:
        b = b.reshape(-1)
        pieces = [np.ascontiguousarray(b[slice(*part.rows(r))]) for r in range(part.size)]
    else:
        pieces = None
    return comm.scatter(pieces, root=root)


def gather(x_local, A: DistributedMatrix, root=0):
    """The ranks' pieces put together on rank ``root`` (None elsewhere). Collective; every
    rank's piece must have its ``n_local`` entries (else a ValueError on every rank)."""
    comm = A.comm
    x = x_local.get() if hasattr(x_local, "get") and not isinstance(x_local, np.ndarray) \
        else np.asarray(x_local)
    x = x.reshape(-1) if x.ndim == 2 and x.shape[1:] == (1,) else x
    problem = (None if x.shape == (A.n_local,) else
               f"its piece has shape {x.shape}, but it owns {A.n_local} rows")
    agree(comm, problem, "gather: ")
    parts = comm.gather(x, root=root)
    return np.concatenate(parts) if comm.Get_rank() == root else None
