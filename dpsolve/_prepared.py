"""A prepared system: pay for the set-up of ``A`` once, then solve for many right-hand sides.

    P = dpsolve.prepare(A, "cg", M="jacobi")          # checks, transfer, format, kernels: once
    x, info = P.solve(b)                              # each solve: b, x0 and the iterations
    x, info = dpsolve.cg(P, b2, rtol=1e-8)            # the same, through SciPy's signature
    P.update(A_new)                                   # a changed A: prepare it again

``prepare`` does what a one-shot call does before its first iteration -- validation, the
conversion to CSR, the transfer to the device, the format choice and its layout (ELL padding,
csr-adaptive's bins), BiCG's transpose, the graph build, the kernel lookup -- and keeps the
result. ``solve`` then pays only for ``b`` and ``x0`` (one transfer and one host wait on the GPU)
and the solve itself. A CG system on variant ``persistent`` solving for a CuPy ``b`` of its dtype
(no ``x0``, callback, ``full_output`` or ``energy``) takes a shorter path still: one launch and
one host wait for the whole call (``_fast.py``).

**A snapshot.** A prepared system holds its own copy of ``A`` (and of an array ``M``): changing
the caller's matrix afterwards does not reach it, and ``solve`` keeps solving the system as it was
prepared -- as ``scipy.sparse.linalg.factorized`` or ``splu`` do. To solve with changed values,
call ``update(A)`` (or prepare again). A ``LinearOperator`` ``A`` or ``M`` is the exception: it is
called as it is at each solve, since dpsolve cannot copy a function.

**Types.** The working dtype is fixed when preparing: A's (integers become float64), or the
``dtype`` given; ``update`` keeps it. Every cast into it follows NumPy's ``same_kind`` rule: a
float64 ``b`` (or ``A``, or ``M``) into a float32 system is solved in float32, while a complex
``A``, ``M``, ``b`` or ``x0`` for a real system is a TypeError naming both dtypes (its imaginary
part would be dropped). Output follows ``b``: NumPy in, NumPy out; CuPy in, CuPy out.

**Threads.** A prepared system may be shared between threads: its solves (and ``update``) run one
at a time, each with its own right-hand side, under the system's lock; a GPU system keeps its
own stream and buffers, so whichever thread solves orders its work after the set-up. A solve
re-entered from its own callback (or from an operator it calls) is refused with RuntimeError:
the outer solve holds the state. Prepare a second system for nested solves.
"""
from __future__ import annotations

import threading
import time
import weakref

import numpy as np

from . import _fast
from . import _frontend as fe
from . import methods as method_table
from ._system import (System, check_vector, device_system, host_system, host_vector, split_x0,
                      sum_of_squares)
from .formats.csr import _is_cupy
from .report import SolveReport



