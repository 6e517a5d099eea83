"""variant="cuda": the host drives the loop; every operation is a dpsolve kernel.

Per iteration (the paper's "CUDA" version: CUBLASL with each cuBLAS call replaced by an ad-hoc
kernel, and the scalars kept on the device):

    O1  spmv(p -> v)                     1 launch
    O2  dot(p, v) -> pv; cg_alpha        2 + 1 launches (two-stage DOT, then alpha = sigma/pv)
    O3  axpy: x += alpha p               1
    O4  axpy: r -= alpha v               1
        psolve: z = M r                  (1 Jacobi kernel, or the user's M; preconditioned only)
    O5  dot(r, z) -> zeta                2  (+2 for <r, r> when preconditioned)
    O6, O7, O9  cg_beta                  1  (beta = zeta/sigma; sigma = zeta; tau = sqrt(<r,r>))
    O8  xpay: p = z + beta p             1
        read tau and status to the host 1 copy + 1 host wait

BiCG and BiCGStab follow dpsolve/reference/bicg.py and bicgstab.py step by step, one kernel per
operation (dpsolve/cuda/krylov.cu for what blas1.cu and cg.cu lack). Breakdown tests run on the
device: a scalar kernel sets the status slot (-10, -11, or 2 for BiCGStab's mid-iteration
||s|| < atol exit) and every scalar kernel and guarded update after it in the recorded iteration is
a no-op, so x is left where the reference leaves it and the host still reads (tau, status) once per
iteration. A non-finite scalar is -10 from the kernel that computes it (rho, beta: *_beta;
<p~, q> / <r~, v>, alpha: *_alpha; ||s||: bicgstab_snorm; <t, s>, <t, t>, omega:
bicgstab_omega), and a non-finite tau is -10 from host_loop, as in the reference. The first
iteration is a second recording whose scalar kernel sets beta = 0 (p and p~, or p and v, are zeroed
at set-up, so p = z + 0 p = z exactly).

BiCG, per iteration:
        jacobi: z = D^-1 r; z~ = conj(D^-1) r~   (2, preconditioned only)
        dot(r~, z) -> rho                        2
        bicg_beta: |rho| < eps^2 -> -10; beta    1
        xpay: p = z + beta p; p~ = z~ + conj(beta) p~    2
        spmv: q = A p; q~ = A^H p~               2
        dot(p~, q); bicg_alpha: == 0 -> -11      2 + 1
        guarded axpy: x, r, r~                   3
        nrm2(r) -> tau                           2 (dot_partial + nrm2_final)
    15 launches (17 preconditioned) + 1 copy + 1 host wait.

BiCGStab, per iteration (s is written over r):
        dot(r~, r) -> rho                        2
        bicgstab_beta: -10 (rho), -11 (omega); beta      1
        bicgstab_p: p = r + beta (p - omega v)   1
        jacobi: p^ = D^-1 p                      (1, preconditioned only)
        spmv: v = A p^; dot(r~, v)               1 + 2
        bicgstab_alpha: <r~, v> == 0 -> -11      1
        guarded axpy: x += alpha p^; s = r - alpha v     2
        dot(s, s); bicgstab_snorm: ||s|| < atol -> status 2     2 + 1
        jacobi: s^ = D^-1 s                      (1, preconditioned only)
        spmv: t = A s^; dot(t, s); dot(t, t)     1 + 2 + 2
        bicgstab_omega                           1
        guarded axpy: x += omega s^; r = s - omega t     2
        nrm2(r) -> tau                           2
    23 launches (25 preconditioned) + 1 copy + 1 host wait.
"""
from __future__ import annotations

import numpy as np

from ..cuda import ops
from . import _gpu
from ._gpu import (ALPHA, BETA, BI_ALPHA, BI_BETA, OMEGA, PV, RHO, RHO_PREV, RR, RV, SIGMA, SS,
                   STATUS, TAU, TS, TT, ZETA, HostDrivenBackend)


