"""The executor: one object that runs dpsolve's operations on one GPU stream.

It owns what used to be module state of ``ops``: the stream, the sync mode of the run in
progress, the DOT partials scratch, launch counting and recording. The vector operations and the
SpMV are its methods, so a loop written over an executor (``dpsolve/backends/cuda.py``, the
set-up of every host-driven variant in ``_gpu.GpuState``) says what it computes, not how::

    ex.spmv(A, p, v)                 # v = A p
    ex.dot(p, v, s(PV))              # pv = <p, v>, on the device
    ex.axpy(s(ALPHA), p, x)          # x += alpha p

and an executor of another kind can run the same loop: a distributed one replaces ``dot`` (a
local partial, then an all-reduce) and ``spmv`` (a halo exchange around the local product).

The kernel wrappers of ``ops`` launch through :func:`launch`, which counts on (or records into)
the executor active on this thread (``with ex:``); a thread with none active has its own
default, so counting and recording are per thread, never shared between threads.
"""
from __future__ import annotations

import threading

from . import pdl

_local = threading.local()


class Plan:
    """A recorded sequence of launches with fixed arguments, replayed as it is: the host-driven
    loops record one iteration once and replay it, so no Python wrapper runs per iteration."""

    def __init__(self):
        self.launches = []

    def run(self, stream) -> None:
        # a pdl.Kernel goes with programmatic dependent launch where the stream is being
        # captured (variant graph), asked once a replay: a host-driven loop replays a plan an
        # iteration, and its launches go straight to CuPy
        programmatic = pdl.capturing(stream)
        for kernel, grid, block, args, shared_mem in self.launches:
            if grid is None:
                kernel()                   # a host_call
            elif type(kernel) is pdl.Kernel:
                if programmatic:
                    kernel.programmatic(grid, block, args, stream, shared_mem)
                else:
                    kernel.raw(grid, block, args, stream=stream, shared_mem=shared_mem)
            else:
                kernel(grid, block, args, stream=stream, shared_mem=shared_mem)
        current().launches += len(self.launches)

    def __len__(self):
        return len(self.launches)


class _Recording:
    """``with ex.record() as plan:``: ``ex`` active and capturing into a new plan."""

    def __init__(self, ex):
        self.ex = ex

    def __enter__(self) -> Plan:
        if self.ex._recording is not None:
            raise RuntimeError("an executor's record() does not nest")
        self.plan = Plan()
        self.ex._recording = self.plan.launches
        self.ex.__enter__()
        return self.plan

    def __exit__(self, *exc):
        self.ex._recording = None
        return self.ex.__exit__(*exc)


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = [Executor(None)]      # the thread's default: counts only
    return stack


def current() -> "Executor":
    """The executor active on this thread (the innermost ``with ex:``), or its default."""
    return _stack()[-1]


def launch(kernel, grid, block, args, stream=None, shared_mem=0) -> None:
    """Every host-side kernel launch of dpsolve goes through here: counted by the active
    executor, or captured into its plan inside ``ex.record()``."""
    ex = current()
    if ex._recording is not None:
        ex._recording.append((kernel, grid, block, args, shared_mem))
        return
    ex.launches += 1
    kernel(grid, block, args, stream=stream, shared_mem=shared_mem)


def host_call(fn) -> None:
    """Run ``fn()`` (Python between kernels: a user's operator) now or, inside ``record()``, at
    its place in the recorded plan."""
    ex = current()
    if ex._recording is not None:
        ex._recording.append((fn, None, None, None, None))
        return
    fn()


class Executor:
    """dpsolve's operations on one stream. ``with ex:`` makes it this thread's active executor
    (launches are counted on it); ``ex.record()`` captures the launches of a block of operations
    into a :class:`Plan`; ``ex.launches`` counts those issued (plans replayed included) and
    cuBLAS calls reported with ``count``."""

    def __init__(self, stream, dtype=None):
        self.stream = stream
        self.launches = 0
        self._recording = None
        self.partials = None
        if dtype is not None:                   # the two-stage DOT's scratch, made once
            import cupy
            with stream:
                self.partials = cupy.zeros(2 * ops.DOT_MAX_PARTIALS, dtype)

    # --- plumbing ------------------------------------------------------------------------
    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        return False

    def record(self) -> _Recording:
        """``with ex.record() as plan:`` captures the launches of the operations inside."""
        return _Recording(self)

    def count(self, k: int = 1) -> None:
        """Count k launches issued outside ``launch`` (cuBLAS calls, copies)."""
        self.launches += k

    # --- operations ----------------------------------------------------------------------
    def spmv(self, A, x, y) -> None:
        """y = A x (a device matrix, or a user's operator called between kernels)."""
        ops.spmv(A, x, y, self.stream)

    def dot(self, x, y, out) -> None:
        """out[0] = <x, y> on the device (two kernels)."""
        ops.dot(x, y, out, self.partials, self.stream)

    def nrm2(self, x, out) -> None:
        """out[0] = ||x|| on the device (two kernels)."""
        ops.nrm2(x, out, self.partials, self.stream)

    def dots(self, pairs) -> None:
        """Several inner products ``(x, y, out)``, each as :meth:`dot`; a distributed executor
        all-reduces them together when their ``out`` slots are adjacent (CG's <r, z> and
        <r, r> with a preconditioner: one all-reduce, not two)."""
        for x, y, out in pairs:
            self.dot(x, y, out)

    def allreduce_slots(self, view) -> None:
        """Sum the k adjacent scalar slots of ``view`` (a device view of ``GpuState.scal``) over
        the ranks of a distributed solve, in ONE all-reduce: a no-op on one GPU, whose local
        sums are the global ones (the single-reduction CG reduces its three inner products
        so; ``dpsolve/distributed/gpu.py``'s executor all-reduces them)."""

    def axpy(self, alpha, x, y, sign=1.0) -> None:
        """y += sign * alpha[0] x."""
        ops.axpy(alpha, x, y, sign=sign, stream=self.stream)

    def xpay(self, x, alpha, y) -> None:
        """y = x + alpha[0] y."""
        ops.xpay(x, alpha, y, self.stream)

    def scalar(self, source, name, dtype, *ptrs, block=False) -> None:
        """A scalar kernel over device scalar slots (cg_alpha, bicg_beta, ...)."""
        ops.scalar(source, name, dtype, *ptrs, stream=self.stream, block=block)

    def pointwise(self, pc, r, z, adjoint: bool = False) -> None:
        """z = M r (M^H r) of a pointwise preconditioner given by its PrecondArgs record."""
        ops.pointwise(pc, r, z, adjoint=adjoint, stream=self.stream)

    # copy and fill run on CuPy's current stream: the runs issue them inside ``with stream:``

    def copy(self, src, dst) -> None:
        """dst = src (a device-to-device copy, counted as a launch)."""
        import cupy
        cupy.copyto(dst, src)
        self.count()

    def fill(self, v, value) -> None:
        """v[:] = value (counted as a launch)."""
        v.fill(value)
        self.count()


# at the end: ops launches through this module's ``launch`` (either may be imported first)
from . import ops  # noqa: E402
