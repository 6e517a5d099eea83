"""The prepared call's fast paths: a CG solve as one launch and one host wait (issue 31, part 3),
and a graph-variant solve as one graph launch and one wait (``FastGraph``, below).

``P.solve(b)`` on a system prepared for CG on variant ``persistent`` (what "auto" picks for
most systems), with b a C-contiguous CuPy or NumPy vector of the system's dtype and SciPy's
arguments only (``rtol``, ``atol``, ``maxiter``; no ``x0``, callback, ``full_output`` or
``energy``), skips the general path's steps: no check of b and no wait before the solve (a
NumPy b's upload and x's copy back are queued around the launch), no host-side tolerance, no
second kernel for the true residual. One launch of cg_persistent_fast (cooperative; a small
system: cg_persistent_cta, one block, ops.cta_plan) with the flags
DPS_FAST_ZERO_X | DPS_FAST_TOL | DPS_FAST_RESID does it all -- x = 0 and r = b, the tolerance
max(atol, rtol ||b||) from the kernel's own ||b||, the iterations, then ||b - A x||^2 of the x
returned -- on the caller's current CuPy stream (so b is read after whatever the caller queued
there, and x is ready for it), and one wait; the kernel writes its 8-word result area into
pinned host memory (with unified addressing; else one copy of it is queued).

The answer is the general path's: the same iterates (r = b is what b - A 0 gives), SciPy's
tolerance from ||b|| summed in another order, and the same decisions on the true residual
(``_frontend.restarted``'s, first run). Wherever the general path would do more than that,
the fast path returns None and the caller takes the general path from the start: ||b||^2 or
||b - A x||^2 outside the range where no scaling is needed (a NaN or Inf in b included: the
general path then raises its error; and ||b||^2 = 0, which is b = 0 or a b whose squares
underflow: the kernel stops at once with x = 0, and the general path returns zeros for the one
and scales the other), or a recurrence that converged where the true residual did not (a
restart). Both paths read b only.

**The default call's lane** (``Lane``). ``dpsolve.cg(A, b)`` with a cupyx CSR ``A`` and a CuPy
``b`` of A's dtype, SciPy's arguments only, takes the same one launch from its third call on:
the general path's state of its second call (variant ``persistent`` in a CSR format that reads
the caller's arrays as they are: csr-scalar or csr-vector) is kept (ADOPT_AFTER: a matrix used
once pays nothing for a lane), and each later call queues csr_check over A as it is now, then
cg_persistent_fast with that check as its guard (CgArgs.guard), then waits once. So A is read
live, as the general path reads it: values changed in place are solved with, and a matrix
changed into a bad one (NaN, an index out of range, unsorted rows, a row longer than the
one-block kernel takes) stops the kernel before it reads A; the call then takes the general
path, whose checks raise the error, and the lane is dropped. A matrix whose arrays were
replaced (another pointer or size) is another key. The lanes of the last LANE_ENTRIES matrices
are kept (their work vectors, as the graph variant's cache keeps its states); a lane goes when
its matrix is garbage-collected, or by ``dpsolve.clear_cache()``.
"""
from __future__ import annotations

import numbers
import sys
import threading
import weakref

import numpy as np

from ._system import in_rhs_window, in_safe_range
from .cuda import abi

FLAGS = abi.DPS_FAST_ZERO_X | abi.DPS_FAST_TOL | abi.DPS_FAST_RESID


def bind(P):
    """The fast path for prepared system ``P``, or None where it does not apply."""
    st = getattr(P, "_state", None)
    if not P._device or st is None or P._res is None or P._base.ascale:
        return None                      # (a scaled A: the general path scales x back)
    if P.variant == "graph":
        if P.method not in GRAPH_METHODS or getattr(st, "exec", None) is None:
            return None
        return FastGraph(P._backend, st, P._res, P.sync)
    if P.method != "cg" or P.variant != "persistent" or getattr(st, "general", True):
        return None
    from .cuda import ops
    if not isinstance(st.A, ops.DeviceMatrix):
        return None
    return FastCG(st, P._res.wait_events[P.sync], res=P._res)


