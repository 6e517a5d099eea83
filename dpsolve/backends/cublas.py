"""variant="cublas": the paper's CUBLASL. The host drives the loop; vector operations are cuBLAS
calls in host pointer mode, so every DOT (and NRM2) returns its scalar to the host and the host
waits for it, as the legacy cuBLAS interface did. SpMV is dpsolve's own kernel.

Per iteration:

    O1  spmv(p -> v)                          dpsolve kernel
    O2  pv = cublas dot(p, v)                 -> host (a wait)
        alpha = sigma / pv                    on the host; non-finite -> info = -10, x untouched
    O3  cublas axpy(alpha, p, x)
    O4  cublas axpy(-alpha, v, r)
        psolve: z = M r                       Jacobi kernel or the user's M (preconditioned)
    O5  zeta = cublas dot(r, z)               -> host (a wait)
    O6, O7  beta = zeta / sigma; sigma = zeta on the host
    O8  cublas scal(beta, p); axpy(1, z, p)   p = z + beta p (cuBLAS has no XPAY)
    O9  tau = sqrt(zeta), or cublas nrm2(r) when preconditioned (-> host, a wait)

BiCG and BiCGStab follow dpsolve/reference/bicg.py and bicgstab.py line by line with host-side
scalars in the working dtype (NumPy scalars, as the reference computes them), so every breakdown
test (-10, -11), every non-finite-scalar test (-10: rho, beta, <p~, q> or <r~, v>, alpha; ||s||,
<t, s>, <t, t>, omega; tau in host_loop) and BiCGStab's ||s|| < atol exit is decided on the host,
where the reference decides it, before x takes the update it guards; a test that fails on
cuBLAS's inner product is confirmed with dpsolve's accurate one first (GpuState.confirm_dot: see
dpsolve/reference/_util.py, dot_accurate). NRM2 is cuBLAS's scaled one, which does not overflow
where the reference's sqrt(<r, r>) does: a ||r|| above about 2e19 (float32) that stops the
reference with -10 at the end of iteration j goes on here, and usually stops at the head of
iteration j + 1 instead (rho, an inner product of vectors that large, overflows too): the same x
and count. Per iteration:

    BiCG       [jacobi z, conj-jacobi z~]; rho = dot(r~, z) (wait); p = z + beta p and
               p~ = z~ + conj(beta) p~ (scal + axpy each; copies in the first iteration);
               spmv q = A p, q~ = A^H p~; dot(p~, q) (wait); axpy x, r, r~; nrm2(r) (wait)
               3 host waits, 12 launches (14 preconditioned)
    BiCGStab   rho = dot(r~, r) (wait); p = r + beta (p - omega v) (axpy, scal, axpy);
               [jacobi p^]; spmv v = A p^; dot(r~, v) (wait); s = r - alpha v (axpy, over r);
               nrm2(s) (wait); [jacobi s^]; spmv t = A s^; dot(t, s), dot(t, t) (2 waits);
               axpy x twice; r = s - omega t (axpy); nrm2(r) (wait)
               6 host waits, 15 launches (17 preconditioned)
"""
from __future__ import annotations

import math

import numpy as np

from ..cuda import ops
from . import _gpu
from ._gpu import CONVERGED_MID_STEP, OK, HostDrivenBackend


# cuBLAS routine names per dtype: (prefix, the conjugating DOT, NRM2). <x, y> = x^H y, as SciPy's
# dotprod: cublas<c|z>dotc conjugates its first argument.
_BLAS_NAMES = {"f": ("s", "sdot", "snrm2"), "d": ("d", "ddot", "dnrm2"),
               "F": ("c", "cdotc", "scnrm2"), "D": ("z", "zdotc", "dznrm2")}