class CudaBackend(HostDrivenBackend):
    name = "cuda"
    takes_operator_M = True

    # Each loop is written over the state's executor (dpsolve/cuda/executor.py): ex.spmv, ex.dot,
    # ex.axpy ... issue dpsolve's kernels on the state's stream; ex.record() captures an
    # iteration once, replayed each iteration with no Python wrapper running.

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        iteration = self.cg_iteration(st, x)

        def start():
            st.cg_setup(x)                                             # r, z, sigma, tau, p
            return st.read_tau(sync)

        def step():
            iteration.run(st.stream)
            return st.read_tau(sync)

        info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}

    @staticmethod
    def cg_iteration(st, x):
        """One CG iteration over the state's executor, recorded once as a Plan (replayed by
        the host loop above, or captured as the body of the distributed graph's WHILE)."""
        ex, A, s, dt = st.ex, st.A, st.s, st.dtype
        pre = st.preconditioned
        rr = RR if pre else ZETA
        with ex.record() as iteration:                                 # captured once, replayed
            ex.spmv(A, st.p, st.v)                                     # O1  v = A p
            ex.dot(st.p, st.v, s(PV))                                  # O2  <p, v>
            ex.scalar("cg", "cg_alpha", dt, s(SIGMA), s(PV), s(ALPHA), s(STATUS))
            ex.axpy(s(ALPHA), st.p, x)                                 # O3  x += alpha p
            ex.axpy(s(ALPHA), st.v, st.r, sign=-1.0)                   # O4  r -= alpha v
            if pre:
                st.psolve(st.r, st.z)                                  #     z = M r
            ex.dots(((st.r, st.r, s(RR)),) * pre                       # ||r||^2 with M, and
                    + ((st.r, st.z, s(ZETA)),))                        # O5  zeta = <r, z>
            ex.scalar("cg", "cg_beta", dt, s(ZETA), s(rr), s(SIGMA), s(BETA), s(TAU))  # O6 O7 O9
            ex.xpay(st.z, s(BETA), st.p)                               # O8  p = z + beta p
        return iteration

    def bicg(self, st, x, *, atol, maxiter, sync, callback):
        ex, A, AH, s, stream, dt = st.ex, st.A, st.AH, st.s, st.stream, st.dtype
        pre = st.preconditioned
        r, rt, p, pt, q, qt = st.r, st.vec("rt"), st.p, st.vec("pt"), st.v, st.vec("qt")
        z, zt = (st.z, st.vec("zt")) if pre else (r, rt)
        tol = st.breakdown_tol
        n = np.int32(st.confirm_n)                # the breakdown confirmation's length
        status = s(STATUS)

        def record(first):
            with ex.record() as plan:
                if pre:
                    st.psolve(r, z)                                        # z = M r
                    st.rpsolve(rt, zt)                                     # z~ = M^H r~
                ex.dot(rt, z, s(RHO))                                      # rho = <r~, z>
                ex.scalar("krylov", "bicg_beta", dt, np.int32(first), tol, n, rt, z, s(RHO),
                          s(RHO_PREV), s(BI_BETA), status, block=True)     # -10; beta
                ops.xpay_conj(z, s(BI_BETA), p, conj=False, stream=stream)  # p = z + beta p
                ops.xpay_conj(zt, s(BI_BETA), pt, stream=stream)           # p~ = z~ + conj(beta) p~
                ex.spmv(A, p, q)                                           # q = A p
                ex.spmv(AH, pt, qt)                                        # q~ = A^H p~
                ex.dot(pt, q, s(RV))                                       # <p~, q>
                ex.scalar("krylov", "bicg_alpha", dt, n, pt, q, s(RHO), s(RV), s(BI_ALPHA),
                          s(RHO_PREV), status, block=True)                 # -11; alpha
                ops.axpy_guarded(status, s(BI_ALPHA), p, x, stream=stream)  # x += alpha p
                # r -= alpha q
                ops.axpy_guarded(status, s(BI_ALPHA), q, r, sign=-1.0, stream=stream)
                ops.axpy_guarded(status, s(BI_ALPHA), qt, rt, sign=-1.0, conj=True,
                                 stream=stream)                            # r~ -= conj(alpha) q~
                ex.nrm2(r, s(TAU))                                         # tau = ||r||
            return plan

        return self._krylov_loop(st, x, record, (p, pt), atol, maxiter, sync, callback)

    def bicgstab(self, st, x, *, atol, maxiter, sync, callback):
        ex, A, s, stream, dt = st.ex, st.A, st.s, st.stream, st.dtype
        pre = st.preconditioned
        r, rt, p, v, t = st.r, st.vec("rt"), st.p, st.v, st.vec("t")
        phat, shat = (st.vec("phat"), st.vec("shat")) if pre else (p, r)   # s lives in r
        tol = st.breakdown_tol
        n = np.int32(st.confirm_n)                # the breakdown confirmation's length
        status = s(STATUS)

        def record(first):
            with ex.record() as plan:
                ex.dot(rt, r, s(RHO))                                      # rho = <r~, r>
                ex.scalar("krylov", "bicgstab_beta", dt, np.int32(first), tol, n, rt, r,
                          s(RHO), s(RHO_PREV), s(BI_ALPHA), s(OMEGA), s(BI_BETA), status,
                          block=True)                                      # -10, -11; beta
                ops.bicgstab_p(r, s(BI_BETA), s(OMEGA), v, p, stream)  # p = r + beta (p - omega v)
                if pre:
                    st.psolve(p, phat)                                     # p^ = M p
                ex.spmv(A, phat, v)                                        # v = A p^
                ex.dot(rt, v, s(RV))                                       # <r~, v>
                ex.scalar("krylov", "bicgstab_alpha", dt, n, rt, v, s(RHO), s(RV), s(BI_ALPHA),
                          status, block=True)                              # -11; alpha
                ops.axpy_guarded(status, s(BI_ALPHA), phat, x, stream=stream)  # x += alpha p^
                # s = r - alpha v
                ops.axpy_guarded(status, s(BI_ALPHA), v, r, sign=-1.0, stream=stream)
                ex.dot(r, r, s(SS))                                        # <s, s>
                ex.scalar("krylov", "bicgstab_snorm", dt, s(SS), np.float64(atol),
                          status)                                          # ||s|| < atol: status 2
                if pre:
                    st.psolve(r, shat)                                     # s^ = M s
                ex.spmv(A, shat, t)                                        # t = A s^
                ex.dot(t, r, s(TS))                                        # <t, s>
                ex.dot(t, t, s(TT))                                        # <t, t>
                ex.scalar("krylov", "bicgstab_omega", dt, tol, n, t, r, s(TS), s(TT), s(RHO),
                          s(OMEGA), s(RHO_PREV), status, block=True)       # omega; rho_prev = rho
                ops.axpy_guarded(status, s(OMEGA), shat, x, stream=stream)  # x += omega s^
                # r = s - omega t
                ops.axpy_guarded(status, s(OMEGA), t, r, sign=-1.0, stream=stream)
                ex.nrm2(r, s(TAU))                                         # tau = ||r||
            return plan

        return self._krylov_loop(st, x, record, (p, v), atol, maxiter, sync, callback)

    @staticmethod
    def _krylov_loop(st, x, record, zero, atol, maxiter, sync, callback):
        """Record the first iteration and the others once each, replay them under host_loop
        (the set-up zeroes the vectors ``zero``: the first step's beta-update reads them)."""
        first, rest = record(True), record(False)
        done = [0]

        def start():
            st.krylov_setup(x, zero=zero)                      # r = b - A x, r~ = r, tau = ||r||
            return st.read_tau(sync)

        def step():
            (rest if done[0] else first).run(st.stream)
            done[0] += 1
            return st.read_tau(sync)

        info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}
