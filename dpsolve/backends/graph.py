"""variant="graph": the whole solve is one CUDA graph with a conditional WHILE node (beyond the
paper). The host launches the graph once and waits once.

The graph is built by stream capture from the merge variant's own program (the same set-up and
the same fused kernels per iteration, dpsolve/backends/merge.py), so the two variants compute the
same thing; only the control moves to the device:

    params H2D -> set-up (merge) -> graph_head
        -> WHILE { merge's iteration -> graph_step } -> result D2H

graph_head / graph_step (dpsolve/cuda/graph.cu) make the host loop's decisions on the device and
set the WHILE condition with cudaGraphSetConditional. On Hopper a kernel node costs ~1 us where a
CDP2 device launch costs ~11 us (variant "dynamic") and a host round trip ~10-35 us (merge). The
iteration's kernels are captured with programmatic dependent launch (dpsolve/cuda/pdl.py, via
executor.Plan.run): each is scheduled as the one before retires, and waits for it on the device.

CuPy has no API for conditional nodes: they are added with cuda-bindings (the documented
capture pattern: cudaStreamGetCaptureInfo, cudaGraphAddNode, cudaStreamBeginCaptureToGraph for
the body on a second stream, cudaStreamUpdateCaptureDependencies).

Caching: the instantiated graph is kept with its prepared state (matrix in its format, work
vectors) per (method, dtype, format, preconditioner, matrix and D^-1 contents), so a repeated
solve with the same A and a new b (or x0, tolerance, maxiter: those reach the graph through its
own buffers) skips the build. The build (state + capture + instantiate) is timed and reported
as ``report.build_time`` (0.0 for a cached graph). A matrix on the device is hashed there, in
one pass; host matrices over CACHE_MAX_BYTES are not cached: hashing them would cost more than
building. A prepared system (``dpsolve.prepare``) keeps its own graph and skips the cache.
"""
from __future__ import annotations

import collections
import time
import weakref
import zlib

import numpy as np

from ..cuda import abi, ops
from ..cuda._loader import get_kernel
from ._gpu import STATUS, TAU, GpuState, HostScalars, poisoned
from .merge import MergeBackend

CACHE_MAX_BYTES = 64 << 20       # host matrix + D^-1 bytes hashed for the cache key, at most
CACHE_ENTRIES = 4                # prepared systems kept (each holds its device buffers)


def _rt():
    from cuda.bindings import runtime
    return runtime


def _ok(res, what):
    """Unwrap a cuda-bindings call's (err, *values); raise with the call's name on an error."""
    err, *vals = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        raise RuntimeError(f"variant 'graph': {what} failed: {err!r}")
    return vals[0] if len(vals) == 1 else vals


class GraphState(GpuState):
    """GpuState plus the graph's own iterate, control and result buffers, a second stream for
    capturing the loop body, and the instantiated graph."""

    def __init__(self, system, fmt):
        import cupy
        super().__init__(system, fmt)
        with self.stream:
            self.x = poisoned(self.n, self.dtype, 1, self.stream)[0]   # the captured kernels' x
            self.ctl = cupy.zeros(1, np.int32)
            self.result = cupy.zeros(ops.DYNAMIC_STATUS, np.float64)
        self.params_host = HostScalars(4, np.float64)    # params' (atol, maxiter, rtol, -)
        self.result_host = HostScalars(ops.DYNAMIC_STATUS, np.float64)
        self.body_stream = cupy.cuda.Stream(non_blocking=True)
        self.graph = self.exec = None
        self._free = None             # frees graph and exec once this state is dropped
        self.build_time = None        # seconds of the last build, reported by the next run

    def adopt_graph(self, graph, exec_) -> None:
        """Keep a captured graph and its executable, freeing those kept before. CUDA never
        frees them on its own: a state evicted from the cache, or a solve's state not cached,
        would leak them, and a graph holding NCCL calls would keep its communicator from being
        destroyed (ncclCommDestroy waits for every graph that captured it)."""
        self.release()
        self.graph, self.exec = graph, exec_
        self._free = weakref.finalize(self, _destroy_graph, graph, exec_)
        self._free.atexit = False      # the process's end frees them with the context

    def release(self) -> None:
        """Free the graph and its executable now (a launch in flight completes first)."""
        if self._free is not None:
            self._free()
        self._free = None
        self.graph = self.exec = None


def _destroy_graph(graph, exec_) -> None:
    rt = _rt()
    rt.cudaGraphExecDestroy(exec_)     # in flight: freed on completion (CUDA's documentation)
    rt.cudaGraphDestroy(graph)


