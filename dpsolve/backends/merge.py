"""variant="merge": the host drives the loop over the fused macro-kernels of the paper's Figure 2.

Per iteration (kernels in dpsolve/cuda/cg_merge.cu; scalars stay on the device):

    {O1-O2a}        v = A p and per-block partials of <p, v>   1 launch (CSR-scalar, ELL)
                                                               2 with CSR-vector: O1 and O2a
                                                               cannot be merged there (spmv,
                                                               then blas1's dot_partial)
    {O2b}           pv = sum of partials; alpha = sigma/pv     1  (non-finite: status = 1)
    {O3-O4-O5a}     x += alpha p; r -= alpha v;                1
                    (Jacobi: z = D^-1 r); partials of <r, z>
                    (and of <r, r> when preconditioned)
    {O5b-O6-O7-O9}  zeta, rr; beta = zeta/sigma;               1
                    sigma = zeta; tau = sqrt(|rr|)
    {O8}            p = z + beta p (blas1's xpay)              1
                    read tau and status to the host            1 copy + 1 host wait

5 launches per iteration (6 with CSR-vector), against 10 (14 preconditioned) for variant="cuda".
The set-up (r = b - A x, z, sigma, tau, p = z, status = 0) is the cuda variant's.

BiCG and BiCGStab (dpsolve/cuda/bicg_merge.cu, bicgstab_merge.cu; each file's header lists which
steps merge into which kernel, why the rest cannot, and the bytes each kernel moves):

    BiCG       {rho check, p, p~} {SpMV x2, DOT_ini} {DOT_fin, alpha} {x, r, r~, psolve, DOT_ini x2}
               {DOT_fin x2, tau, beta, rho check}
               5 launches per iteration (6 with CSR-vector), against 15 (17 preconditioned) for cuda
    BiCGStab   {checks, p, psolve} {SpMV, DOT_ini} {DOT_fin, alpha} {x, s, psolve, DOT_ini}
               {SpMV, DOT_ini x2} {DOT_fin x3, ||s|| test, omega} {x, r, DOT_ini x2}
               {DOT_fin x2, tau, beta, checks}
               8 launches per iteration (10 with CSR-vector), against 23 (25) for cuda

plus one copy of (tau, status) and one host wait. The set-up is the cuda variant's (r = b - A x,
r~ = r) and the first partials, finished by the same fused one-block kernel as every iteration.
Breakdowns and non-finite scalars (-10 where the reference stops: rho and beta through the pending
slot, <p~, q> / <r~, v> and alpha in {DOT_fin, alpha}, BiCGStab's ||s||, <t, s>, <t, t> and omega in
its omega kernel; a non-finite tau in host_loop) set the status slot and the kernels after them are
no-ops.

A preconditioner that is not pointwise (a user's M, called every iteration, or one of kernels:
dpsolve/precond) cannot be fused: the kernels that apply Jacobi run without it, its stream face
runs after them, and one extra kernel forms the DOT partials that involve z (BiCG: <r~, z>);
BiCGStab needs no extra DOT kernel. CG with such an M starts its iteration with z = M r, so that
the test on ||r|| comes before the next M (``_cg_program_general``): M once an iteration, where
the order above applies it once more in the set-up (an AMG V-cycle a solve).
An operator A likewise splits the SpMV + DOT kernels, as CSR-vector does.
"""
from __future__ import annotations

from ..cuda import ops
from . import _gpu
from ._gpu import (ALPHA, BETA, BI_ALPHA, BI_BETA, OMEGA, ONE, PENDING, PV, RHO, RR, RV, SIGMA,
                   STATUS, TAU, ZETA, HostDrivenBackend)


