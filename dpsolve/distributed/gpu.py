"""Distributed solves on GPUs: variant ``cuda`` over a distributed executor; transports ``nccl``
and ``mpi``.

Each rank keeps its rows in a :class:`~dpsolve.backends._gpu.GpuState` whose matrix is a
:class:`HaloMatrix` and whose executor is a :class:`DistributedExecutor`; the ``cuda`` variant's
loops (``dpsolve/backends/cuda.py``) run on them unchanged. Only two operations differ:

* ``ex.dot`` / ``ex.nrm2``: the local two-stage DOT into the scalar slot, then an all-reduce of
  that slot. NCCL: on the solve's stream, device-side, no host wait. MPI: staged through pinned
  host memory (one host wait per all-reduce), summed in rank order by ``MpiTransport``.
* ``ex.spmv`` of a HaloMatrix (PETSc's MATMPIAIJ split, ``y = A_local x + A_remote ghosts``):
  ``halo_pack`` gathers the values the neighbours need; the exchange starts (NCCL: send/recv on
  a second stream; MPI: Isend/Irecv of host copies); the local SpMV runs meanwhile; then the
  exchange finishes and ``halo_add`` adds the remote part over the rows that have ghost columns.

Per CG iteration: 2 all-reduces (``<p, A p>``; ``<r, z>``, with ``<r, r>`` a third when
preconditioned) and one halo exchange.

Stopping every rank: the all-reduces of the loop carry no error-flag slot (they sum scalar slots
on the device). Once this rank's callback has raised (or a SIGINT came), its next all-reduce
sends NaN instead of its partial sums: every rank's sum is NaN, so every rank's host loop ends
at its next read of tau (a non-finite tau), the same iteration everywhere, and the true
residual's all-reduce that follows (through the solve's space, with its flag) stops every
rank. Until then this costs one test of a Python attribute per all-reduce, no extra collective.

Breakdown tests: the scalar kernels' accurate re-computation of a suspect inner product
(``dps::confirm_dot``) sees a rank's rows only, so here it covers none (``GpuState.confirm_n =
0``): the tests are made on the all-reduced fast sum, as SciPy makes them. The ``host`` variant
confirms across ranks.
"""
from __future__ import annotations

import os
import time
import weakref
from types import SimpleNamespace

import numpy as np

from ..cuda import ops
from ..cuda.executor import Executor, host_call, launch
from .transport import MpiTransport, Transport

