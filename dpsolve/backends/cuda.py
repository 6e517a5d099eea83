"""variant="cuda": the host drives the loop; every operation is a dpsolve kernel.

Per iteration (the paper's "CUDA" version: CUBLASL with each cuBLAS call replaced by an ad-hoc
kernel, and the scalars kept on the device):

    O1  spmv(p -> v)                     1 launch
    O2  dot(p, v) -> pv; cg_alpha        2 + 1 launches (two-stage DOT, then alpha = sigma/pv)
    O3  axpy: x += alpha p               1
    O4  axpy: r -= alpha v               1
        jacobi: z = D^-1 r               (1, preconditioned only)
    O5  dot(r, z) -> zeta                2  (+2 for <r, r> when preconditioned)
    O6, O7, O9  cg_beta                  1  (beta = zeta/sigma; sigma = zeta; tau = sqrt(<r,r>))
    O8  xpay: p = z + beta p             1
        read tau and status to the host 1 copy + 1 host wait
"""
from __future__ import annotations

from ..cuda import ops
from . import _gpu
from ._gpu import ALPHA, BETA, PV, RR, SIGMA, STATUS, TAU, ZETA, GpuBackend


class CudaBackend(GpuBackend):
    name = "cuda"

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        A, s, stream, dt = st.A, st.s, st.stream, st.dtype
        pre = st.inv_diag is not None
        parts = st.partials
        rr = RR if pre else ZETA

        def start():
            st.cg_setup(x)                                             # r, z, sigma, tau, p
            return st.read_tau(sync)

        with ops.record() as iteration:                                # captured once, replayed
            ops.spmv(A, st.p, st.v, stream)                            # O1  v = A p
            ops.dot(st.p, st.v, s(PV), parts, stream)                  # O2  <p, v>
            ops.scalar("cg", "cg_alpha", dt, s(SIGMA), s(PV), s(ALPHA), s(STATUS), stream=stream)
            ops.axpy(s(ALPHA), st.p, x, stream=stream)                 # O3  x += alpha p
            ops.axpy(s(ALPHA), st.v, st.r, sign=-1.0, stream=stream)   # O4  r -= alpha v
            if pre:
                ops.jacobi(st.inv_diag, st.r, st.z, stream)             #     z = D^-1 r
                ops.dot(st.r, st.r, s(RR), parts, stream)
            ops.dot(st.r, st.z, s(ZETA), parts, stream)                # O5  zeta = <r, z>
            ops.scalar("cg", "cg_beta", dt, s(ZETA), s(rr), s(SIGMA), s(BETA), s(TAU),
                       stream=stream)                                  # O6 O7 O9
            ops.xpay(st.z, s(BETA), st.p, stream)                      # O8  p = z + beta p

        def step():
            iteration.run(stream)
            return st.read_tau(sync)

        info, its = _gpu.host_cg_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}