class MergeBackend(HostDrivenBackend):
    name = "merge"
    takes_operator_M = True          # a general M splits the kernels that fuse Jacobi (below)

    # Each method is a program: ``setup()`` issues the set-up and ``iteration`` is one recorded
    # iteration; both leave (tau, status) in their slots. The host loop here reads them after
    # each; variant "graph" captures the same program into a conditional-WHILE graph.
    def cg_program(self, st, x):
        if st.general:
            return self._cg_program_general(st, x)
        A, s, stream = st.A, st.s, st.stream
        pre = st.fused                        # Jacobi inside the fused kernels
        parts = st.partials

        def setup():
            st.cg_setup(x)                                             # r, z, sigma, tau, p

        # the slots the fused kernels write; zeta and rr are distinct slots (rr = zeta
        # unpreconditioned)
        sigma, pv, alpha, zeta, rrs, beta, tau, status = (s(SIGMA), s(PV), s(ALPHA), s(ZETA), s(RR),
                                                          s(BETA), s(TAU), s(STATUS))
        z = st.z if pre else None

        with st.ex.record() as iteration:                                   # captured once
            nparts = ops.merge_spmv_dot(A, st.p, st.v, parts, stream)             # {O1-O2a}
            ops.merge_alpha(nparts, parts, sigma, pv, alpha, status, stream)      # {O2b}
            nparts = ops.merge_update(alpha, st.p, st.v, x, st.r, st.pc_args, z,  # {O3-O4-O5a}
                                      parts, stream)
            ops.merge_beta(nparts, parts, pre, sigma, zeta, rrs, beta, tau,
                           stream)                                                # {O5b-O6-O7-O9}
            ops.xpay(st.z, beta, st.p, stream)                                    # {O8}
        return setup, iteration

    @staticmethod
    def _cg_program_general(st, x):
        """CG with a preconditioner of kernels (AMG, Chebyshev) or a user's M: the iteration
        starts with z = M r, so the test on ||r|| at its end comes before the next M and the
        solve applies M once an iteration (the order above applies it once more, in the
        set-up, and its last one is never used: a V-cycle a solve). Per iteration:

            z = M r; partials of <r, z>     M's stream face, then blas1's dot_partial
            beta = zeta / sigma; sigma = zeta   cg_merge_beta (its tau is rewritten below)
            p = z + beta p                  xpay (p = 0 and sigma = 1 from the set-up: p = z)
            v = A p, alpha, x and r         {O1-O2a}, {O2b}, {O3-O4-O5a} with partials of <r, r>
            tau = ||r||                     krylov's nrm2_final

        The same iterates as the order above, one launch more an iteration and M once fewer a
        solve."""
        A, s, stream, ex = st.A, st.s, st.stream, st.ex
        sigma, pv, alpha, zeta, rrs, beta, tau, status = (s(SIGMA), s(PV), s(ALPHA), s(ZETA), s(RR),
                                                          s(BETA), s(TAU), s(STATUS))
        parts = st.partials

        def setup():                              # r = b - A x, tau = ||r||, status = 0
            st.residual(x)
            ex.dots(((st.r, st.r, rrs),))
            # cg_start's sigma = the ONE slot: the first beta (zeta / 1) multiplies p = 0
            ex.scalar("cg", "cg_start", st.dtype, s(ONE), rrs, sigma, tau, status)
            ex.fill(st.p, 0)

        with ex.record() as iteration:                                      # captured once
            st.psolve(st.r, st.z)
            nparts = ops.dot_partial(st.r, st.z, parts, stream)
            ops.merge_beta(nparts, parts, False, sigma, zeta, rrs, beta, tau, stream)
            ops.xpay(st.z, beta, st.p, stream)
            nparts = ops.merge_spmv_dot(A, st.p, st.v, parts, stream)
            ops.merge_alpha(nparts, parts, sigma, pv, alpha, status, stream)
            nparts = ops.merge_update(alpha, st.p, st.v, x, st.r, st.pc_args, None, parts,
                                      stream)
            ops.nrm2_final(nparts, parts, tau, stream)
        return setup, iteration

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        setup, iteration = self.cg_program(st, x)
        start, step = self._host_steps(st, setup, iteration, atol, sync)
        info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}

    @staticmethod
    def _host_steps(st, setup, iteration, atol, sync):
        """host_loop's start() and step(): issue, then read (tau, status) back (one wait)."""
        def start():
            st.params[0:1].fill(atol)          # the kernels' device-side tolerance (BiCGStab)
            setup()
            return st.read_tau(sync)

        def step():
            iteration.run(st.stream)
            return st.read_tau(sync)
        return start, step

    def bicg_program(self, st, x):
        A, AH, s, stream = st.A, st.AH, st.s, st.stream
        pre, general = st.fused, st.general   # M in the fused kernels, or between them
        r, rt, p, pt, q, qt = st.r, st.vec("rt"), st.p, st.vec("pt"), st.v, st.vec("qt")
        z, zt = (st.z, st.vec("zt")) if pre or general else (r, rt)
        part_rv, part_rho, part_rr = st.partial_sets(3)
        tol = st.breakdown_tol
        rho, beta, alpha, rv = s(RHO), s(BI_BETA), s(BI_ALPHA), s(RV)
        tau, status, pending = s(TAU), s(STATUS), s(PENDING)

        def setup():
            st.krylov_setup(x, zero=(p, pt))                   # r = b - A x, r~ = r
            if pre or general:
                st.psolve(r, z)                                # z = M r
                st.rpsolve(rt, zt)                             # z~ = M^H r~
            nparts = ops.dot_partial(rt, z, part_rho, stream)  # partials of <r~, z>, <r, r>
            ops.dot_partial(r, r, part_rr, stream)
            ops.bicg_merge_rho(nparts, part_rho, part_rr, True, tol, rt, z, rho, beta, tau,
                               pending, status, stream)        # rho, tau, pending; beta = 0

        with st.ex.record() as iteration:                                   # captured once
            ops.bicg_merge_p(pending, status, beta, z, zt, p, pt, stream)  # {rho check, p, p~}
            nparts = ops.bicg_merge_spmv2_dot(A, AH, p, pt, q, qt, part_rv,  # {SpMV x2, DOT_ini}
                                              stream)
            ops.bicg_merge_alpha(nparts, part_rv, pt, q, rho, rv, alpha, status,  # {DOT_fin, alpha}
                                 stream)
            nparts = ops.bicg_merge_update(status, alpha, p, q, qt, x, r, rt,  # {x, r, r~, psolve,
                                           st.pc_args, z, zt, part_rho, part_rr,  #  DOT_ini x2}
                                           stream)
            if general:                     # z = M r, z~ = M^H r~, then partials of <r~, z>
                st.psolve(r, z)
                st.rpsolve(rt, zt)
                ops.merge_dot2_partial(rt, z, part_rho, part_rv, stream)
            ops.bicg_merge_rho(nparts, part_rho, part_rr, False, tol, rt, z, rho,  # {DOT_fin x2,
                               beta, tau, pending, status, stream)  # tau, beta, rho check}
        return setup, iteration

    def bicg(self, st, x, *, atol, maxiter, sync, callback):
        return self._krylov(self.bicg_program, st, x, atol, maxiter, sync, callback)

    def _krylov(self, program, st, x, atol, maxiter, sync, callback):
        start, step = self._host_steps(st, *program(st, x), atol, sync)
        info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}

    def bicgstab_program(self, st, x):
        A, s, stream = st.A, st.s, st.stream
        pre, general = st.fused, st.general   # M in the fused kernels, or between them
        r, rt, p, v, t = st.r, st.vec("rt"), st.p, st.v, st.vec("t")
        phat, shat = (st.vec("phat"), st.vec("shat")) if pre or general else (p, None)  # s in r
        part_rv, part_ss, part_ts, part_tt, part_rho, part_rr = st.partial_sets(6)
        tol = st.breakdown_tol
        rho, beta, alpha, rv, omega = s(RHO), s(BI_BETA), s(BI_ALPHA), s(RV), s(OMEGA)
        tau, status, pending = s(TAU), s(STATUS), s(PENDING)

        def setup():
            st.krylov_setup(x, zero=(p, v))                    # r = b - A x, r~ = r
            nparts = ops.dot_partial(rt, r, part_rho, stream)  # partials of <r~, r>, <r, r>
            ops.dot_partial(r, r, part_rr, stream)
            ops.bicgstab_merge_rho(nparts, part_rho, part_rr, True, tol, rt, r, rho, alpha, omega,
                                   beta, tau, pending, status, stream)  # rho, tau, pending

        with st.ex.record() as iteration:                                   # captured once
            ops.bicgstab_merge_p(pending, status, beta, omega, r, v, p, st.pc_args,  # {checks, p,
                                 phat, stream)                                      #  psolve}
            if general:
                st.psolve(p, phat)                                                  # p^ = M p
            n_v = ops.bicgstab_merge_spmv_dot(A, phat, v, rt, part_rv, stream)  # {SpMV, DOT_ini}
            ops.bicg_merge_alpha(n_v, part_rv, rt, v, rho, rv, alpha, status,  # {DOT_fin, alpha}
                                 stream)
            n_s = ops.bicgstab_merge_s(status, alpha, phat if general else p, v, x, r,  # {x, s,
                                       st.pc_args, phat, shat, part_ss, stream)  # psolve, DOT_ini}
            if general:
                st.psolve(r, shat)                                                  # s^ = M s
            n_t = ops.bicgstab_merge_spmv_dot2(A, shat if pre or general else r, t, r,  # {SpMV,
                                               part_ts, part_tt, stream)            #  DOT_ini x2}
            ops.bicgstab_merge_omega(n_s, part_ss, n_t, part_ts, part_tt, st.params,  # {DOT_fin x3,
                                     tol, t, r, omega, status, stream)              #  ||s||, omega}
            # {x, r, DOT_ini x2}
            n_r = ops.bicgstab_merge_r(status, omega, shat, t, x, r, rt, part_rho,
                                       part_rr, stream)
            ops.bicgstab_merge_rho(n_r, part_rho, part_rr, False, tol, rt, r, rho,  # {DOT_fin x2,
                                   alpha, omega, beta, tau, pending, status,        #  tau, beta,
                                   stream)                                          #  checks}
        return setup, iteration

    def bicgstab(self, st, x, *, atol, maxiter, sync, callback):
        return self._krylov(self.bicgstab_program, st, x, atol, maxiter, sync, callback)