class _Eligible:
    """What a fast path takes: b a C-contiguous CuPy vector of the system's dtype and length, or
    (where ``res`` is set: a prepared system's) a NumPy one; rtol, atol, maxiter plain valid
    numbers (else the general path, which also raises the errors). Needs ``cupy``, ``dtype``,
    ``shape``, ``strides`` and ``res``.

    A NumPy b goes up through ``res``'s pinned staging into a device vector of the path's own,
    queued ahead of the launch, and x comes back queued behind it (``_setup.queue_download``):
    the call's one wait covers both copies. The general path would also wait for ||b|| first."""

    res = None

    def eligible(self, b, rtol, atol, maxiter) -> bool:
        kind = type(b)
        return ((kind is self.cupy.ndarray or (kind is np.ndarray and self.res is not None))
                and b.dtype == self.dtype and b.shape == self.shape
                and b.strides == self.strides and _real(rtol) and _real(atol)
                and (maxiter is None or (type(maxiter) is int and maxiter >= 1)))


class FastCG(_Eligible):
    """A CG state's one-launch solve (see the module): the kernel, its grid and its by-value
    argument record made once; a call patches b, x, maxiter and the tolerances. ``event``: the
    wait's (spinning or blocking); ``guard``: the device words of a csr_check the caller queues
    before each launch (the default call's Lane), or None (a prepared system's snapshot)."""

    def __init__(self, st, event, guard=None, res=None):
        import cupy

        from .cuda import ops
        self.n, self.dtype = st.n, np.dtype(st.dtype)
        self.shape, self.strides = (st.n,), (self.dtype.itemsize,)   # a contiguous vector
        # one block for a small system (ops.cta_plan), else the cooperative grid
        self.kernel, self.grid, self.block, self.shared = ops.persistent_cg_kernel(st.A, True)
        self.maxiter_arg = ops._maxiter_arg
        # the general path's record (DynamicBackend.cg's operands), b and x per call
        rec = ops.cg_args(st.A, None, st.pc_args, None, st.r, st.z, st.p, st.p2, st.v,
                          st.dyn_partials, st.dyn_status, 0.0, 1, persistent=True, flags=FLAGS,
                          guard=guard)
        self.rec = np.array(rec, dtype=rec.dtype)          # 0-d: its fields patched per call
        self.status = st.dyn_status
        self.host = st.dyn_host.arr                          # pinned, DYN_STATUS_WORDS doubles
        # with unified addressing the kernel writes the result area straight into the pinned
        # host buffer (cudaHostAlloc memory is device-accessible at its host address): no copy
        # to queue (H100, 2-D 64^2, maxiter=1: 38.7-44.9 -> 30.9-40.9 us a call)
        self.zero_copy = bool(cupy.cuda.Device().attributes.get("UnifiedAddressing", 0))
        if self.zero_copy:
            self.rec["status"] = self.host.ctypes.data
        self.event = event                                   # spinning or blocking
        self.real_dtype = st.real_dtype
        self.cupy = cupy
        self.memcpy = cupy.cuda.runtime.memcpyAsync
        self.d2h = cupy.cuda.runtime.memcpyDeviceToHost
        self.res, self.b_dev = res, None      # a NumPy b's device copy (made on first use)

    def queue(self, stream):
        """The call's GPU work as the record stands: the launch, and the result area's copy where
        the kernel does not write it in place (scripts/bench-call replays it)."""
        self.kernel((self.grid,), (self.block,), (self.rec[()],), stream=stream,
                    shared_mem=self.shared)
        if not self.zero_copy:
            self.memcpy(self.host.ctypes.data, self.status.data.ptr, self.host.nbytes, self.d2h,
                        stream.ptr)

    def solve(self, b, rtol, atol, maxiter):
        """(x, info) as the general path gives them, or None where it must decide (module)."""
        maxiter = 10 * self.n if maxiter is None else maxiter
        cupy = self.cupy
        stream = cupy.cuda.get_current_stream()
        x = cupy.empty(self.n, self.dtype)
        rec = self.rec
        host_b = type(b) is np.ndarray
        if host_b:
            from ._setup import upload_into
            if self.b_dev is None:
                self.b_dev = cupy.empty(self.n, self.dtype)
            upload_into(self.b_dev, b, stream, self.res)
            b = self.b_dev
        rec["b"] = b.data.ptr
        rec["x"] = x.data.ptr
        rec["maxiter"] = self.maxiter_arg(maxiter, True)
        rec["atol"] = atol
        rec["rtol"] = rtol
        h = self.host
        h[abi.DYN_STATE] = abi.DYN_RUNNING                  # a kernel that did not run shows
        self.queue(stream)
        if host_b:                               # x's copy back, ready after the wait
            from ._setup import queue_download
            finish = queue_download(x, stream, self.res)
        self.event.record(stream)
        self.event.synchronize()
        if h[abi.DYN_STATE] != abi.DYN_DONE:
            raise RuntimeError("variant 'persistent': the solve ended without a result")
        code = decide(int(h[abi.DYN_INFO]), int(h[abi.DYN_ITERS]), float(h[abi.DYN_BB]),
                      float(h[abi.DYN_RES2]), float(h[abi.DYN_TOL]), maxiter, self.real_dtype)
        if code is None:
            return None
        return (finish() if host_b else x), code