class _Cublas:
    """Thin host-pointer-mode wrappers over CuPy's cuBLAS bindings for one dtype."""

    def __init__(self, dtype, stream, sync, ex):
        import cupy
        from cupy_backends.cuda.libs import cublas
        self.lib = cublas
        self.h = cupy.cuda.device.get_cublas_handle()
        dtype = np.dtype(dtype)
        p, dot, nrm2 = _BLAS_NAMES[dtype.char]
        self._dot, self._axpy = getattr(cublas, dot), getattr(cublas, p + "axpy")
        self._scal, self._nrm2 = getattr(cublas, p + "scal"), getattr(cublas, nrm2)
        self._copy = getattr(cublas, p + "copy", None)   # not in every CuPy's bindings (14.2)
        self.host = np.zeros(2, dtype=dtype)            # [result, alpha]: host-side scalars
        self.host_norm = np.zeros(1, dtype=np.finfo(dtype).dtype)   # NRM2's result is real
        self.stream, self.sync = stream, sync
        self.ex = ex                                     # counts the cuBLAS calls as launches

    def __enter__(self):
        self.old_mode = self.lib.getPointerMode(self.h)
        self.lib.setPointerMode(self.h, self.lib.CUBLAS_POINTER_MODE_HOST)
        self.lib.setStream(self.h, self.stream.ptr)
        return self

    def __exit__(self, *exc):
        # The handle is CuPy's, which sets its stream before every call of its own. The stream
        # the handle had on entry is not restored: it can be one destroyed since (a prepared
        # system's, garbage-collected), and cuBLAS's setStream on a destroyed stream failed with
        # "context is destroyed" on the H100 (the cublas + Chebyshev tests, issue 30); CuPy's
        # current stream always exists.
        import cupy
        self.lib.setPointerMode(self.h, self.old_mode)
        self.lib.setStream(self.h, cupy.cuda.get_current_stream().ptr)
        return False

    def _result(self):
        return self.host.ctypes.data

    def dot(self, x, y):
        self.ex.count()
        self._dot(self.h, x.size, x.data.ptr, 1, y.data.ptr, 1, self._result())
        self.sync.waits += 1          # host pointer mode: the call returned only once the GPU did
        return self.host[0]

    def nrm2(self, x):
        self.ex.count()
        self._nrm2(self.h, x.size, x.data.ptr, 1, self.host_norm.ctypes.data)
        self.sync.waits += 1
        return self.host_norm[0]

    def axpy(self, alpha, x, y):
        self.ex.count()
        self.host[1] = alpha
        self._axpy(self.h, x.size, self.host.ctypes.data + self.host.itemsize, x.data.ptr, 1,
                   y.data.ptr, 1)

    def scal(self, alpha, x):
        self.ex.count()
        self.host[1] = alpha
        self._scal(self.h, x.size, self.host.ctypes.data + self.host.itemsize, x.data.ptr, 1)

    def copy(self, x, y):
        """y = x: cublas<t>copy where CuPy binds it, else a device-to-device copy on the same
        stream (CuPy 14.2's cuBLAS bindings have no copy)."""
        self.ex.count()
        if self._copy is not None:
            self._copy(self.h, x.size, x.data.ptr, 1, y.data.ptr, 1)
        else:
            import cupy
            cupy.cuda.runtime.memcpyAsync(y.data.ptr, x.data.ptr, x.nbytes,
                                          cupy.cuda.runtime.memcpyDeviceToDevice, self.stream.ptr)


def rho_test(st, cb, a, b, tol, sync):
    """(rho = <a, b>, 0), or (rho, -10): |rho| < tol, confirmed with the accurate sum first, or
    rho non-finite. SciPy's rho breakdown test as the reference makes it. One host wait (two
    when confirmed)."""
    rho = cb.dot(a, b)                                       # (wait)
    if abs(rho) < tol:
        rho = st.confirm_dot(a, b, sync)
        if abs(rho) < tol:
            return rho, -10
    return rho, (0 if np.isfinite(rho) else -10)