class GraphBackend(MergeBackend):
    name = "graph"
    device_driven = True
    takes_operator_A = takes_operator_M = False    # Python cannot run inside a graph
    takes_stream_M = True            # a preconditioner of kernels is captured into the loop
    State = GraphState

    def __init__(self):
        self._cache = collections.OrderedDict()

    @staticmethod
    def _probe():
        try:
            rt = _rt()
        except ImportError as e:
            return False, f"cuda-bindings is not installed ({e}); pip install cuda-bindings"
        if not hasattr(rt, "cudaGraphConditionalHandleCreate"):
            return False, "this cuda-bindings has no conditional graph nodes (CUDA >= 12.4 needed)"
        version = _ok(rt.cudaDriverGetVersion(), "cudaDriverGetVersion")
        if int(version) < 12040:
            return False, f"the driver supports CUDA {version}; conditional graph nodes need 12.4"
        return True, None

    # --- the prepared-system cache ---------------------------------------------------------
    @staticmethod
    def cache_key(system, fmt):
        """Key of a prepared system: its shape and options and a hash of the matrix and D^-1.
        A matrix on the device is hashed there (check.cu's fingerprint: two 64-bit sums of
        mixed words, one pass, one host wait); a host one, up to CACHE_MAX_BYTES, by CRC-32 and
        Adler-32 (zlib, ~3 GB/s); a larger host matrix is not cached (None). A change of the
        matrix or D^-1 is missed with probability ~2^-64."""
        arrays = [system.csr.indptr, system.csr.indices, system.csr.data,
                  *system.M.cache_arrays()]
        if system.csr.on_device:
            import cupy
            from .._setup import resources
            digest = ops.fingerprint([cupy.asarray(a) for a in arrays],
                                     stream=resources().stream)
        else:
            if sum(a.nbytes for a in arrays) > CACHE_MAX_BYTES:
                return None
            crc, adler = 0, 1
            for a in arrays:
                a = a.get() if not isinstance(a, np.ndarray) else a
                b = np.ascontiguousarray(a).view(np.uint8)
                crc, adler = zlib.crc32(b, crc), zlib.adler32(b, adler)
            digest = (crc, adler)
        return (system.method, str(system.dtype), fmt, system.n, system.csr.nnz, system.M.kind,
                repr(system.M.options()), *digest)

    def prepare(self, system, fmt, cache=True):
        key = (self.cache_key(system, fmt) if cache and self.why_not(system) is None
               else None)
        st = self._cache.get(key) if key is not None else None
        if st is not None:
            self._cache.move_to_end(key)
            st.build_time = 0.0
            system.M.adopt(st.precond)       # its set-up (an AMG hierarchy) is this call's
            return st
        t0 = time.perf_counter()
        st = super().prepare(system, fmt)
        self._build(st)
        st.build_time = time.perf_counter() - t0
        if key is not None:
            self._cache[key] = st
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return st

    # --- building the graph ----------------------------------------------------------------
    def _build(self, st):
        setup, iteration = getattr(self, f"{st.method}_program")(st, st.x)
        capture_while(st, setup, iteration.run)

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        return launch_graph(st, x, atol, maxiter)

    bicg = bicgstab = cg


