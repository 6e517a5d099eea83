"""CG (and the driver of BiCGStab's block) on k right-hand sides at once, A read once an iteration
for all of them (issue 31, part 1). BiCGStab's steps are in ``_block_bicgstab``.

A loop of k prepared solves reads A k times an iteration; here one pass over A serves every
column (``dpsolve/cuda/block.cu``: X, R, P, Q row-interleaved, a group of G lanes a row, one lane
a column). Each column keeps its own scalars, converges to its own tolerance and is then frozen.
The algorithm is preconditioned CG per column, step for step:

    r = b - A x0, z = D^-1 r, p = z, rz = r^H z; converged at once when ||r|| <= tol
    each iteration:  q = A p; alpha = rz / p^H q; x += alpha p; r -= alpha q; z = D^-1 r;
                     converged when ||r|| <= tol; beta = (r^H z) / rz; p = z + beta p

(D^-1: Jacobi's, or the identity). On the device x's update is deferred every other iteration
and taken with the next one (x += alpha_j p_j + alpha_j+1 p_j+1, P double-buffered: X read and
written every other iteration), so its X differs from the host's in rounding alone. A column
whose p^H q is 0 or not finite, or whose sums stop being finite, is frozen as broken down
(negative curvature is not a breakdown: CG goes on, as SciPy's does).

``run`` drives it over an "ops" object (start, iterate, read_active, finish): ``DeviceBlockCG``
(the kernels, on a stream; ``DeviceBlock`` holds what every method's device block shares) or
``HostBlockCG`` (the same steps in NumPy: the specification the GPU
tests compare with, and what the CPU tests drive). ``solve`` is what ``dpsolve._block`` calls: it
runs the block on the device, then checks every column's true residual with dpsolve's own SpMV;
the columns whose recurrence claimed a residual their true one misses (float32's drift) run again
as a block from their iterate, with dpsolve's restart rule (``_frontend.restarted``: at most
MAX_RESTARTS, within each column's maxiter), and a column that broke down is handed to the
prepared system's single solve (which reports SciPy's code for it).
"""
from __future__ import annotations

import collections
import contextlib
import time

import numpy as np

MAX_K = 32            # columns a pass (block.cu's widest group); wider blocks run in passes
CHECK_EVERY = 4       # iterations between the host's reads of the columns still active
LAG = 2               # reads queued before the host waits for the oldest
ACTIVE, CONVERGED, BROKE, MAXITER = 0, 1, 2, 3   # a column's status
SPMM_WAVES = 8        # blocks an SM in block_spmm_dot's grid: one resident wave of 256 threads
NO_LIMIT = 2**31 - 1  # a column's iteration limit where run's maxiter alone bounds it


def lanes(k: int) -> int:
    """block.cu's G for k columns: the power of two >= k (2 to MAX_K)."""
    if not 1 <= k <= MAX_K:
        raise ValueError(f"a pass takes 1 to {MAX_K} columns, got {k}")
    return max(2, 1 << (k - 1).bit_length())


