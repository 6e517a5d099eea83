"""The single-reduction CG on the GPU: the host-driven loop over an executor, with the fused
kernels of ``dpsolve/cuda/cg1.cu`` (its header says what each computes and moves).

Written over the state's executor (``dpsolve/cuda/executor.py``) as the ``cuda`` variant's loops
are, so that the distributed ``cuda`` variant (``dpsolve/distributed/gpu.py``, ``run_cuda`` with
``job.single_reduction``) runs it with its ``DistributedExecutor``: the SpMV is the halo
exchange around the local product, and ``ex.allreduce_slots`` sums the three adjacent scalar
slots gamma', delta, <r, r> over the ranks in ONE all-reduce (on one GPU, a no-op). Per
iteration, one recorded plan replayed:

    cg1_update       status = pending, or: p = u + beta p; s = w + beta s; x += alpha p;
                     r -= alpha s; u = D^-1 r; partials of <r, u> (and <r, r>)    1 launch
    ex.spmv(A, u, w)                                                             1 (+ the halo's)
    dot_partial(u, w)                                                            1
    cg1_finish       the three local sums into the slots CG1_GAMMA .. CG1_RR     1
    ex.allreduce_slots(those three)                      ONE all-reduce (distributed), no launch
    cg1_step         tau, beta, alpha, gamma; pending = -10 on a bad alpha/beta  1
    read (tau, status): 1 copy + 1 host wait (host_loop)

5 launches per iteration. The set-up (r = b - A x, u = M r, w = A u, the three partials, the
finish, ONE all-reduce, p = s = 0, cg1_start) makes one all-reduce too, so a distributed solve
of k iterations makes k + 1 all-reduces here; ``dpsolve.distributed`` adds one for ||b||
before and one for the true residual after (k + 3 in all, and 2 more per restart).

Vectors: the state's r, p, v (w = A u) and z (u = M r, preconditioned; u is r without), and a
named vector ``s`` (= A p by its recurrence). Scalar slots: SIGMA holds gamma = <r, u>, ALPHA,
BETA, TAU, STATUS as CG's, PENDING the -10 that the next iteration raises (a zero or non-finite
denominator of alpha, found after the reduction but tested, as the reference tests it, after the
host's tau test), CG1_GAMMA .. CG1_RR the reduced inner products.

Preconditioners: none or a pointwise one (Jacobi: fused into cg1_update); any other is refused (the
distributed ``cuda`` variant takes no other).
"""
from __future__ import annotations

import numpy as np

from ...backends import _gpu
from ...backends._gpu import ALPHA, BETA, PENDING, SIGMA, STATUS, TAU
from ...cuda import abi, ops
from ...cuda._loader import get_kernel
from ...cuda.executor import launch

RED = abi.DPS_SLOT_CG1_GAMMA      # gamma' = <r, u>, delta = <u, A u>, <r, r>: adjacent slots
N_RED = 3
_NULL = np.uint64(0)              # a null device pointer, passed by value


def cg1_cuda(backend, st, x, *, atol, maxiter, sync, callback):
    """Run the single-reduction CG from ``x`` on the prepared state ``st`` (the calling
    convention of the method table's GPU implementations); returns (info, iterations, {})."""
    if st.general:
        raise ValueError(f"the single-reduction CG's GPU loop takes M=None or a pointwise "
                         f"preconditioner ('jacobi', a diagonal: fused into its update kernel), "
                         f"not M={st.precond.kind!r}")
    ex, A, s, dt, stream, n = st.ex, st.A, st.s, st.dtype, st.stream, st.n
    pre = st.fused
    r, p, w = st.r, st.p, st.v
    u = st.z if pre else r
    sv = st.vec("s")                                  # s = A p, by its recurrence
    part_ru, part_rr, part_uw = st.partial_sets(3)
    red = st.scal[RED:RED + N_RED]
    scalars = (s(SIGMA), s(ALPHA), s(BETA), s(TAU))

    def finish(n_ru, n_uw):
        """The three local sums into the adjacent slots, then ONE all-reduce of them."""
        launch(get_kernel("cg1", "cg1_finish<{T}>", dt), (1,), (ops.BLOCK,),
               (np.int32(n_ru), part_ru, part_rr if pre else _NULL, np.int32(n_uw), part_uw,
                red), stream)
        ex.allreduce_slots(red)

    def start():
        st.residual(x)                                            # r = b - A x (w = v)
        if pre:
            st.psolve(r, u)                                       # u = D^-1 r
        ex.spmv(A, u, w)                                          # w = A u
        n_ru = ops.dot_partial(r, u, part_ru, stream)             # partials of <r, u>
        if pre:
            ops.dot_partial(r, r, part_rr, stream)                #             <r, r>
        n_uw = ops.dot_partial(u, w, part_uw, stream)             #             <u, w>
        finish(n_ru, n_uw)                                        # 1 all-reduce
        ex.fill(p, 0)                                             # p = s = 0, beta = 0: the
        ex.fill(sv, 0)                                            # first update makes p = u, s = w
        ex.scalar("cg1", "cg1_start", dt, red, *scalars, s(STATUS), s(PENDING))
        return st.read_tau(sync)

    nparts = ops.merge_parts(n)
    with ex.record() as iteration:                                # captured once, replayed
        launch(get_kernel("cg1", "cg1_update<{T}>", dt), (nparts,), (ops.BLOCK,),
               (np.int32(n), np.int32(pre), s(PENDING), s(STATUS), s(ALPHA), s(BETA),
                st.pc_args, u if pre else _NULL, w, p, sv, x, r,
                part_ru, part_rr if pre else _NULL), stream)      # p, s, x, r, u; <r, u>, <r, r>
        ex.spmv(A, u, w)                                          # w = A u
        n_uw = ops.dot_partial(u, w, part_uw, stream)             # partials of <u, w>
        finish(nparts, n_uw)                                      # 1 all-reduce
        ex.scalar("cg1", "cg1_step", dt, red, *scalars, s(STATUS), s(PENDING))

    def step():
        iteration.run(stream)
        return st.read_tau(sync)

    info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
    return info, its, {}