GRAPH_METHODS = ("cg", "bicg", "bicgstab")       # the graph variant's: tau_0 = ||r_0|| each


class FastGraph(_Eligible):
    """A graph state's solve (``backend``: GraphBackend; any preconditioner it captured, AMG's
    V-cycle among them) in one graph launch and one host wait: b copied into the state's b and
    x = 0 (queued, no wait), the graph with ``params[2] = rtol`` (graph.cu's graph_head makes
    the tolerance from the set-up's ||r_0|| = ||b||), x copied out, ||b - A x||^2 queued behind
    (the general path's kernels), one wait; then ``decide`` as FastCG. The general path would
    first read ||b|| back (a wait), and build a report."""

    def __init__(self, backend, st, res, sync):
        import cupy
        self.backend, self.st, self.res, self.sync = backend, st, res, sync
        self.n, self.dtype = st.n, np.dtype(st.dtype)
        self.shape, self.strides = (st.n,), (self.dtype.itemsize,)
        self.real_dtype = st.real_dtype
        self.cupy = cupy
        rt = cupy.cuda.runtime
        self.memcpy, self.d2d, self.memset = rt.memcpyAsync, rt.memcpyDeviceToDevice, rt.memsetAsync

    def solve(self, b, rtol, atol, maxiter):
        """(x, info) as the general path gives them, or None where it must decide."""
        from ._setup import Readback, follow_caller
        from .backends.graph import graph_result, start_graph
        maxiter = 10 * self.n if maxiter is None else maxiter
        st, res, cupy = self.st, self.res, self.cupy
        stream = st.stream
        nbytes = st.x.nbytes
        host_b = type(b) is np.ndarray
        if host_b:
            from ._setup import upload_into
            upload_into(st.b, b, stream, res)
        else:
            follow_caller(stream, res)           # b may still be in flight on the caller's stream
            self.memcpy(st.b.data.ptr, b.data.ptr, nbytes, self.d2d, stream.ptr)
        self.memset(st.x.data.ptr, 0, nbytes, stream.ptr)
        start_graph(st, atol, maxiter, rtol)
        if host_b:                               # x's copy back, ready after the wait
            from ._setup import queue_download
            finish = queue_download(st.x, stream, res)
        else:
            with stream:
                x = cupy.empty(self.n, self.dtype)
            self.memcpy(x.data.ptr, st.x.data.ptr, nbytes, self.d2d, stream.ptr)
        rb = Readback(stream, res)
        k = self.backend.queue_residual(st, st.x, rb)
        rb.fetch(self.sync)
        info, its = graph_result(st)
        host = st.result_host.arr
        res2 = float(np.real(rb.value(k, self.dtype)))
        window = st.precond.rhs_window() if st.general else None
        code = decide(info, its, float(host[abi.DYN_BB]), res2, float(host[abi.DYN_TOL]),
                      maxiter, self.real_dtype, window)
        if code is None:
            return None
        return (finish() if host_b else x), code


