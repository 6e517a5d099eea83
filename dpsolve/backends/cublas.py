"""variant="cublas": the paper's CUBLASL. The host drives the loop; vector operations are cuBLAS
calls in host pointer mode, so every DOT (and NRM2) returns its scalar to the host and the host
waits for it, as the legacy cuBLAS interface did. SpMV is dpsolve's own kernel.

Per iteration:

    O1  spmv(p -> v)                          dpsolve kernel
    O2  pv = cublas dot(p, v)                 -> host (a wait)
        alpha = sigma / pv                    on the host; non-finite -> info = -10, x untouched
    O3  cublas axpy(alpha, p, x)
    O4  cublas axpy(-alpha, v, r)
        jacobi: z = D^-1 r                    dpsolve kernel (preconditioned only)
    O5  zeta = cublas dot(r, z)               -> host (a wait)
    O6, O7  beta = zeta / sigma; sigma = zeta on the host
    O8  cublas scal(beta, p); axpy(1, z, p)   p = z + beta p (cuBLAS has no XPAY)
    O9  tau = sqrt(zeta), or cublas nrm2(r) when preconditioned (-> host, a wait)
"""
from __future__ import annotations

import math

import numpy as np

from ..cuda import ops
from . import _gpu
from ._gpu import GpuBackend


class _Cublas:
    """Thin host-pointer-mode wrappers over CuPy's cuBLAS bindings for one dtype."""

    def __init__(self, dtype, stream, sync):
        import cupy
        from cupy_backends.cuda.libs import cublas
        self.lib = cublas
        self.h = cupy.cuda.device.get_cublas_handle()
        p = "s" if dtype == np.float32 else "d"
        self._dot, self._axpy = getattr(cublas, p + "dot"), getattr(cublas, p + "axpy")
        self._scal, self._nrm2 = getattr(cublas, p + "scal"), getattr(cublas, p + "nrm2")
        self.host = np.zeros(2, dtype=dtype)            # [result, alpha]: host-side scalars
        self.stream, self.sync = stream, sync

    def __enter__(self):
        self.old_mode = self.lib.getPointerMode(self.h)
        self.old_stream = self.lib.getStream(self.h)
        self.lib.setPointerMode(self.h, self.lib.CUBLAS_POINTER_MODE_HOST)
        self.lib.setStream(self.h, self.stream.ptr)
        return self

    def __exit__(self, *exc):
        self.lib.setPointerMode(self.h, self.old_mode)
        self.lib.setStream(self.h, self.old_stream)
        return False

    def _result(self):
        return self.host.ctypes.data

    def dot(self, x, y):
        ops.LAUNCHES.add()
        self._dot(self.h, x.size, x.data.ptr, 1, y.data.ptr, 1, self._result())
        self.sync.waits += 1          # host pointer mode: the call returned only once the GPU did
        return self.host[0]

    def nrm2(self, x):
        ops.LAUNCHES.add()
        self._nrm2(self.h, x.size, x.data.ptr, 1, self._result())
        self.sync.waits += 1
        return self.host[0]

    def axpy(self, alpha, x, y):
        ops.LAUNCHES.add()
        self.host[1] = alpha
        self._axpy(self.h, x.size, self.host.ctypes.data + self.host.itemsize, x.data.ptr, 1,
                   y.data.ptr, 1)

    def scal(self, alpha, x):
        ops.LAUNCHES.add()
        self.host[1] = alpha
        self._scal(self.h, x.size, self.host.ctypes.data + self.host.itemsize, x.data.ptr, 1)


class CublasBackend(GpuBackend):
    name = "cublas"

    def extra_availability(self):
        try:
            from cupy_backends.cuda.libs import cublas  # noqa: F401
        except Exception as e:
            return False, f"CuPy's cuBLAS bindings are unavailable: {e}"
        return True, None

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        import cupy
        A, stream = st.A, st.stream
        pre = st.inv_diag is not None
        state = {}
        with _Cublas(st.dtype, stream, sync) as cb:
            def start():
                cupy.copyto(st.r, st.b)                          # r = b - A x
                ops.LAUNCHES.add()
                ops.spmv(A, x, st.v, stream)
                cb.axpy(-1.0, st.v, st.r)
                if pre:
                    ops.jacobi(st.inv_diag, st.r, st.z, stream)
                state["sigma"] = float(cb.dot(st.r, st.z))
                tau = float(cb.nrm2(st.r)) if pre else math.sqrt(abs(state["sigma"]))
                cupy.copyto(st.p, st.z)
                ops.LAUNCHES.add()
                return tau, 0

            def step():
                ops.spmv(A, st.p, st.v, stream)                  # O1
                pv = float(cb.dot(st.p, st.v))                   # O2 (host wait)
                alpha = state["sigma"] / pv if pv != 0 else math.inf
                if not math.isfinite(alpha):
                    return math.nan, 1
                cb.axpy(alpha, st.p, x)                          # O3
                cb.axpy(-alpha, st.v, st.r)                      # O4
                if pre:
                    ops.jacobi(st.inv_diag, st.r, st.z, stream)
                zeta = float(cb.dot(st.r, st.z))                 # O5 (host wait)
                beta = zeta / state["sigma"]                     # O6
                state["sigma"] = zeta                            # O7
                cb.scal(beta, st.p)                              # O8: p = beta p + z
                cb.axpy(1.0, st.z, st.p)
                tau = float(cb.nrm2(st.r)) if pre else math.sqrt(abs(zeta))   # O9
                return tau, 0

            info, its = _gpu.host_cg_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}