class PreparedSystem:
    """``A`` (with its method, preconditioner, variant, format and sync mode) ready to solve.

    Made by :func:`dpsolve.prepare`. Attributes: ``method``, ``variant`` and ``format`` (what
    "auto" resolved to), ``sync``, ``n``, ``nnz``, ``dtype``, ``precond`` (the bound preconditioner:
    an AMG hierarchy's ``levels``, ``setup_times``, ...), and ``prepare_time`` (seconds the
    preparation took).
    """

    def __init__(self, A, method="cg", *, M=None, variant="auto", format="auto",
                 sync="polling", dtype=None):
        method_table.get(method)                 # an unknown method is a ValueError naming them
        fe.check_options(variant, sync, format)
        if dtype is not None:
            dtype = np.dtype(dtype)
            if dtype.char not in "fdFD":
                raise TypeError(f"dtype must be float32, float64, complex64 or complex128, "
                                f"got {dtype}")
        self.method, self.sync = method, sync
        self._options = dict(M=M, variant=variant, format=format, dtype=dtype)
        self._lock, self._owner, self._res = threading.Lock(), None, None
        self._fast = None                        # the one-launch CG solve (_fast.py), if it applies
        device = fe.on_device(variant)
        if device:
            from ._setup import spare, system_resources
            self._res = system_resources()       # this system's own stream and buffers
            weakref.finalize(self, spare, self._res).atexit = False   # for the next system
        with self._exclusive():
            self._build(A, device)
        self._options["dtype"] = self.dtype      # update() keeps it

    def _exclusive(self):
        """One call at a time (a solve or an update), on this system's own GPU resources; the
        same thread coming back (a callback that solves with this system) is refused."""
        return _Exclusive(self)

    def _build(self, A, device):
        t0 = time.perf_counter()
        o = self._options
        if device:
            base, _ = device_system(self.method, A, None, None, o["M"], dtype=o["dtype"],
                                    copy=True, sync=self.sync)
        else:
            base = host_system(self.method, A, o["M"], o["dtype"])
        previous = getattr(self, "_base", None)
        if previous is not None:                 # update(A): what the preconditioner can keep
            base.M.inherit(previous.M)
        backend, fmt = fe.pick(base, o["variant"], o["format"], None)
        kw = {"cache": False} if backend.name == "graph" else {}
        state = fe.prepared(backend, base, fmt, self.sync, wait=True, **kw)
        # everything or nothing: a failed update leaves the previous system in place
        self._base, self._backend, self._state, self._device = base, backend, state, device
        self.variant, self.format = backend.name, fmt
        self.n, self.nnz, self.dtype = base.n, base.nnz, base.dtype
        self.precond = base.M                    # the bound preconditioner (its hierarchy, ...)
        self._fast = _fast.bind(self)
        self.prepare_time = time.perf_counter() - t0

    def update(self, A) -> None:
        """Prepare again with a changed ``A`` (same method, M, variant, format, sync and working
        dtype: A's dtype must cast to it by ``same_kind``). ``A`` must have the shape of the one
        prepared; on an error the previous system stays."""
        shape = getattr(A, "shape", None)
        if shape is not None and tuple(shape) != (self.n, self.n):
            raise ValueError(f"update needs a {self.n} x {self.n} matrix, got shape {tuple(shape)}")
        with self._exclusive():
            self._build(A, self._device)

    def __repr__(self):
        return (f"<dpsolve.PreparedSystem {self.method} n={self.n} nnz={self.nnz} "
                f"{self.dtype} variant={self.variant} format={self.format} sync={self.sync}>")

    def _vector(self, v, what):
        shape = (self.n, self.n)
        v = check_vector(v, shape, what)
        if not np.can_cast(v.dtype, self.dtype, "same_kind"):
            raise TypeError(f"{what} has dtype {v.dtype}, which does not cast to this prepared "
                            f"system's {self.dtype}; prepare it with dtype={v.dtype} (or cast "
                            f"{what})")
        return v.ravel()

    def solve(self, b, x0=None, *, rtol=1e-05, atol=0.0, maxiter=None, callback=None,
              full_output=False, energy=False, **options):
        """Solve ``A x = b`` with the prepared method: SciPy's arguments, defaults and
        ``(x, info)`` codes, as :func:`dpsolve.cg` (``full_output``, ``energy`` likewise);
        ``options``: the method's own (GMRES's ``restart``, ...). Thread-safe (one solve at a
        time); re-entering from this solve's own callback raises RuntimeError."""
        fast = self._fast
        if (fast is not None and x0 is None and callback is None and not full_output
                and not energy and not options and fast.eligible(b, rtol, atol, maxiter)):
            me = threading.get_ident()
            if self._owner != me:                # (re-entered: the general path says so)
                with self._lock:
                    self._owner = me
                    try:
                        out = fast.solve(b, rtol, atol, maxiter)
                    finally:
                        self._owner = None
                if out is not None:
                    return out
        t0, c0 = time.perf_counter(), time.process_time()
        fe.check_options(self._options["variant"], self.sync, self._options["format"], maxiter,
                         callback)
        from . import _block
        if _block.is_block(b):                   # B (n, k): its columns, one after another
            return _block.solve_columns(self, b, x0, rtol=rtol, atol=atol, maxiter=maxiter,
                                        callback=callback, full_output=full_output,
                                        energy=energy, options=options, t0=t0)
        options = method_table.get(self.method).check_options(options)
        out_cupy = _is_cupy(b)
        b = self._vector(b, "b")
        x0, x0_mb = split_x0(x0)
        if x0 is not None:
            x0 = self._vector(x0, "x0")
        with self._exclusive():
            if self._device:
                b, x0, sq = _device_rhs(b, x0, self.dtype, self.sync)
            else:
                b, x0, sq = _host_rhs(b, x0, self.dtype)
            system = System(self.method, self.n, self.dtype, self._base.csr,
                            self._base.operator, b, x0, self._base.M, out_cupy, options,
                            ascale=self._base.ascale)
            tol, tol_solved = fe.tolerances(system, sq, x0_mb, self.method, atol, rtol)
            report = SolveReport(variant=self.variant, format=self.format, sync=self.sync,
                                 method=self.method, dtype=str(self.dtype), n=self.n,
                                 nnz=self.nnz, tolerance=tol)
            if fe.needs_no_iteration(system, tol_solved):
                return fe.at_once(system, report, t0, c0, full_output, tol_solved)
            return fe.iterate(self._backend, self._state, system, tol_solved, maxiter, callback,
                              self.sync, energy, report, t0, c0, full_output)