_NCCL_TYPES = {"float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}


def _real_view(buf):
    """A device array of real or complex values as real values (a complex sum is the sum of
    each part), with NCCL's type of them."""
    from cupy.cuda import nccl
    real = buf.view(buf.real.dtype) if buf.dtype.kind == "c" else buf
    return real, getattr(nccl, _NCCL_TYPES[real.dtype.name])


def select_device(comm) -> int:
    """Make this rank's GPU current: the rank's index among the ranks of its host, modulo the
    host's GPUs (one rank per GPU; ranks beyond the GPUs share them, which only the ``mpi``
    transport allows). Returns the device id."""
    import cupy
    from mpi4py import MPI
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    dev = local.Get_rank() % max(1, cupy.cuda.runtime.getDeviceCount())
    local.Free()
    cupy.cuda.Device(dev).use()
    return dev


class _EventTimer:
    """Device time between pairs of events on a stream, read once at the end of a solve
    (``settle``): how the NCCL transport accounts for its stream-ordered calls without waiting."""

    def __init__(self):
        self.pool, self.used = [], 0

    def pair(self):
        import cupy
        while len(self.pool) < self.used + 2:
            self.pool.append(cupy.cuda.Event())
        a, b = self.pool[self.used], self.pool[self.used + 1]
        self.used += 2
        return a, b

    def settle(self) -> float:
        """The pairs' device time, each at least 0 (a pair on two streams whose second event
        came first: nothing was waited for)."""
        import cupy
        total = 0.0
        for i in range(0, self.used, 2):
            a, b = self.pool[i], self.pool[i + 1]
            a.synchronize()
            b.synchronize()
            total += max(0.0, cupy.cuda.get_elapsed_time(a, b) * 1e-3)
        self.used = 0
        return total


GRAPH_MIXING = "NCCL_GRAPH_MIXING_SUPPORT"


class NcclTransport(Transport):
    """NCCL between GPUs (``cupy.cuda.nccl``), one rank per GPU: all-reduces and halo send/recv on
    a CUDA stream (``self.stream``, set by the executor), no host wait. The communicator is made
    collectively from the mpi4py communicator (rank 0's unique id, broadcast) and destroyed by
    ``close`` (a run that does not close it can hang at exit). NCCL refuses two ranks on one GPU:
    ranks sharing a GPU use the ``mpi`` transport.

    NCCL's graph mixing support is turned off (``NCCL_GRAPH_MIXING_SUPPORT=0``) unless the
    environment sets it: with it on, NCCL adds event waits to each captured call, which CUDA
    refuses inside the conditional WHILE node of variant ``graph`` (its instantiation failed on
    two H200, NCCL 2.28). dpsolve's NCCL calls are issued in order on one stream, never from
    graphs running at the same time, so they need no mixing. NCCL reads the variable once, at
    the process's first communicator: the setting holds for every communicator the process
    makes.

    ``stats``: calls and bytes as they are issued; the seconds are added by ``settle()``: for an
    all-reduce, the device time between events around the call (its wait for the peers
    included); for a halo exchange of a :class:`HaloMatrix`, what ``CommStats`` says: the wait,
    the time from the local product's end to the halo's arrival, 0 when the exchange ended
    under it (``exposed_pair``). Events bracketing the send/recv counted their queueing behind
    the local product on the other stream: up to 813 us a 578 us iteration on two H200.
    """
    name = "nccl"

    def __init__(self, comm):
        super().__init__()
        import cupy
        from cupy.cuda import nccl
        self.mpi = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.device = select_device(comm)      # the communicator binds to the current GPU
        os.environ.setdefault(GRAPH_MIXING, "0")          # see the class's docstring
        uid = comm.bcast(nccl.get_unique_id() if self.rank == 0 else None, root=0)
        self.comm = nccl.NcclCommunicator(self.size, uid, self.rank)
        self.stream = cupy.cuda.get_current_stream()
        self._reduce_t, self._halo_t = _EventTimer(), _EventTimer()
        self.timing = True            # off while a graph is captured: its calls are not timed
        self._host = MpiTransport(comm)       # host buffers: the solvers' few host-side sums
        self._holders = weakref.WeakSet()     # prepared systems that may keep graphs of it

    def allreduce(self, buf) -> None:
        """A device array: NCCL on ``self.stream``. A NumPy array (the error flag, ||b||, the
        true residual: a few per solve): the MPI transport's deterministic host sum."""
        if isinstance(buf, np.ndarray):
            before = self._host.stats.copy()
            self._host.allreduce(buf)
            self.stats.add(self._host.stats.since(before))
            return
        from cupy.cuda import nccl
        real, dt = _real_view(buf)
        a, b = self._reduce_t.pair() if self.timing else (None, None)
        if a is not None:
            a.record(self.stream)
        self.comm.allReduce(real.data.ptr, real.data.ptr, real.size, dt, nccl.NCCL_SUM,
                            self.stream.ptr)
        if b is not None:
            b.record(self.stream)
        self.stats.allreduce_calls += 1
        self.stats.bytes_sent += buf.nbytes

    def exposed_pair(self):
        """Two events (``wait``, ``arrived``) whose device time ``settle`` adds to the halo's
        seconds: record ``arrived`` on the exchange's stream once it is issued and ``wait`` on
        the local product's stream before it waits for ``arrived``. (None, None) untimed."""
        return self._halo_t.pair() if self.timing else (None, None)

    def halo_start(self, plan, send, recv, timed=True):
        """Send and receive the halo on ``self.stream``; ``timed``: bracket the calls with
        events (a caller that overlaps them times its own wait instead: ``exposed_pair``)."""
        from cupy.cuda import nccl
        s_real, dt = _real_view(send)
        r_real, _ = _real_view(recv)
        k = 2 if send.dtype.kind == "c" else 1           # reals per value
        isz = s_real.itemsize
        a, b = self._halo_t.pair() if self.timing and timed else (None, None)
        if a is not None:
            a.record(self.stream)
        nccl.groupStart()
        for i, peer in enumerate(plan.send_ranks):
            lo, hi = int(plan.send_offsets[i]), int(plan.send_offsets[i + 1])
            self.comm.send(s_real.data.ptr + lo * k * isz, (hi - lo) * k, dt, peer,
                           self.stream.ptr)
        for i, peer in enumerate(plan.recv_ranks):
            lo, hi = int(plan.recv_offsets[i]), int(plan.recv_offsets[i + 1])
            self.comm.recv(r_real.data.ptr + lo * k * isz, (hi - lo) * k, dt, peer,
                           self.stream.ptr)
        nccl.groupEnd()
        if b is not None:
            b.record(self.stream)
        self.stats.halo_calls += 1
        self.stats.bytes_sent += plan.n_send * send.itemsize
        return None

    def halo_finish(self, handle) -> None:
        """Nothing to wait for on the host: the receives are ordered on ``self.stream``."""

    def settle(self) -> None:
        self.stats.allreduce_seconds += self._reduce_t.settle()
        self.stats.halo_seconds += self._halo_t.settle()

    def barrier(self) -> None:
        self.mpi.Barrier()

    def held_by(self, holder) -> None:
        """Note a prepared system (``prepared.DistributedSystem``) whose cache may keep graphs
        that captured this communicator: ``close`` frees them first."""
        self._holders.add(holder)

    def close(self) -> None:
        """Destroy the communicator, first freeing the graphs that prepared systems still keep
        of it (ncclCommDestroy would wait for them for ever; those systems rebuild their device
        state at their next solve, which a closed transport then refuses)."""
        if self.comm is not None:
            for holder in list(self._holders):
                holder.cache.drop_states()
            self.stream.synchronize()
            self.comm.destroy()
            self.comm = None


class DistributedExecutor(Executor):
    """The executor of a rank (``dpsolve/cuda/executor.py``) whose dot and nrm2 end with an
    all-reduce and whose SpMV of a :class:`HaloMatrix` exchanges the halo. Inside
    ``record()`` the communication is captured as host calls, replayed in order.

    ``space``: the solve's ``DistributedSpace``; once its ``error`` is set, every all-reduce
    of this rank sends NaN (the stop signal: see the module docstring)."""

    def __init__(self, stream, dtype, transport: Transport, space=None):
        super().__init__(stream, dtype)
        self.transport = transport
        self.space = space
        self.device_side = isinstance(transport, NcclTransport)
        if self.device_side:
            transport.stream = stream
        else:
            import cupy
            dt = np.dtype(dtype)
            self._pinned = cupy.cuda.alloc_pinned_memory(dt.itemsize)
            self._host = np.frombuffer(self._pinned, dt, 1)

    def allreduce(self, out) -> None:
        """out summed over the ranks, element by element, in one all-reduce (``out`` a device
        view of k >= 1 adjacent values)."""
        if self.space is not None and self.space.error is not None:
            with self.stream:
                out.fill(np.nan)                # every rank's sum is NaN: its loop ends
        if self.device_side:
            self.transport.stream = self.stream     # this executor's stream at the call
            self.transport.allreduce(out)
            return
        import cupy
        k = out.size
        if self._host.size < k:              # the pinned staging slots, grown to the widest view
            self._pinned = cupy.cuda.alloc_pinned_memory(out.nbytes)
            self._host = np.frombuffer(self._pinned, self._host.dtype, k)
        host = self._host[:k]
        rt = cupy.cuda.runtime
        stats = self.transport.stats
        self.stream.synchronize()            # the local work before it: compute, not counted
        t0, counted = time.perf_counter(), stats.allreduce_seconds
        rt.memcpyAsync(host.ctypes.data, out.data.ptr, out.nbytes,
                       rt.memcpyDeviceToHost, self.stream.ptr)
        self.stream.synchronize()
        self.transport.allreduce(host)
        rt.memcpyAsync(out.data.ptr, host.ctypes.data, out.nbytes,
                       rt.memcpyHostToDevice, self.stream.ptr)
        self.stream.synchronize()            # the pinned slots are reused by the next call
        # the staged all-reduce as a whole (copies, waits, MPI), as bench-scaling measures it
        stats.allreduce_seconds = counted + (time.perf_counter() - t0)

    def allreduce_slots(self, view) -> None:
        """The k adjacent scalar slots of ``view`` summed over the ranks in ONE all-reduce (the
        single-reduction CG's three), in order with the kernels (a host call when recorded)."""
        host_call(lambda: self.allreduce(view))

    def dot(self, x, y, out) -> None:
        super().dot(x, y, out)
        host_call(lambda: self.allreduce(out))

    def dots(self, pairs) -> None:
        """The local inner products, then ONE all-reduce of their slots when those are adjacent
        in one buffer (in any order), else one each."""
        import cupy
        outs = [out for _, _, out in pairs]
        for x, y, out in pairs:
            Executor.dot(self, x, y, out)
        ptrs = sorted(o.data.ptr for o in outs)
        step = outs[0].itemsize
        if all(o.size == 1 for o in outs) and all(b - a == step for a, b in zip(ptrs, ptrs[1:])):
            first = min(outs, key=lambda o: o.data.ptr)
            span = cupy.ndarray((len(outs),), first.dtype, first.data)
            host_call(lambda: self.allreduce(span))
        else:
            for out in outs:
                host_call(lambda o=out: self.allreduce(o))

    def nrm2(self, x, out) -> None:
        super().dot(x, x, out)

        def reduce_and_root():
            import cupy
            self.allreduce(out)
            with self.stream:
                cupy.sqrt(out, out=out)
        host_call(reduce_and_root)

    def spmv(self, A, x, y) -> None:
        if isinstance(A, HaloMatrix):
            A.spmv(self, x, y)
        else:
            super().spmv(A, x, y)


class HaloMatrix:
    """A rank's rows of a :class:`~dpsolve.distributed.matrix.DistributedMatrix` on the device:
    the local part as a dpsolve device matrix (any format), the remote part in compressed rows
    (only rows with ghost columns), and the halo plan's buffers. Build it inside ``with stream:``
    of the stream its SpMVs run on: its uploads are then ordered before them."""
    format = "halo"

    def __init__(self, local, dist, dtype, transport: Transport):
        import cupy
        self.local, self.dist, self.plan = local, dist, dist.halo
        self.n, self.dtype = dist.n_local, np.dtype(dtype)
        self.transport = transport
        rem = dist.remote.tocsr()
        counts = np.diff(rem.indptr)
        rows = np.flatnonzero(counts).astype(np.int32)
        indptr = np.concatenate([[0], np.cumsum(counts[rows])]).astype(np.int32)
        self.m_rows = rows.size
        self.rows = cupy.asarray(rows)
        self.r_indptr = cupy.asarray(indptr)
        self.r_indices = cupy.asarray(rem.indices.astype(np.int32))
        self.r_data = cupy.asarray(rem.data.astype(self.dtype))
        self.send_idx = cupy.asarray(np.asarray(self.plan.send_idx, np.int32))
        self.send = cupy.zeros(self.plan.n_send, self.dtype)
        self.ghost = cupy.zeros(self.plan.n_ghost, self.dtype)
        self.exchanges = self.plan.n_send > 0 or self.plan.n_ghost > 0
        self.device_side = isinstance(transport, NcclTransport)
        if self.device_side:
            self.comm_stream = cupy.cuda.Stream(non_blocking=True)
            self.packed, self.arrived = cupy.cuda.Event(), cupy.cuda.Event()
            self._wait, self._arrived = None, self.arrived
        else:                                  # MPI: pinned host copies of both buffers
            self._mem = [cupy.cuda.alloc_pinned_memory(max(1, k * self.dtype.itemsize))
                         for k in (self.plan.n_send, self.plan.n_ghost)]
            self.host_send = np.frombuffer(self._mem[0], self.dtype, self.plan.n_send)
            self.host_recv = np.frombuffer(self._mem[1], self.dtype, self.plan.n_ghost)
        self._handle = None

    def spmv(self, ex: DistributedExecutor, x, y) -> None:
        """y = A x over the ranks: pack, start the exchange, local product, finish, remote."""
        from ..cuda._loader import get_kernel
        stream = ex.stream
        m = self.plan.n_send
        if m:
            launch(get_kernel("halo", "halo_pack<{T}>", self.dtype), (ops.grid_for(m),),
                   (ops.BLOCK,), (np.int32(m), self.send_idx, x, self.send), stream)
        if self.exchanges:                     # ex.stream when the call runs (a graph body's)
            host_call(lambda: self._start(ex.stream))
        ops.spmv(self.local, x, y, stream)
        if self.exchanges:
            host_call(lambda: self._finish(ex.stream))
        if self.m_rows:
            launch(get_kernel("halo", "halo_add<{T}>", self.dtype), (ops.grid_for(self.m_rows),),
                   (ops.BLOCK,), (np.int32(self.m_rows), self.rows, self.r_indptr,
                                  self.r_indices, self.r_data, self.ghost, y), stream)

    def _start(self, stream) -> None:
        if self.device_side:
            tr = self.transport
            self.packed.record(stream)
            self.comm_stream.wait_event(self.packed)
            tr.stream = self.comm_stream
            try:
                tr.halo_start(self.plan, self.send, self.ghost, timed=False)
            finally:
                tr.stream = stream
            self._wait, arrived = tr.exposed_pair()     # timed: the wait _finish makes
            self._arrived = arrived or self.arrived
            self._arrived.record(self.comm_stream)
            return
        import cupy
        rt = cupy.cuda.runtime
        stream.synchronize()                 # the pack and the work before it: not counted
        t0 = time.perf_counter()
        if self.plan.n_send:
            rt.memcpyAsync(self.host_send.ctypes.data, self.send.data.ptr, self.send.nbytes,
                           rt.memcpyDeviceToHost, stream.ptr)
        stream.synchronize()
        self._staged = time.perf_counter() - t0      # the copy out, counted as halo time
        self._handle = self.transport.halo_start(self.plan, self.host_send, self.host_recv)

    def _finish(self, stream) -> None:
        if self.device_side:
            if self._wait is not None:
                self._wait.record(stream)       # the local product's end
            stream.wait_event(self._arrived)
            return
        import cupy
        self.transport.halo_finish(self._handle)
        self.transport.stats.halo_seconds += self._staged
        self._handle = None
        if self.plan.n_ghost:
            rt = cupy.cuda.runtime
            rt.memcpyAsync(self.ghost.data.ptr, self.host_recv.ctypes.data, self.ghost.nbytes,
                           rt.memcpyHostToDevice, stream.ptr)


def _device_state(job, dist, fmt: str, transport: Transport, State=None):
    """The rank's GpuState (or ``State``, a subclass): the local rows in ``fmt``, the halo
    matrix (and A^H's for BiCG), the distributed executor."""
    from .. import methods as method_table
    from ..precond import Identity, Jacobi
    from ..backends._gpu import GpuState
    from ..backends.cuda import CudaBackend
    from ..formats import choose_format
    from ..formats.csr import to_csr
    # the rows only read and uploaded here: the rank's own arrays where they are canonical
    local = to_csr(dist.local.tocsr(), job.dtype, copy=False)
    fmt = choose_format(local, fmt, allowed=CudaBackend.formats)
    M = (Jacobi.from_inverse_diagonal(np.asarray(job.inv_diag, job.dtype))
         if job.precond == "jacobi" else Identity().bind(None, dist.n_local, job.dtype))
    system = SimpleNamespace(method=job.method, n=dist.n_local, dtype=np.dtype(job.dtype),
                             csr=local, operator=None, M=M, b=job.b, x0=None, out_cupy=True,
                             options={})
    st = (State or GpuState)(system, fmt)
    st.ex = DistributedExecutor(st.stream, st.dtype, transport, job.space)
    st.partials = st.ex.partials
    st.confirm_n = 0
    # every upload and fill on the solve's stream: it is non-blocking, so work on CuPy's default
    # stream would not be ordered before its kernels (a pageable upload's DMA may still run)
    with st.stream:
        st.A = HaloMatrix(st.A, dist, st.dtype, transport)
        if method_table.get(job.method).adjoint:
            AH = dist.conj_transpose()
            local_h = ops.DeviceMatrix.build(to_csr(AH.local.tocsr(), job.dtype, copy=False),
                                             fmt)
            st.AH = HaloMatrix(local_h, AH, st.dtype, transport)
    if job.method != "cg":
        st.krylov_vectors()
    st.load(system)                       # b into the state's own, on its stream
    return st, fmt


def cached_state(job, State=None):
    """(state, format, entry) of this solve: a prepared system's (``job.cache``: the rows, halo
    and vectors uploaded once; b uploaded into it now, its counters reset), made and kept on
    its first solve; or, without a cache, a new one (``_device_state``) and entry None. The
    entry (a dict) keeps what a variant adds (variant graph's captured graph)."""
    from ..backends._gpu import GpuState
    cache, entry = job.cache, None
    if cache is not None:
        key = ((State or GpuState).__name__, np.dtype(job.dtype).str, job.method, job.format,
               job.precond, bool(job.single_reduction), id(job.A), id(job.transport))
        entry = cache.states.get(key)
    if entry is None:
        st, fmt = _device_state(job, job.A, job.format, job.transport, State=State)
        if cache is not None:
            entry = cache.states[key] = {"state": st, "format": fmt}
        return st, fmt, entry
    st = entry["state"]
    st.ex.space, st.ex.launches, st.confirm_n = job.space, 0, 0
    st.load(SimpleNamespace(b=job.b, out_cupy=True, options={}))
    return st, entry["format"], entry


def run_cuda(job, *, sync: str = "polling"):
    """The ``cuda`` variant of a distributed solve (``solvers.VARIANTS["cuda"]``): the cuda
    variant's loop for the method over this rank's state; dpsolve's restarts from the true
    residual as the single-GPU front end makes them. Returns the solvers' ``Outcome``."""

    from .. import methods as method_table
    from .._frontend import restarted
    from ..backends._gpu import SyncMode
    from ..backends.cuda import CudaBackend
    if job.precond not in ("none", "jacobi"):
        raise ValueError("variant 'cuda' of a distributed solve takes M=None or 'jacobi'")
    st, fmt, _ = cached_state(job)
    fn = (method_table.resolve("dpsolve.methods.cg1.gpu:cg1_cuda") if job.single_reduction
          else method_table.implementation(job.method, "cuda"))
    with st.stream:                      # ordered before the solve's kernels
        x = job.initial_x()              # on the device, made on the solve's stream
    backend = CudaBackend()
    t0 = time.perf_counter()
    with SyncMode(sync) as sm, st.ex, st.stream:
        def run_once(budget):
            info, its, _ = fn(backend, st, x, atol=job.tol, maxiter=budget, sync=sm,
                              callback=job.callback)
            return info, its
        info, total, rnorm, restarts = restarted(
            run_once, lambda: _true_residual(st, x, job), job.tol, job.maxiter)
    return _outcome(st, job.transport, x, (info, total, rnorm, restarts), t0, fmt)


def _outcome(st, transport, x, result, t0, fmt):
    """The solvers' Outcome of a GPU run started at ``t0`` (perf_counter), once the stream is
    done and an NCCL transport's event timings are read."""
    from .solvers import Outcome
    st.stream.synchronize()
    if isinstance(transport, NcclTransport):
        transport.settle()
    out = Outcome(x, *result)
    out.seconds = time.perf_counter() - t0
    out.format = fmt
    out.launches = st.ex.launches
    return out


def _true_residual(st, x, job) -> float:
    """||b - A x|| over the ranks: the halo SpMV, then the local sum of squares, summed on the
    host through the job's space (which carries the error flag)."""
    import cupy
    st.ex.spmv(st.A, x, st.v)
    with st.stream:
        r = st.b - st.v
        local = float(cupy.vdot(r, r).real)
    return float(np.sqrt(job.space.reduce(np.array([local]))[0]))


def run_graph(job):
    """The ``graph`` variant of a distributed CG (``solvers.VARIANTS["graph"]``): per rank, one
    conditional-WHILE CUDA graph whose body holds the iteration's kernels AND its NCCL calls
    (the two all-reduces, the halo send/recv on a forked stream), captured once per solve (once
    per prepared system: ``job.cache``) and launched once per run: the host launches once and
    waits once, on every rank.

    The set-up and the iteration are the ``cuda`` variant's own (``CudaBackend.cg_iteration``,
    ``GpuState.cg_setup``), the loop control graph.cu's (the host loop's stop rule on the
    device), the capture ``backends.graph.capture_while``. The NCCL calls inside the graph are
    not timed (the report's communication time is None); they are counted: the captured set-up
    and body calls times the body's replays (read back from the graph's counter)."""

    from .._frontend import restarted
    from ..backends.graph import GraphBackend, GraphState, launch_graph
    tr = job.transport
    if not isinstance(tr, NcclTransport):
        raise ValueError("variant 'graph' captures the NCCL calls into a CUDA graph: it needs "
                         "transport 'nccl'")
    ok, why = GraphBackend._probe()
    if not ok:
        raise RuntimeError(f"variant 'graph' is not available here: {why}")
    st, fmt, entry = cached_state(job, State=GraphState)
    with st.stream:
        x = job.initial_x()               # on the device, made on the solve's stream
    captured = entry.get("captured") if entry is not None else None
    build = 0.0
    if captured is None:
        captured, build = _capture(job, st, tr)
        if entry is not None:                  # a prepared system's: launched again next solve
            entry["captured"] = captured

    def run_once(budget):
        finish = launch_graph(st, x, job.tol, budget)
        st.stream.synchronize()
        info, its, _ = finish()
        tr.stats.add(captured["setup"])
        tr.stats.add(captured["body"], int(st.ctl.get()[0]))     # the body's replays
        return info, its

    t1 = time.perf_counter()
    try:
        with st.ex, st.stream:
            info, total, rnorm, restarts = restarted(
                run_once, lambda: _true_residual(st, x, job), job.tol, job.maxiter)
    finally:
        st.stream.synchronize()
        if entry is None:       # the graph holds the communicator: free it with the solve
            st.release()
    out = _outcome(st, tr, x, (info, total, rnorm, restarts), t1, fmt)
    out.build_time = build
    out.comm_timed = False
    return out


def _capture(job, st, tr):
    """Capture variant graph's CG into ``st`` (its set-up and the WHILE body with the NCCL
    calls): returns (the NCCL calls of the set-up and of one body, seconds)."""
    import cupy

    from ..backends.cuda import CudaBackend
    from ..backends.graph import capture_while
    with st.stream:
        body_comm = cupy.cuda.Stream(non_blocking=True)    # the halo's stream in the body
    iteration = CudaBackend.cg_iteration(st, st.x)
    captured = {"body_comm": body_comm}

    def setup():
        before = tr.stats.copy()
        st.cg_setup(st.x)
        captured["setup"] = tr.stats.since(before)

    def body(stream):
        before = tr.stats.copy()
        saved = st.ex.stream, st.A.comm_stream
        st.ex.stream, st.A.comm_stream = stream, body_comm
        try:
            iteration.run(stream)
        finally:
            st.ex.stream, st.A.comm_stream = saved
        captured["body"] = tr.stats.since(before)

    t0 = time.perf_counter()
    before = tr.stats.copy()
    tr.timing = False
    try:
        with st.ex:
            capture_while(st, setup, body)
    except RuntimeError as e:
        if "cudaGraphInstantiate" not in str(e) or tr.size == 1:
            raise
        raise RuntimeError(
            f"variant 'graph' on {tr.size} ranks: CUDA refused the captured graph ({e}). "
            f"NCCL's graph mixing support adds event waits that a conditional WHILE node "
            f"cannot hold: set {GRAPH_MIXING}=0 before the process's first NCCL communicator "
            f"(dpsolve's nccl transport does when the variable is unset; here it is "
            f"{os.environ.get(GRAPH_MIXING)!r}), or use variant 'cuda'") from e
    finally:
        tr.timing = True
    tr.stats.add(tr.stats.since(before), -1)      # captured, not run: counted per replay
    return captured, time.perf_counter() - t0