def capture_while(st, setup, body):
    """Capture the conditional-WHILE graph of a solve into ``st.graph`` / ``st.exec`` (``st`` a
    :class:`GraphState`): the params upload, ``setup()`` issued on ``st.stream``, graph_head,
    then WHILE { ``body(stream)`` issued on the body's capture stream, graph_step }, then the
    result's download. ``setup`` and ``body`` issue the method's set-up and one iteration (the
    merge variant's program here; the distributed graph's kernels and NCCL calls in
    ``dpsolve.distributed.gpu``)."""
    import cupy
    rt = _rt()
    head = get_kernel("graph", "graph_head<{T}>", st.dtype)
    step = get_kernel("graph", "graph_step<{T}>", st.dtype)
    stream, body_stream = st.stream, st.body_stream
    tau_status = st.scal[TAU:STATUS + 1]                  # adjacent slots
    mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
    _ok(rt.cudaStreamBeginCapture(stream.ptr, mode), "cudaStreamBeginCapture")
    graph = None
    try:
        with stream:
            cupy.cuda.runtime.memcpyAsync(st.params.data.ptr, st.params_host.arr.ctypes.data,
                                          st.params_host.arr.nbytes,
                                          cupy.cuda.runtime.memcpyHostToDevice, stream.ptr)
            setup()
            graph, deps, edges = _capture_info(rt, stream)
            handle = _ok(rt.cudaGraphConditionalHandleCreate(graph, 0, 0),
                         "cudaGraphConditionalHandleCreate")
            h = np.uint64(int(handle))
            head((1,), (1,), (h, tau_status, st.params, st.ctl, st.result), stream=stream)
            graph, deps, edges = _capture_info(rt, stream)
            params = rt.cudaGraphNodeParams()
            params.type = rt.cudaGraphNodeType.cudaGraphNodeTypeConditional
            params.conditional.handle = handle
            params.conditional.type = rt.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile
            params.conditional.size = 1
            node = _ok(rt.cudaGraphAddNode(graph, deps, edges, len(deps), params),
                       "cudaGraphAddNode(WHILE)")
            body_graph = params.conditional.phGraph_out[0]
            _ok(rt.cudaStreamBeginCaptureToGraph(body_stream.ptr, body_graph, None, None, 0,
                                                 mode), "cudaStreamBeginCaptureToGraph(body)")
            try:
                body(body_stream)
                step((1,), (1,), (h, tau_status, st.params, st.ctl, st.result),
                     stream=body_stream)
            finally:
                _ok(rt.cudaStreamEndCapture(body_stream.ptr), "cudaStreamEndCapture(body)")
            _update_dependencies(rt, stream, node)
            st.result_host.copy_async(st.result, stream)
    finally:
        graph = _ok(rt.cudaStreamEndCapture(stream.ptr), "cudaStreamEndCapture")
    _instantiate(st, graph)


def _instantiate(st, graph) -> None:
    """Instantiate a captured graph into ``st`` (which frees it later); free it if CUDA
    refuses it."""
    rt = _rt()
    try:
        exec_ = _ok(rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")
    except BaseException:
        rt.cudaGraphDestroy(graph)
        raise
    st.adopt_graph(graph, exec_)


def start_graph(st, atol, maxiter, rtol=-1.0):
    """Queue one launch of ``st``'s instantiated graph on ``st.stream``: its params (``rtol`` -1:
    ``atol`` as given; >= 0: the fast path's tolerance, made by graph_head from ||b||) and its
    result area cleared (``graph_result`` reads it once the stream is done)."""
    st.params_host.arr[:] = (atol, min(maxiter, 2**31 - 1), rtol, 0.0)
    st.result_host.arr[:] = 0.0
    _ok(_rt().cudaGraphLaunch(st.exec, st.stream.ptr), "cudaGraphLaunch")


def graph_result(st):
    """(info, iterations) of ``st``'s last launch, its stream done (``start_graph``)."""
    res = st.result_host.arr
    if float(res[abi.DYN_STATE]) != ops.DYNAMIC_DONE:
        raise RuntimeError("variant 'graph': the graph ended without a result")
    return int(res[abi.DYN_INFO]), int(res[abi.DYN_ITERS])


def launch_graph(st, x, atol, maxiter):
    """Launch ``st``'s instantiated graph for one solve from ``x`` (copied in, and the result
    copied back into it, on ``st.stream``); returns ``finish()``, which -- once the stream is
    done -- gives (info, iterations, stats)."""
    import cupy
    cupy.copyto(st.x, x)                                   # the solve's x0 into the graph's x
    start_graph(st, atol, maxiter)
    cupy.copyto(x, st.x)                                   # and the result back
    st.ex.count(3)
    build, st.build_time = st.build_time, 0.0

    def finish():
        info, its = graph_result(st)
        return info, its, {"device_launches_per_iter": 0.0, "residuals": None,
                           "build_time": build}
    return finish


def _capture_info(rt, stream):
    """(graph, dependencies, edge data) of the capture in progress on ``stream``."""
    # cuda-bindings 13: (err, status, id, graph, dependencies, edge data, count)
    status, _id, graph, deps, edges, _n = _ok(rt.cudaStreamGetCaptureInfo(stream.ptr),
                                             "cudaStreamGetCaptureInfo")
    if int(status) != int(rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive):
        raise RuntimeError(f"variant 'graph': the capture is not active ({status!r})")
    return graph, list(deps), edges


def _update_dependencies(rt, stream, node):
    flag = rt.cudaStreamUpdateCaptureDependenciesFlags.cudaStreamSetCaptureDependencies
    _ok(rt.cudaStreamUpdateCaptureDependencies(stream.ptr, [node], None, 1, flag),
        "cudaStreamUpdateCaptureDependencies")
