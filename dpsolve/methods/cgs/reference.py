"""Conjugate Gradient Squared (Sonneveld 1989; Saad, Iterative Methods for Sparse Linear Systems,
2nd ed., Alg. 7.6, whose step numbers the comments give), right preconditioned as in SciPy, with
SciPy's breakdown tests and codes:

* info = -10: rho = <r~, r> below eps**2, also when recomputed accurately (``dot_accurate``:
  dpsolve's departure from SciPy, which stops on the fast sum)
* info = -11: <r~, v> == 0, also when recomputed accurately

As SciPy's, the iteration recomputes the true residual r = b - A x after each update of x (one
SpMV more than the recurrence r -= alpha A u^, which drifts), so the ``||r|| < atol`` test at the
head of an iteration reads the true residual.

dpsolve extension (as BiCG's): a non-finite scalar also stops the solve with info = -10 instead
of iterating on NaNs until maxiter, as SciPy would. The tests, each before x is updated with the
scalar it guards:

* rho_j, then beta_j, non-finite: -10 at j (loop head, after the rho breakdown test)
* <r~, v> or alpha non-finite: -10 at j (after the -11 test), x untouched
* tau = ||r_{j+1}|| non-finite: -10 at j + 1 (end of iteration j, after the callback)
"""
from ...reference._util import (LocalSpace, all_finite, breakdown_tol, confirmed_dot, dotprod,
                                norm)


def cgs(matvec, b, x, *, atol, maxiter, psolve=None, callback=None):
    space = LocalSpace(dotprod(x))                      # NumPy's reductions (as the others')
    rhotol = breakdown_tol(x.dtype)
    psolve = psolve or (lambda v: v)
    r = b - matvec(x) if x.any() else b.copy()          # 1. r_0 = b - A x_0; r~ = r_0
    rt = r.copy()
    rho_prev = p = u = q = None
    tau = norm(r)
    for j in range(maxiter):
        if tau < atol:
            return x, 0, j
        rho = confirmed_dot(space, rt, r, lambda d: abs(d) < rhotol)  # rho_j = <r~, r_j>
        if abs(rho) < rhotol:                            #    (confirmed with the accurate
            return x, -10, j                             #    sum before it is a breakdown)
        if not all_finite(rho):                          #    dpsolve: non-finite -> -10
            return x, -10, j
        if j > 0:
            beta = rho / rho_prev                        # 8. beta = rho_j / rho_{j-1}
            if not all_finite(beta):
                return x, -10, j
            u = r + beta * q                             # 9. u = r + beta q
            p = (p * beta + q) * beta + u                # 10. p = u + beta (q + beta p), in
                                                         #    SciPy's operand order (complex
                                                         #    products round by it)
        else:
            p = r.copy()                                 # 2. p_0 = u_0 = r_0
            u = r.copy()
        phat = psolve(p)                                 #    p^ = M p
        v = matvec(phat)                                 #    v = A p^
        rv = confirmed_dot(space, rt, v, lambda d: d == 0)
        if rv == 0:                                      #    (confirmed, as rho is)
            return x, -11, j
        alpha = rho / rv                                 # 4. alpha = rho / <r~, v>
        if not all_finite(rv, alpha):                    #    dpsolve: non-finite -> -10,
            return x, -10, j                             #    x untouched
        q = u - alpha * v                                # 5. q = u - alpha v
        uhat = psolve(u + q)                             #    u^ = M (u + q)
        x += alpha * uhat                                # 6. x = x + alpha u^
        r = b - matvec(x)                                # 7. r = b - A x (SciPy's: the true
        rho_prev = rho                                   #    residual, not r - alpha A u^)
        tau = norm(r)
        if callback is not None:
            callback(x)
        if not all_finite(tau):                          #    dpsolve: -10 at j + 1
            return x, -10, j + 1
    return x, maxiter, maxiter
