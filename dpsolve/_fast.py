"""The prepared call's fast path: a CG solve as one launch and one host wait (issue 31, part 3).

``P.solve(b)`` on a system prepared for CG on variant ``persistent`` (what "auto" picks for
most systems), with b a C-contiguous CuPy vector of the system's dtype and SciPy's arguments
only (``rtol``, ``atol``, ``maxiter``; no ``x0``, callback, ``full_output`` or ``energy``), skips
the general path's steps: no upload or check of b before the solve, no host-side tolerance, no
second kernel for the true residual. One launch of cg_persistent_fast (cooperative; a small
system: cg_persistent_cta, one block, ops.cta_plan) with the flags
DPS_FAST_ZERO_X | DPS_FAST_TOL | DPS_FAST_RESID does it all -- x = 0 and r = b, the tolerance
max(atol, rtol ||b||) from the kernel's own ||b||, the iterations, then ||b - A x||^2 of the x
returned -- on the caller's current CuPy stream (so b is read after whatever the caller queued
there, and x is ready for it), and one wait; the kernel writes its 8-word result area into
pinned host memory (with unified addressing; else one copy of it is queued).

The answer is the general path's: the same iterates (r = b is what b - A 0 gives), SciPy's
tolerance from ||b|| summed in another order, and the same decisions on the true residual
(``_frontend.restarted``'s, first run). Wherever the general path would do more than that --
b = 0 aside, which ends in the kernel with x = 0 -- the fast path returns None and the caller
takes the general path from the start: ||b||^2 or ||b - A x||^2 outside the range where no
scaling is needed (a NaN or Inf in b included: the general path then raises its error), or a
recurrence that converged where the true residual did not (a restart). Both paths read b only.
"""
from __future__ import annotations

import numbers

import numpy as np

from ._system import in_safe_range
from .cuda import abi

FLAGS = abi.DPS_FAST_ZERO_X | abi.DPS_FAST_TOL | abi.DPS_FAST_RESID


def bind(P):
    """The fast path for prepared system ``P``, or None where it does not apply."""
    st = getattr(P, "_state", None)
    if (not P._device or P.method != "cg" or P.variant != "persistent" or st is None
            or getattr(st, "general", True) or P._res is None):
        return None
    from .cuda import ops
    if not isinstance(st.A, ops.DeviceMatrix):
        return None
    return FastCG(P, st)


class FastCG:
    """A prepared CG system's one-launch solve (see the module): the kernel, its grid and its
    by-value argument record made once; a call patches b, x, maxiter and the tolerances."""

    def __init__(self, P, st):
        import cupy

        from .cuda import ops
        self.P, self.n, self.dtype = P, st.n, np.dtype(st.dtype)
        self.shape, self.strides = (st.n,), (self.dtype.itemsize,)   # a contiguous vector
        # one block for a small system (ops.cta_plan), else the cooperative grid
        self.kernel, self.grid, self.block, self.shared = ops.persistent_cg_kernel(st.A, True)
        self.maxiter_arg = ops._maxiter_arg
        # the general path's record (DynamicBackend.cg's operands), b and x per call
        rec = ops.cg_args(st.A, None, st.pc_args, None, st.r, st.z, st.p, st.p2, st.v,
                          st.dyn_partials, st.dyn_status, 0.0, 1, persistent=True, flags=FLAGS)
        self.rec = np.array(rec, dtype=rec.dtype)          # 0-d: its fields patched per call
        self.status = st.dyn_status
        self.host = st.dyn_host.arr                          # pinned, DYN_STATUS_WORDS doubles
        # with unified addressing the kernel writes the result area straight into the pinned
        # host buffer (cudaHostAlloc memory is device-accessible at its host address): no copy
        # to queue (H100, 2-D 64^2, maxiter=1: 38.7-44.9 -> 30.9-40.9 us a call)
        self.zero_copy = bool(cupy.cuda.Device().attributes.get("UnifiedAddressing", 0))
        if self.zero_copy:
            self.rec["status"] = self.host.ctypes.data
        self.event = P._res.wait_events[P.sync]              # spinning or blocking, as prepared
        self.real_dtype = st.real_dtype
        self.cupy = cupy
        self.memcpy = cupy.cuda.runtime.memcpyAsync
        self.d2h = cupy.cuda.runtime.memcpyDeviceToHost

    def eligible(self, b, rtol, atol, maxiter) -> bool:
        """Whether this call is the fast path's: b a C-contiguous CuPy vector of the system's
        dtype and length; rtol, atol, maxiter plain valid numbers (else the general path, which
        also raises the errors)."""
        return (type(b) is self.cupy.ndarray and b.dtype == self.dtype and b.shape == self.shape
                and b.strides == self.strides and _real(rtol) and _real(atol)
                and (maxiter is None or (type(maxiter) is int and maxiter >= 1)))

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
        rec["b"] = b.data.ptr
        rec["x"] = x.data.ptr
        rec["maxiter"] = self.maxiter_arg(maxiter, True)
        rec["atol"] = atol
        rec["rtol"] = rtol
        h = self.host
        h[abi.DYN_STATE] = abi.DYN_RUNNING                  # a kernel that did not run shows
        self.queue(stream)
        self.event.record(stream)
        self.event.synchronize()
        if h[abi.DYN_STATE] != abi.DYN_DONE:
            raise RuntimeError("variant 'persistent': the solve ended without a result")
        code = decide(int(h[abi.DYN_INFO]), int(h[abi.DYN_ITERS]), float(h[abi.DYN_BB]),
                      float(h[abi.DYN_RES2]), float(h[abi.DYN_TOL]), maxiter, self.real_dtype)
        return None if code is None else (x, code)


def decide(info, its, bb, res2, tol, maxiter, real_dtype):
    """The call's info from the kernel's result area (its info and iterations, ||b||^2,
    ||b - A x||^2, the tolerance), as ``_frontend.restarted`` decides after its first run; None
    where the general path must take over: squares outside the range that needs no scaling (a
    NaN or Inf in b among them), or a restart (the recurrence converged, the true residual not,
    iterations left). b = 0 is 0 (x = 0, SciPy's answer)."""
    if bb == 0.0:
        return 0
    if not (in_safe_range(bb, real_dtype) and in_safe_range(res2, real_dtype)):
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