class _Exclusive:
    """``PreparedSystem._exclusive``'s context: its lock, its owner thread, its Resources (a
    plain class: a generator-based context manager costs microseconds a call)."""
    __slots__ = ("system", "using")

    def __init__(self, system):
        self.system, self.using = system, None

    def __enter__(self):
        P = self.system
        me = threading.get_ident()
        if P._owner == me:
            raise RuntimeError("this prepared system is already solving in this thread (a solve "
                               "or update re-entered from its own callback or operator); "
                               "prepare a second system for nested solves")
        P._lock.acquire()
        P._owner = me
        if P._res is not None:
            from ._setup import using
            self.using = using(P._res)
            self.using.__enter__()
        return self

    def __exit__(self, *exc):
        P = self.system
        try:
            if self.using is not None:
                self.using.__exit__(*exc)
        finally:
            P._owner = None
            P._lock.release()


def _host_rhs(b, x0, dtype):
    """b and x0 as private copies in ``dtype``, checked, and ||b||^2 (the host variant)."""
    b = host_vector(b, dtype, "b")
    if x0 is not None:
        x0 = host_vector(x0, dtype, "x0")
    return b, x0, sum_of_squares(b)


def _device_rhs(b, x0, dtype, sync):
    """b and x0 on the device in ``dtype`` (not copied: only read from here on), ||b||^2 as
    summed, x0 checked: one host wait."""
    from . import _setup
    res = _setup.resources()
    stream = res.stream
    _setup.follow_caller(stream, res)         # the caller's arrays may still be in flight
    up = _setup.upload([_setup.host_part(b), _setup.host_part(x0)], stream, res)
    rb = _setup.Readback(stream, res)
    vectors = _setup.PendingVectors(b, x0, up[0], up[1], dtype, rb)
    rb.fetch(sync)
    return vectors.b, vectors.x0, vectors.finish()


def prepare(A, method="cg", *, M=None, variant="auto", format="auto", sync="polling",
            dtype=None) -> PreparedSystem:
    """Prepare ``A`` once for many solves with ``method`` (a name of ``dpsolve.methods``: "cg",
    "bicg", "bicgstab", ...).

    ``M``, ``variant``, ``format`` and ``sync`` are those of :func:`dpsolve.cg`; ``dtype`` fixes
    the working type (default: A's, integers as float64). Returns a :class:`PreparedSystem`
    whose ``solve(b, x0=None, *, rtol, atol, maxiter, callback, full_output, energy)`` takes
    SciPy's arguments; the prepared system can also be passed as ``A`` to the function of its
    method (``dpsolve.cg(P, b)``). It holds a snapshot of ``A``: see ``update``.

    With ``variant="auto"`` the choice is made without knowing whether solves will pass a
    callback: if they will, name a host-driven variant (``"merge"``, ``"cuda"``, ``"cublas"``).
    """
    return PreparedSystem(A, method, M=M, variant=variant, format=format, sync=sync, dtype=dtype)