def decide(info, its, bb, res2, tol, maxiter, real_dtype, window=None):
    """The call's info from the kernel's result area (its info and iterations, ||b||^2,
    ||b - A x||^2, the tolerance), as ``_frontend.restarted`` decides after its first run; None
    where the general path must take over: squares outside the range that needs no scaling (a
    NaN or Inf in b among them), ||b|| outside the preconditioner's ``window`` (its
    ``rhs_window``: the general path scales b, ``_frontend.fit_rhs``), or a restart (the
    recurrence converged, the true residual not, iterations left). ||b||^2 = 0 is the general
    path's too: b = 0, or squares that underflow (b = 2^-600 b' in float64), which the kernel
    cannot tell apart (x = 0 with info 0 was the answer to both, wrong for the second)."""
    if not (in_safe_range(bb, real_dtype) and in_safe_range(res2, real_dtype)):
        return None
    if not in_rhs_window(bb ** 0.5, window):
        return None
    rnorm = res2 ** 0.5
    if info == 0 and rnorm <= tol:
        return 0
    if info < 0:
        return (0 if rnorm == 0 else maxiter) if tol == 0 else info
    if info > 0 or its == 0 or its >= maxiter:
        return maxiter
    return None


def _real(v) -> bool:
    """A real, non-negative, non-NaN number that is not a bool (SciPy's atol / rtol)."""
    if type(v) is float or type(v) is int:               # the usual: no ABC check
        return v >= 0 and v == v
    return bool(isinstance(v, numbers.Real) and not isinstance(v, bool) and v >= 0 and v == v)


# --------------------------------------------------------------------------- the default call
LANES = True                                  # False: every default call on the general path
LANE_ENTRIES = 2                              # matrices whose lane is kept
ADOPT_AFTER = 2           # general-path calls with one matrix before its lane is made (so that a
                          # matrix used once pays nothing for a lane; the key's count is kept)
SEEN_MAX = 16             # keys counted
LANE_FORMATS = ("csr-scalar", "csr-vector")   # the formats that read the caller's CSR as it is
_lanes = {}                                   # key -> Lane, oldest first
_seen = {}                                    # key -> general-path calls so far, oldest first
_adopting = threading.Lock()                  # one thread at a time adds (a finalizer only pops)


def lane_key(method, A, b, x0, M, callback, variant, sync, format, full_output, energy,
             options):
    """The key of a default call the lane may take (module), or None: attribute reads only."""
    if (not LANES or method != "cg" or x0 is not None or M is not None or callback is not None
            or full_output or energy or options or format not in ("auto",) + LANE_FORMATS
            or variant not in ("auto", "persistent") or sync not in ("polling", "blocking")):
        return None
    cupy, csp = sys.modules.get("cupy"), sys.modules.get("cupyx.scipy.sparse")
    if (cupy is None or csp is None or type(b) is not cupy.ndarray
            or type(A) is not csp.csr_matrix):
        return None
    data, indices, indptr = A.data, A.indices, A.indptr
    return (id(A), data.data.ptr, indices.data.ptr, indptr.data.ptr, data.size, A.shape,
            data.dtype.char, variant, format, sync, cupy.cuda.runtime.getDevice())


def lane_solve(key, A, b, rtol, atol, maxiter):
    """(x, info) of the default call by its matrix's lane, or None: no lane, another thread
    using it, or a call the general path must decide (module)."""
    lane = _lanes.get(key)
    if lane is None or lane.matrix() is not A:
        return None
    return lane.solve(b, rtol, atol, maxiter)