def passes(k: int) -> list[slice]:
    """The column ranges of the passes for k columns (at most MAX_K each, as even as may be)."""
    count = -(-k // MAX_K)
    edges = [round(i * k / count) for i in range(count + 1)]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def spmm_dot(csr, P, Q, W, active, partials, grid=None, dinv=None, stream=None, defines=()):
    """block.cu's ``block_spmm_dot``: Q = A D^-1 P (dinv None: A P) on the columns where
    ``active`` is set, the partials of w^H q into ``partials``; P, Q and W (n, k) row-
    interleaved, k <= MAX_K. ``grid``: blocks, a tuple (None: SPMM_WAVES a SM, the blocks'
    own). ``defines``: a build of block.cu's compile-time knobs (scripts/profile-block)."""
    from .cuda._loader import get_kernel
    from .cuda.executor import launch
    from .cuda.ops import _NULL, BLOCK, grid_for
    n, k = P.shape
    G = lanes(k)
    grid = (grid_for(n * G, waves=SPMM_WAVES),) if grid is None else grid
    expr = f"block_spmm_dot<{{T}}, {G}, {'false' if dinv is None else 'true'}>"
    launch(get_kernel("block", expr, P.dtype, defines=tuple(defines)), grid, (BLOCK,),
           (np.int32(n), np.int32(k), csr.indptr, csr.indices, csr.data,
            _NULL if dinv is None else dinv, P, Q, W, active, partials), stream)


def run(ops, maxiter: int, check_every: int = CHECK_EVERY) -> None:
    """Iterate ``ops`` until no column is active or ``maxiter`` iterations; the columns still
    active then get status MAXITER. Every ``check_every`` iterations the host queues a read of
    the active count behind them (``ops.read_active()``) and does not wait for it: it looks at a
    read once it is done, or waits for it once LAG newer reads are queued, so the GPU is
    never left idle while the host decides, and the host runs at most about (LAG + 1) x
    check_every iterations ahead. A frozen column does not change, so the iterations queued past
    the last column's end cost only their launches. The iterations between two reads go as one
    ``ops.iterate_many`` (a device block may replay them as a CUDA graph)."""
    ops.start()
    reads: collections.deque = collections.deque()
    it = 0
    while it < maxiter:
        reads.append(ops.read_active())
        while reads and (len(reads) > LAG or reads[0].ready()):
            if reads.popleft().value() == 0:
                ops.finish()
                return
        m = min(check_every, maxiter - it)
        ops.iterate_many(m)
        it += m
    ops.finish()


class _Known:
    """A read of the active count that is already on the host (the host blocks')."""

    def __init__(self, count: int):
        self.count = count

    def ready(self) -> bool:
        return True

    def value(self) -> int:
        return self.count


class _Queued:
    """A read of the active count queued on the device: a sum into a device scalar, copied into
    pinned host memory behind the iterations, and an event after it (``asleep``: a blocking-sync
    event, so the host sleeps rather than spins when it waits: sync="blocking")."""

    def __init__(self, active, count, host, stream, asleep=False):
        import cupy
        with stream if stream is not None else contextlib.nullcontext():
            cupy.sum(active, dtype=cupy.int64, out=count)
            count.get(stream=stream, out=host, blocking=False)
            self.event = cupy.cuda.Event(block=asleep, disable_timing=True)
            self.event.record(stream)
        self.host = host

    def ready(self) -> bool:
        return self.event.done

    def value(self) -> int:
        self.event.synchronize()
        return int(self.host[()])


class HostBlock:
    """What the methods' host blocks share: A (SciPy CSR, n x n), B and X0 (n x k), tol (k,),
    dinv (n,) or None, limit (k,): the iterations each column may run (None: run's bound alone).
    After ``run``: X, status, iters, rr (||r||^2)."""

    def __init__(self, A, B, X0, tol, dinv=None, limit=None):
        self.A, self.B = A, np.asarray(B)
        self.dt = np.result_type(A.dtype, self.B.dtype)
        self.X = (np.zeros(self.B.shape, self.dt) if X0 is None
                  else np.array(X0, dtype=self.dt, copy=True))
        self.x0_zero = X0 is None
        k = self.B.shape[1]
        self.tol2 = np.asarray(tol, dtype=np.float64) ** 2
        self.dinv = None if dinv is None else np.asarray(dinv, self.dt)[:, None]
        self.limit = np.full(k, NO_LIMIT) if limit is None else np.asarray(limit, np.int64)
        self.status = np.zeros(k, np.int64)
        self.iters = np.zeros(k, np.int64)
        self.rr = np.zeros(k)

    def read_active(self) -> _Known:
        return _Known(int((self.status == ACTIVE).sum()))

    def iterate_many(self, m: int) -> None:
        for _ in range(m):
            self.iterate()

    def finish(self):
        self.status[self.status == ACTIVE] = MAXITER


class HostBlockCG(HostBlock):
    """The CG block's steps in NumPy, the specification of block.cu's CG kernels (``HostBlock``
    says what it takes)."""

    def __init__(self, A, B, X0, tol, dinv=None, limit=None):
        super().__init__(A, B, X0, tol, dinv, limit)
        self.rz = np.zeros(self.B.shape[1], self.dt)

    def _z(self, R):
        return R if self.dinv is None else self.dinv * R

    def _sums(self):
        Z = self._z(self.R)
        return ((self.R.conj() * Z).sum(axis=0), (self.R.conj() * self.R).sum(axis=0).real)

    def _check(self, rz_new, rr, first):
        on = self.status == ACTIVE
        self.rr[on] = rr[on]
        if not first:
            self.iters[on] += 1
        bad = on & ~(np.isfinite(rz_new) & np.isfinite(rr))
        self.status[bad] = BROKE
        done = on & ~bad & (rr <= self.tol2)
        self.status[done] = CONVERGED
        spent = on & ~bad & ~done & (self.iters >= self.limit) & (not first)
        self.status[spent] = MAXITER
        go = on & ~bad & ~done & ~spent
        beta = np.zeros_like(self.rz)
        if not first:
            with np.errstate(all="ignore"):
                beta[go] = rz_new[go] / self.rz[go]
        self.rz[go] = rz_new[go]
        return go, beta

    def start(self):
        self.R = self.B.astype(self.dt) - (0 if self.x0_zero else self.A @ self.X)
        go, _ = self._check(*self._sums(), first=True)
        self.P = np.zeros_like(self.R)
        self.P[:, go] = self._z(self.R)[:, go]

    def iterate(self):
        on = self.status == ACTIVE
        Q = np.zeros_like(self.R)
        Q[:, on] = self.A @ self.P[:, on]
        pq = (self.P.conj() * Q).sum(axis=0)
        with np.errstate(all="ignore"):
            a = self.rz / pq
        broke = on & ~((pq != 0) & np.isfinite(pq) & np.isfinite(a))
        self.status[broke] = BROKE
        on &= ~broke
        alpha = np.zeros_like(self.rz)
        alpha[on] = a[on]
        self.R[:, on] -= alpha[on] * Q[:, on]
        go, beta = self._check(*self._sums(), first=False)
        # block_direction: x's step on every column that took one (the ones frozen by _check
        # just now too), then p on the active ones; the same values as x's step before _check
        self.X[:, on] += alpha[on] * self.P[:, on]
        self.P[:, go] = self._z(self.R)[:, go] + beta[go] * self.P[:, go]


class DeviceBlock:
    """What the methods' device blocks share (block.cu's kernels on ``stream``): csr a dpsolve
    CSR on the device (int32 indices); B (n x k, C order: row-interleaved) and X0 (the same, or
    None) CuPy arrays of the working dtype, k <= MAX_K; tol (k,) float64; dinv (n,) or None;
    limit (k,) as the host blocks'. ``vectors`` and ``scalars``: the names of the method's n x k
    arrays and per-column values. ``graphs``: replay CHECK_EVERY iterations as one CUDA graph
    captured on ``stream`` (a non-default stream; see ``iterate_many``); ``asleep``: the host's
    waits on a blocking-sync event (sync="blocking"). After ``run``: X (n x k,
    the solution), and on the host status, iters and rr (||r||^2)."""

    def __init__(self, csr, B, X0, tol, dinv, stream, limit, vectors, scalars, graphs=False,
                 asleep=False):
        import cupy
        import cupyx

        from .cuda import ops
        self.cp, self.stream = cupy, stream
        n, k = B.shape
        self.n, self.k, self.G = np.int32(n), np.int32(k), lanes(k)
        self.dt = np.dtype(B.dtype)
        self.csr, self.dinv = csr, dinv
        self.B = B
        self.x0_zero = X0 is None
        self.X = cupy.zeros((n, k), self.dt) if X0 is None else cupy.array(X0, self.dt, order="C")
        for name in vectors:
            setattr(self, name, cupy.empty((n, k), self.dt))
        for name in scalars:
            setattr(self, name, cupy.zeros(k, self.dt))
        self.grid = (ops.grid_for(n * self.G),)
        self.nparts = np.int32(self.grid[0])
        # the SpMM on one wave of resident blocks, not grid_for's 32 a SM: the rows in flight
        # together stay within a few planes of a 3-D grid, so P's neighbour rows come from L2
        # (H100, 160^3, k = 16: 978 -> 720 us; the streaming kernels lose 5 % so: they keep 32)
        self.spmm_grid = (ops.grid_for(n * self.G, waves=SPMM_WAVES),)
        self.spmm_parts = np.int32(self.spmm_grid[0])
        self.part_a = cupy.empty(self.grid[0] * k, self.dt)
        self.part_b = cupy.empty(self.grid[0] * k, self.dt)
        self.tol2 = cupy.asarray(np.asarray(tol, np.float64) ** 2, self.dt)
        self.active = cupy.ones(k, cupy.int32)
        self.status_d = cupy.zeros(k, cupy.int32)
        self.iters_d = cupy.zeros(k, cupy.int32)
        self._count = cupy.zeros((), cupy.int64)
        self._host = [cupyx.empty_pinned((), np.int64) for _ in range(LAG + 2)]
        self._slot = 0
        self.limit = cupy.asarray(np.full(k, NO_LIMIT) if limit is None
                                  else np.minimum(limit, NO_LIMIT), cupy.int32)
        self.graphs = bool(graphs) and stream is not None
        self.asleep = asleep          # the host's waits asleep (sync="blocking")
        self._graph = None
        self._warm = False

    def iterate_many(self, m: int) -> None:
        """m iterations. With ``graphs``, a round of CHECK_EVERY is, from the second round on,
        one launch of a CUDA graph of those iterations captured on the stream (the first round
        runs launch by launch: it compiles the kernels and holds BiCGStab's first iteration,
        whose arguments differ). A graph node costs ~1 us; a launch from Python 5-10 us, which
        on mid-sized systems is more than the kernel."""
        if not self.graphs or m != CHECK_EVERY or (self._graph is None and not self._warm):
            for _ in range(m):
                self.iterate()
            self._warm = True
            return
        if self._graph is None:
            self.stream.begin_capture()
            try:
                for _ in range(m):
                    self.iterate()
            finally:
                graph = self.stream.end_capture()
            self._graph = graph
        self._graph.launch(self.stream)

    def _launch(self, name, grid, args, scaled=None):
        """block.cu's ``name`` on ``grid``; ``scaled``: an SpMM's D^-1 (True, False)."""
        from .cuda._loader import BLOCK_VECTOR_KERNELS, get_kernel
        from .cuda.executor import launch
        from .cuda.ops import BLOCK
        expr = (f"{name}<{{T}}, {self.G}, {'true' if scaled else 'false'}>" if scaled is not None
                else f"{name}<{{T}}, {self.G}>" if name in BLOCK_VECTOR_KERNELS
                else f"{name}<{{T}}>")
        launch(get_kernel("block", expr, self.dt), grid, (BLOCK,), args, self.stream)

    def _null(self, a):
        from .cuda.ops import _NULL
        return _NULL if a is None else a

    def _spmm(self, P, Q, W, dinv=None):
        """Q = A D^-1 P (dinv None: A P) on the active columns; part_a gets w^H q's partials."""
        spmm_dot(self.csr, P, Q, W, self.active, self.part_a, self.spmm_grid, dinv, self.stream)

    def _alpha(self, num):
        """alpha = num / (the sum of the SpMM's partials), or the column breaks down."""
        self._launch("block_alpha", (int(self.k),),
                     (self.spmm_parts, self.k, self.part_a, num, self.active, self.status_d,
                      self.alpha))

    def read_active(self) -> _Queued:
        self._slot = (self._slot + 1) % len(self._host)      # a pinned slot per queued read
        return _Queued(self.active, self._count, self._host[self._slot], self.stream,
                       self.asleep)

    def finish(self):
        status = self.status_d.get(stream=self.stream).astype(np.int64)
        active = self.active.get(stream=self.stream).astype(bool)
        status[active] = MAXITER
        self.status = status
        self.iters = self.iters_d.get(stream=self.stream).astype(np.int64)
        self.rr = np.abs(self.rr.get(stream=self.stream)).astype(np.float64)


class DeviceBlockCG(DeviceBlock):
    """The CG block's steps as block.cu's kernels (``DeviceBlock`` says what it takes)."""

    VECTORS = ("R", "P", "Pn", "Q")   # with X and B: the n x k arrays of a pass

    def __init__(self, csr, B, X0, tol, dinv=None, stream=None, limit=None, graphs=False,
                 asleep=False):
        super().__init__(csr, B, X0, tol, dinv, stream, limit, self.VECTORS,
                         ("rz", "rr", "alpha", "beta", "pend"), graphs, asleep)
        self._flush = False       # whether the next iteration takes X's deferred steps

    def _beta(self, first):
        self._launch("block_beta", (int(self.k),),
                     (self.nparts, self.k, self.part_a, self.part_b, self.tol2, np.int32(first),
                      self.rz, self.rr, self.beta, self.active, self.status_d, self.iters_d,
                      self.limit))

    def _direction(self, first):
        """The new P (into Pn, then P and Pn swap) on the active columns, and X's steps: every
        other iteration a column that goes on defers its step (block.cu's block_direction), the
        next takes both, so X is read and written every other iteration. A CUDA graph of
        CHECK_EVERY (even) iterations leaves the swap and the parity as it found them."""
        self._launch("block_direction", self.grid,
                     (self.n, self.k, self.R, self._null(self.dinv), self.alpha, self.beta,
                      self.active, np.int32(first), np.int32(self._flush and not first), self.X,
                      self.P, self.Pn, self.pend))
        self.P, self.Pn = self.Pn, self.P
        self._flush = not self._flush and not first

    def finish(self):
        if self._flush:                       # the last iteration deferred: its steps, on Pn
            self._launch("block_flush", self.grid, (self.n, self.k, self.pend, self.Pn, self.X))
        super().finish()

    def start(self):
        Q = None
        if not self.x0_zero:                  # Q = A X0 (every column active yet)
            self._spmm(self.X, self.Q, self.X)
            Q = self.Q
        self._launch("block_start", self.grid,
                     (self.n, self.k, self.B, self._null(Q), self.R, self._null(self.dinv),
                      self.active, self.part_a, self.part_b))
        self._beta(first=True)
        self._direction(first=True)

    def iterate(self):
        self._spmm(self.P, self.Q, self.P)
        self._alpha(self.rz)
        self._launch("block_update", self.grid,
                     (self.n, self.k, self.Q, self.R, self._null(self.dinv), self.alpha,
                      self.active, self.part_a, self.part_b))
        self._beta(first=False)
        self._direction(first=False)


def usable(P, B, X0, *, callback, energy, options) -> bool:
    """Whether the fused block takes this call: a device solve of CG or BiCGStab, M none or
    Jacobi, a real dtype, variant auto, graph, cuda or merge (persistent, dynamic and cublas
    loop over the columns), either sync (blocking: the host's waits asleep), no callback, energy
    or method options, a matrix (not an operator) and at least two columns. The others run as a
    loop of single solves."""
    base = P._base
    return (P._device and P.method in ("cg", "bicgstab") and callback is None and not energy
            and not options and not isinstance(X0, str)
            and P._options["variant"] in ("auto", "graph", "cuda", "merge")
            and base.csr is not None and not base.ascale
            and base.M.name in ("none", "jacobi") and np.dtype(P.dtype).kind == "f"
            and B.shape[1] >= 2)


GRAM = True           # column_sq as the diagonal of Y^T Y (one read of Y); False: |Y|^2 summed


def column_sq(Y):
    """||y_j||^2 of each column of an (n, k) CuPy array, in float64, as a CuPy array. A real
    float64 Y of at most MAX_K columns: the diagonal of the Gram matrix Y^T Y (one cuBLAS product,
    Y read once; its k^2 n work is why the width is capped); otherwise
    (or GRAM off) one matrix-vector product over |Y|^2 in float64. CuPy's own reduction over
    axis 0 of a C-ordered (n, k) array gives each of the k sums to one thread block: a few blocks
    of the GPU's 132 SMs."""
    import cupy
    if GRAM and Y.dtype == cupy.float64 and Y.shape[1] <= MAX_K:     # k^2 n: a pass's columns
        return cupy.ascontiguousarray((Y.T @ Y).diagonal())
    a = cupy.abs(Y).astype(cupy.float64, copy=False)
    return (a * a).T @ cupy.ones(a.shape[0], cupy.float64)


def columns(Y, cols):
    """Y[:, cols] for an int array ``cols``, as a C-contiguous (n, len(cols)) array: Y itself
    where ``cols`` is every column in order (no copy: the common case, where a block's columns
    all run together), a copy otherwise."""
    import cupy
    if len(cols) == Y.shape[1] and np.array_equal(np.asarray(cols), np.arange(Y.shape[1])):
        return cupy.ascontiguousarray(Y)
    return cupy.ascontiguousarray(Y[:, cupy.asarray(cols)])


def _true_residuals(csr, B, X):
    """||b_j - A x_j|| per column (a NumPy array): A X by the block's own SpMM (block.cu's row
    sums, in the entries' order, A read once for a pass of up to MAX_K columns), the columns'
    norms in one product (``column_sq``), one read back."""
    import cupy

    from .cuda.ops import grid_for
    n, k = B.shape
    sq = []
    for sl in passes(k) if k else ():
        w = sl.stop - sl.start
        Xp = cupy.ascontiguousarray(X[:, sl])
        Y = cupy.empty_like(Xp)
        grid = (grid_for(n * lanes(w), waves=SPMM_WAVES),)
        spmm_dot(csr, Xp, Y, Xp, cupy.ones(w, cupy.int32), cupy.empty(grid[0] * w, Xp.dtype),
                 grid)
        Y -= B[:, sl]
        sq.append(column_sq(Y))
    return np.sqrt(cupy.concatenate(sq).get()) if sq else np.zeros(0)


def _run_columns(cls, csr, Bd, X0, tol, dinv, cols, limit, X, status, its, stream, graphs,
                 asleep=False):
    """The fused block (``cls``: the method's DeviceBlock, on ``stream``, with CUDA graphs or
    not) on the columns ``cols`` of Bd (an int array), in passes of at most MAX_K: X0 (n,
    len(cols)) their start or None (zero), limit (len(cols),) the iterations each may run.
    Writes X[:, cols], status[cols] and its[cols] (this run's iterations)."""
    import cupy
    for sl in passes(len(cols)):
        c = cols[sl]
        ops = cls(csr, columns(Bd, c), None if X0 is None else X0[:, sl],
                  tol[c], dinv, stream=stream, limit=limit[sl], graphs=graphs, asleep=asleep)
        run(ops, int(limit[sl].max()))
        if len(c) == X.shape[1]:             # every column in this pass: a contiguous copy
            X[...] = ops.X
        else:
            X[:, cupy.asarray(c)] = ops.X
        status[c], its[c] = ops.status, ops.iters


def with_restarts(run_columns, residuals, k, tol, maxiter, max_restarts):
    """The block's columns, then dpsolve's restarts from the true residual
    (``_frontend.restarted``'s rule, per column): ``run_columns(cols, start, limit)`` runs the
    block on the columns ``cols`` (an int array) from their start (``start`` None: the caller's
    x0) or from their current iterate ("x"), each within its ``limit`` of iterations, and
    returns (status, iterations) of those columns; ``residuals(cols)`` their true residual
    norms. A column whose recurrence converged and whose true residual misses ``tol`` runs again
    from its iterate while it made iterations, has iterations left and restarted fewer than
    ``max_restarts`` times. Returns (status, iterations, restarts, true residuals), (k,) each."""
    cols = np.arange(k)
    status, its = run_columns(cols, None, np.full(k, maxiter))
    status, its = np.array(status, np.int64), np.array(its, np.int64)
    total, restarts = its.copy(), np.zeros(k, np.int64)
    res = np.asarray(residuals(cols), np.float64)
    while True:
        missed = (status == CONVERGED) & ~(res <= tol)
        again = missed & (its > 0) & (total < maxiter) & (restarts < max_restarts)
        if not again.any():
            return status, total, restarts, res
        cols = np.flatnonzero(again)
        restarts[cols] += 1
        status[cols], its[cols] = run_columns(cols, "x", maxiter - total[cols])
        total[cols] += its[cols]
        res[cols] = residuals(cols)


def solve(P, B, X0, *, rtol, atol, maxiter, t0):
    """The block (n, k) on the prepared system P (``usable``), on dpsolve's stream (ordered after
    the caller's, waited for before returning): see ``_solve``."""
    from . import _setup
    res = _setup.resources()
    _setup.follow_caller(res.stream, res)
    with res.stream:
        try:
            return _solve(P, B, X0, rtol=rtol, atol=atol, maxiter=maxiter, t0=t0,
                          stream=res.stream)
        finally:
            _setup.wait(res.stream, P.sync, res)        # spinning, or asleep (blocking)


def _solve(P, B, X0, *, rtol, atol, maxiter, t0, stream):
    """The block (n, k) on the prepared system P (``usable``), in passes of at most MAX_K
    columns; returns (X, info, BlockReport), X in B's array module, or None where the block does
    not run fused (a column's ||b||^2 outside the dtype's safe range, or 0 where b is not: the
    single solves scale b).
    Every column's true residual is checked; the columns that miss it restart from it as a
    block, as a single solve would (info 0 only where the true residual meets the tolerance);
    a column that broke down is solved again by P's single solve and reported as that solve
    did. None too where the pass's arrays do not fit the device's free memory (the loop of
    single solves needs less). Variants auto and graph replay the iterations as CUDA graphs,
    cuda and merge launch the kernels one by one."""
    import cupy

    from . import _block
    from . import _frontend as fe
    from ._frontend import MAX_RESTARTS
    from ._system import abs_max, in_safe_range
    from .formats.csr import _is_cupy
    from .report import SolveReport
    from ._block_bicgstab import DeviceBlockBiCGStab
    fe._get_atol_rtol(P.method, 0.0, atol, rtol)       # SciPy's errors for bad tolerances
    cls = DeviceBlockCG if P.method == "cg" else DeviceBlockBiCGStab
    base, n, k, dt = P._base, P.n, B.shape[1], np.dtype(P.dtype)
    Bd = cupy.ascontiguousarray(cupy.asarray(B).astype(dt, copy=False))
    sq = column_sq(Bd).get()
    if not all(q == 0 or in_safe_range(float(q), dt) for q in sq):
        return None
    zero = np.flatnonzero(sq == 0)            # b_j = 0, or squares that underflow (float32
    if zero.size and abs_max(Bd[:, cupy.asarray(zero)]) != 0:         # subnormals)
        return None
    tol = np.maximum(float(rtol) * np.sqrt(sq), float(atol))
    X0d = None if X0 is None else cupy.ascontiguousarray(cupy.asarray(X0).astype(dt))
    maxiter = 10 * n if maxiter is None else int(maxiter)
    csr = base.csr
    dinv = cupy.asarray(base.M.inv_diag, dt) if base.M.name == "jacobi" else None
    widest = max(sl.stop - sl.start for sl in passes(k))
    free, _ = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    if (len(cls.VECTORS) + 3) * n * widest * dt.itemsize > (free + pool.total_bytes()
                                                             - pool.used_bytes()):
        return None                       # X, and a pass's X, B and vectors: the loop needs less
    graphs = P._options["variant"] in ("auto", "graph")
    X = cupy.empty((n, k), dt)

    def run_columns(cols, start, limit):
        """The block on these columns from ``start`` (zero X0 where None, else their X):
        (status, this run's iterations) of each."""
        st, it = np.empty(k, np.int64), np.empty(k, np.int64)
        X0 = (None if X0d is None else columns(X0d, cols)) if start is None else columns(X, cols)
        _run_columns(cls, csr, Bd, X0, tol, dinv, cols, limit, X, st, it, stream, graphs,
                     P.sync == "blocking")
        return st[cols], it[cols]

    def residuals(cols):
        return _true_residuals(csr, columns(Bd, cols), columns(X, cols))

    status, total, restarts, res = with_restarts(run_columns, residuals, k, tol, maxiter,
                                                 MAX_RESTARTS)
    info = np.where((status == CONVERGED) & (res <= tol), 0, maxiter).astype(np.int64)
    wall = time.perf_counter() - t0
    dev = fe.device_status().name
    lanes_text = ", ".join(str(lanes(sl.stop - sl.start)) for sl in passes(k))
    launches = (f"CUDA graphs of {CHECK_EVERY} iterations" if graphs
                else "kernels launched one by one")
    report = _block.BlockReport(
        prepare_time=getattr(P, "prepare_time", None),
        path=f"fused block {'CG' if P.method == 'cg' else 'BiCGStab'}: {k} columns, "
             f"{len(passes(k))} pass(es) over A an iteration ({lanes_text} lanes a row), "
             f"{launches}")
    handed = []
    for j in range(k):
        report.columns.append(SolveReport(
            variant="block", format="csr", sync=P.sync, method=P.method, dtype=dt.name, n=n,
            nnz=P.nnz, iterations=int(total[j]), info=int(info[j]),
            converged=bool(info[j] == 0), residual_norm=float(res[j]), tolerance=float(tol[j]),
            restarts=int(restarts[j]), wall_time=wall, device=dev))
        if status[j] == BROKE:
            handed.append(j)
    for j in handed:      # finished by the single solve from its start: it reports SciPy's code
        x0 = None if X0d is None else cupy.ascontiguousarray(X0d[:, j])
        x, code, rep = P.solve(cupy.ascontiguousarray(Bd[:, j]), x0, rtol=rtol, atol=atol,
                               maxiter=maxiter, full_output=True)
        X[:, j] = x
        info[j] = code
        report.columns[j] = rep
    if restarts.any():
        report.path += (f"; {int(restarts.sum())} restart(s) from the true residual "
                        f"(column(s) {', '.join(map(str, np.flatnonzero(restarts)))})")
    if handed:
        report.path += f"; column(s) {', '.join(map(str, handed))} finished by single solves"
    report.wall_time = time.perf_counter() - t0
    if not _is_cupy(B):
        from ._setup import download
        X = download(X)
    return X, info, report