def alpha_test(st, cb, rho, a, b, sync):
    """(alpha = rho / <a, b>, 0), or (None, SciPy's code): -11 when <a, b> == 0, confirmed
    with the accurate sum first; -10 when <a, b> or alpha is non-finite. One host wait."""
    rv = cb.dot(a, b)                                        # (wait)
    if rv == 0:
        rv = st.confirm_dot(a, b, sync)
        if rv == 0:
            return None, -11
    alpha = rho / rv
    if not (np.isfinite(rv) and np.isfinite(alpha)):
        return None, -10
    return alpha, 0


class CublasBackend(HostDrivenBackend):
    name = "cublas"
    takes_operator_M = True

    @staticmethod
    def _probe():
        try:
            from cupy_backends.cuda.libs import cublas  # noqa: F401
        except Exception as e:
            return False, f"CuPy's cuBLAS bindings are unavailable: {e}"
        return True, None

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        import cupy
        A, stream = st.A, st.stream
        pre = st.preconditioned
        state = {}
        with _Cublas(st.dtype, stream, sync, st.ex) as cb, np.errstate(all="ignore"):
            def start():
                cupy.copyto(st.r, st.b)                          # r = b - A x
                st.ex.count()
                ops.spmv(A, x, st.v, stream)
                cb.axpy(-1.0, st.v, st.r)
                if pre:
                    st.psolve(st.r, st.z)
                state["sigma"] = cb.dot(st.r, st.z)
                tau = float(cb.nrm2(st.r)) if pre else math.sqrt(abs(state["sigma"]))
                cupy.copyto(st.p, st.z)
                st.ex.count()
                return tau, 0

            def step():
                ops.spmv(A, st.p, st.v, stream)                  # O1
                pv = cb.dot(st.p, st.v)                          # O2 (host wait)
                alpha = state["sigma"] / pv if pv != 0 else math.inf
                if not np.isfinite(alpha):
                    return math.nan, _gpu.BREAKDOWN
                cb.axpy(alpha, st.p, x)                          # O3
                cb.axpy(-alpha, st.v, st.r)                      # O4
                if pre:
                    st.psolve(st.r, st.z)
                zeta = cb.dot(st.r, st.z)                        # O5 (host wait)
                beta = zeta / state["sigma"]                     # O6
                state["sigma"] = zeta                            # O7
                cb.scal(beta, st.p)                              # O8: p = beta p + z
                cb.axpy(1.0, st.z, st.p)
                tau = float(cb.nrm2(st.r)) if pre else math.sqrt(abs(zeta))   # O9
                return tau, 0

            info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}

    @staticmethod
    def _residual_start(st, x, cb):
        """r = b - A x; r~ = r; returns (||r||, OK). Shared by BiCG and BiCGStab."""
        import cupy
        cupy.copyto(st.r, st.b)
        st.ex.count()
        ops.spmv(st.A, x, st.v, st.stream)
        cb.axpy(-1.0, st.v, st.r)
        cb.copy(st.r, st.vec("rt"))
        return float(cb.nrm2(st.r)), OK

    def bicg(self, st, x, *, atol, maxiter, sync, callback):
        A, AH, stream = st.A, st.AH, st.stream
        pre = st.preconditioned
        r, rt, p, pt, q, qt = st.r, st.vec("rt"), st.p, st.vec("pt"), st.v, st.vec("qt")
        z, zt = (st.z, st.vec("zt")) if pre else (r, rt)
        tol = st.breakdown_tol
        state = {"rho_prev": None}
        with _Cublas(st.dtype, stream, sync, st.ex) as cb, np.errstate(all="ignore"):
            def start():
                state["rho_prev"] = None
                return self._residual_start(st, x, cb)

            def step():
                if pre:
                    st.psolve(r, z)                                  # z = M r
                    st.rpsolve(rt, zt)                               # z~ = M^H r~
                rho, stop = rho_test(st, cb, rt, z, tol, sync)          # rho = <r~, z>
                if stop:
                    return math.nan, stop                            # -10
                if state["rho_prev"] is None:
                    cb.copy(z, p)                                    # p = z, p~ = z~
                    cb.copy(zt, pt)
                else:
                    beta = rho / state["rho_prev"]
                    if not np.isfinite(beta):
                        return math.nan, -10
                    cb.scal(beta, p)                                 # p = z + beta p
                    cb.axpy(1.0, z, p)
                    cb.scal(np.conj(beta), pt)                       # p~ = z~ + conj(beta) p~
                    cb.axpy(1.0, zt, pt)
                ops.spmv(A, p, q, stream)                            # q = A p
                ops.spmv(AH, pt, qt, stream)                         # q~ = A^H p~
                alpha, stop = alpha_test(st, cb, rho, pt, q, sync)  # rho / <p~, q>
                if stop:
                    return math.nan, stop                            # -11 or -10, x untouched
                cb.axpy(alpha, p, x)                                 # x += alpha p
                cb.axpy(-alpha, q, r)                                # r -= alpha q
                cb.axpy(-np.conj(alpha), qt, rt)                     # r~ -= conj(alpha) q~
                state["rho_prev"] = rho
                return float(cb.nrm2(r)), OK                         # ||r|| (wait)

            info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}

    def bicgstab(self, st, x, *, atol, maxiter, sync, callback):
        A, stream = st.A, st.stream
        pre = st.preconditioned
        r, rt, p, v, t = st.r, st.vec("rt"), st.p, st.v, st.vec("t")
        phat, shat = (st.vec("phat"), st.vec("shat")) if pre else (p, r)   # s lives in r
        tol = st.breakdown_tol
        state = {}
        with _Cublas(st.dtype, stream, sync, st.ex) as cb, np.errstate(all="ignore"):
            def start():
                state.clear()
                return self._residual_start(st, x, cb)

            def step():
                rho, stop = rho_test(st, cb, rt, r, tol, sync)          # rho = <r~, r>
                if stop:
                    return math.nan, stop                            # -10
                if not state:
                    cb.copy(r, p)                                    # p = r
                else:
                    omega = state["omega"]
                    if abs(omega) < tol:
                        return math.nan, -11
                    beta = (rho / state["rho_prev"]) * (state["alpha"] / omega)
                    if not np.isfinite(beta):
                        return math.nan, -10
                    cb.axpy(-omega, v, p)                            # p = r + beta (p - omega v)
                    cb.scal(beta, p)
                    cb.axpy(1.0, r, p)
                if pre:
                    st.psolve(p, phat)                               # p^ = M p
                ops.spmv(A, phat, v, stream)                         # v = A p^
                alpha, stop = alpha_test(st, cb, rho, rt, v, sync)  # rho / <r~, v>
                if stop:
                    return math.nan, stop                            # -11 or -10, x untouched
                cb.axpy(-alpha, v, r)                                # s = r - alpha v (over r)
                snorm = cb.nrm2(r)                                   # ||s|| (wait)
                if snorm < atol:
                    cb.axpy(alpha, phat, x)
                    return math.nan, CONVERGED_MID_STEP
                if pre:
                    st.psolve(r, shat)                               # s^ = M s
                ops.spmv(A, shat, t, stream)                         # t = A s^
                ts, tt = cb.dot(t, r), cb.dot(t, t)                  # <t, s>, <t, t> (2 waits)
                if abs(ts / tt) < tol:                               # confirmed: the omega test
                    ts = st.confirm_dot(t, r, sync)
                omega = ts / tt
                cb.axpy(alpha, phat, x)                              # x += alpha p^ + omega s^
                if not all(np.isfinite(val) for val in (snorm, ts, tt, omega)):
                    return math.nan, -10                             # non-finite: -10, x with
                cb.axpy(omega, shat, x)                              # alpha p^ only
                cb.axpy(-omega, t, r)                                # r = s - omega t
                state.update(rho_prev=rho, alpha=alpha, omega=omega)
                return float(cb.nrm2(r)), OK                         # ||r|| (wait)

            info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}
