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
"""
from __future__ import annotations

from ..cuda import ops
from . import _gpu
from ._gpu import ALPHA, BETA, PV, RR, SIGMA, STATUS, TAU, ZETA, GpuBackend


class MergeBackend(GpuBackend):
    name = "merge"

    def cg(self, st, x, *, atol, maxiter, sync, callback):
        A, s, stream = st.A, st.s, st.stream
        pre = st.inv_diag is not None
        parts = st.partials

        def start():
            st.cg_setup(x)                                             # r, z, sigma, tau, p
            return st.read_tau(sync)

        # the slots the fused kernels write; zeta and rr are distinct slots (rr = zeta unpreconditioned)
        sigma, pv, alpha, zeta, rrs, beta, tau, status = (s(SIGMA), s(PV), s(ALPHA), s(ZETA), s(RR),
                                                          s(BETA), s(TAU), s(STATUS))
        inv_diag = st.inv_diag
        z = st.z if pre else None

        with ops.record() as iteration:                                           # captured once
            nparts = ops.merge_spmv_dot(A, st.p, st.v, parts, stream)             # {O1-O2a}
            ops.merge_alpha(nparts, parts, sigma, pv, alpha, status, stream)      # {O2b}
            nparts = ops.merge_update(alpha, st.p, st.v, x, st.r, inv_diag, z,    # {O3-O4-O5a}
                                      parts, stream)
            ops.merge_beta(nparts, parts, pre, sigma, zeta, rrs, beta, tau,       # {O5b-O6-O7-O9}
                           stream)
            ops.xpay(st.z, beta, st.p, stream)                                    # {O8}

        def step():
            iteration.run(stream)
            return st.read_tau(sync)

        info, its = _gpu.host_cg_loop(step, start, atol, maxiter, callback, x)
        return info, its, {}