def adopt(key, A, b, backend, fmt, state) -> None:
    """After a default call on the general path: keep its state as the matrix's lane where the
    lane can run it (persistent CG in a LANE_FORMATS format over the caller's own arrays, b of
    the state's dtype) and the matrix has none yet. A lane that cannot be made (its kernel not
    built) warns once and turns lanes off: the call's result stands."""
    global LANES
    from .cuda import ops
    if (key is None or key in _lanes or backend.name != "persistent" or fmt not in LANE_FORMATS
            or getattr(state, "general", True) or not isinstance(state.A, ops.DeviceMatrix)
            or state.A.csr is None or b.dtype != state.dtype):
        return
    csr = state.A.csr
    if (csr.data.data.ptr, csr.indices.data.ptr, csr.indptr.data.ptr) != key[1:4]:
        return                                    # a converted copy: not the caller's arrays
    with _adopting:
        calls = _seen.pop(key, 0) + 1
        if calls < ADOPT_AFTER:
            _seen[key] = calls
            while len(_seen) > SEEN_MAX:
                del _seen[next(iter(_seen))]
            return
    try:
        lane = Lane(A, key, state)
    except Exception as e:            # the call's result stands; later calls: the general path
        LANES = False
        import warnings

        from ._errors import DpsolveWarning
        warnings.warn(f"dpsolve: the default call's one-launch lane could not be set up "
                      f"({type(e).__name__}: {e}); calls take the general path",
                      DpsolveWarning, stacklevel=4)
        return
    with _adopting:
        _lanes[key] = lane
        while len(_lanes) > LANE_ENTRIES:
            _drop(next(iter(_lanes)))


def _drop(key) -> None:
    lane = _lanes.pop(key, None)
    if lane is not None:
        lane.finalizer.detach()


def clear() -> None:
    """Let every default-call lane go (their work vectors back to CuPy's pool)."""
    for key in list(_lanes):
        _drop(key)


def clear_cache() -> None:
    """``dpsolve.clear_cache()``: let go of what dpsolve keeps between one-shot calls -- the
    default call's lanes and the graph variant's built graphs, with their device buffers (back to
    CuPy's pool). Prepared systems keep their own."""
    clear()
    _seen.clear()
    from .backends import get_backend
    graph = get_backend("graph")
    if graph is not None:
        graph._cache.clear()


class Lane:
    """One matrix's default-call solve: the general path's CG state, its one-launch FastCG
    guarded by a csr_check of the matrix queued before each launch (module)."""

    def __init__(self, A, key, state):
        import cupy

        from ._setup import csr_check_queue
        self.key, self.state, self.lock = key, state, threading.Lock()
        self.matrix = weakref.ref(A)
        self.finalizer = weakref.finalize(A, _lanes.pop, key, None)
        csr = state.A.csr
        self.guard = cupy.zeros(4, np.int32)      # csr_check's (flags, longest row, exponents)
        # the guard's csr_check of A as it is now, queued ahead of each launch
        self.queue_check = csr_check_queue(csr.indptr, csr.indices, csr.data, csr.n, self.guard)
        event = cupy.cuda.Event(block=key[9] == "blocking", disable_timing=True)
        self.fast = FastCG(state, event, guard=self.guard)
        self.cupy = cupy

    def solve(self, b, rtol, atol, maxiter):
        fast = self.fast
        if not fast.eligible(b, rtol, atol, maxiter) or not self.lock.acquire(blocking=False):
            return None
        try:
            self.queue_check(self.cupy.cuda.get_current_stream())
            out = fast.solve(b, rtol, atol, maxiter)
            if out is None and fast.host[abi.DYN_TOL] < 0:    # the guard stopped the kernel
                _drop(self.key)
            return out
        finally:
            self.lock.release()

    def queue(self, stream):
        """A call's GPU work as the record stands (scripts/bench-call replays it)."""
        self.queue_check(stream)
        self.fast.queue(stream)
