"""CGS on variant ``cublas``: the host drives ``reference.cgs`` line by line on the GPU.

dpsolve's SpMV (and Jacobi kernel, or the user's M) for the products, cuBLAS in host pointer mode
for the vector operations (the cublas variant's ``_Cublas`` wrappers, as its CG, BiCG and
BiCGStab use them): every DOT and NRM2 returns its scalar to the host, which waits for it, and
the scalars (rho, beta, alpha) are computed and tested there in the working dtype, where the
reference computes and tests them, before x takes the update they guard. A breakdown test that
fails on cuBLAS's inner product is confirmed with dpsolve's accurate one first
(``GpuState.confirm_dot``), as the reference confirms it with ``dot_accurate``.

Vectors: the state's r, p and v (= A p^, then A x), its rt, u and q (``gpu_vectors`` of the
method's descriptor, allocated when the system is prepared), and z, which holds p^ = M p and
then u^ = M (u + q) when preconditioned; u + q is formed in u (u is rebuilt from r and q at the
next iteration), so without a preconditioner p^ is p and u^ is u. Per iteration:

    rho = dot(r~, r) (wait); u = r + beta q (copy, axpy); p = u + beta (q + beta p) (scal, axpy,
    scal, axpy; copies in the first iteration); [psolve p^]; spmv v = A p^; dot(r~, v) (wait);
    q = u - alpha v (copy, axpy); u += q (axpy); [psolve u^]; x += alpha u^ (axpy);
    r = b - A x (copy, spmv, axpy); nrm2(r) (wait)
    3 host waits, 17 launches (19 preconditioned: two psolves)

NRM2 is cuBLAS's scaled one, which does not overflow where the reference's sqrt(<r, r>) does
(see dpsolve/backends/cublas.py): a ||r|| that stops the reference with -10 at the end of
iteration j usually stops this loop at the head of iteration j + 1 instead (rho overflows).
"""
from __future__ import annotations

import math

import numpy as np

from ...backends import _gpu
from ...backends.cublas import _Cublas, alpha_test, rho_test
from ...cuda import ops


def cgs_cublas(backend, st, x, *, atol, maxiter, sync, callback):
    A, stream, pre = st.A, st.stream, st.preconditioned
    r, rt, p, v, u, q = st.r, st.vec("rt"), st.p, st.v, st.vec("u"), st.vec("q")
    phat, uhat = (st.z, st.z) if pre else (p, u)
    tol = st.breakdown_tol
    state = {}
    with _Cublas(st.dtype, stream, sync, st.ex) as cb, np.errstate(all="ignore"):
        def residual():
            """r = b - A x (the true residual, as the reference recomputes it)."""
            cb.copy(st.b, r)
            ops.spmv(A, x, v, stream)
            cb.axpy(-1.0, v, r)

        def start():
            state.clear()
            residual()                                           # 1. r = b - A x
            cb.copy(r, rt)                                       #    r~ = r
            return float(cb.nrm2(r)), _gpu.OK                    #    ||r|| (wait)

        def step():
            rho, stop = rho_test(st, cb, rt, r, tol, sync)       # rho = <r~, r>
            if stop:
                return math.nan, stop                            # -10
            if not state:
                cb.copy(r, p)                                    # 2. p = u = r
                cb.copy(r, u)
            else:
                beta = rho / state["rho_prev"]                   # 8. beta
                if not np.isfinite(beta):
                    return math.nan, -10
                cb.copy(r, u)                                    # 9. u = r + beta q
                cb.axpy(beta, q, u)
                cb.scal(beta, p)                                 # 10. p = u + beta (q + beta p)
                cb.axpy(1.0, q, p)
                cb.scal(beta, p)
                cb.axpy(1.0, u, p)
            if pre:
                st.psolve(p, phat)                               # p^ = M p
            ops.spmv(A, phat, v, stream)                         # v = A p^
            alpha, stop = alpha_test(st, cb, rho, rt, v, sync)   # 4. alpha = rho / <r~, v>
            if stop:
                return math.nan, stop                            # -11 or -10, x untouched
            cb.copy(u, q)                                        # 5. q = u - alpha v
            cb.axpy(-alpha, v, q)
            cb.axpy(1.0, q, u)                                   #    u + q, in u
            if pre:
                st.psolve(u, uhat)                               #    u^ = M (u + q)
            cb.axpy(alpha, uhat, x)                              # 6. x += alpha u^
            residual()                                           # 7. r = b - A x
            state["rho_prev"] = rho
            return float(cb.nrm2(r)), _gpu.OK                    # ||r|| (wait)

        info, its = _gpu.host_loop(step, start, atol, maxiter, callback, x)
    return info, its, {}
