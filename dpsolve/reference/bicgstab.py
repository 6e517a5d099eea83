"""BiCGStab (Saad, Iterative Methods for Sparse Linear Systems, 2nd ed., Alg. 7.7), right
preconditioned as in SciPy, with SciPy's breakdown tests and codes:

* info = -10: rho = <r~, r> below eps**2, also when recomputed accurately (``dot_accurate``:
  dpsolve's departure from SciPy, which stops on the fast sum)
* info = -11: omega below eps**2, or <r~, v> == 0, also with <t, s> (<r~, v>) recomputed
  accurately

dpsolve extension (as CG's): a non-finite scalar also stops the solve with info = -10 instead of
iterating on NaNs until maxiter, as SciPy would. The tests, each before x is updated with the
scalar it guards:

* rho_j non-finite: -10 at j (loop head, after the rho breakdown test); beta_j non-finite: -10
  at j (after the omega breakdown test)
* <r~, v> or alpha non-finite: -10 at j (after the -11 test), x untouched
* ||s||, <t, s>, <t, t> or omega non-finite: -10 at j with x = x_j + alpha p^ (the half step the
  ||s|| < atol exit also returns; its residual is s), without the omega s^ update
* tau = ||r_{j+1}|| non-finite: -10 at j + 1 (end of iteration j, after the callback)

``space`` (optional): where the vectors' inner products, norms and the test ``x.any()`` are
reduced -- an object with ``dot``, ``norm``, ``dot_accurate`` and ``any`` (``_util.LocalSpace``,
the default: NumPy in this process; ``dpsolve.distributed`` passes one that all-reduces over the
ranks of a row-partitioned system, so this very solver runs distributed).
"""
from ._util import LocalSpace, all_finite, breakdown_tol, confirmed_dot, dotprod


def bicgstab(matvec, b, x, *, atol, maxiter, psolve=None, callback=None, space=None):
    space = LocalSpace(dotprod(x)) if space is None else space
    dot, norm, dot_accurate = space.dot, space.norm, space.dot_accurate
    tol = breakdown_tol(x.dtype)
    psolve = psolve or (lambda v: v)
    r = b - matvec(x) if space.any(x) else b.copy()    # 1. r_0 = b - A x_0; r~ = r_0
    rt = r.copy()
    rho_prev = omega = alpha = p = v = None
    tau = norm(r)
    for j in range(maxiter):
        if tau < atol:
            return x, 0, j
        rho = confirmed_dot(space, rt, r, lambda d: abs(d) < tol)  # rho_j = <r~, r_j>
        if abs(rho) < tol:                               #    (confirmed with the accurate
            return x, -10, j                             #    sum before it is a breakdown)
        if not all_finite(rho):                          #    dpsolve: non-finite -> -10
            return x, -10, j
        if j > 0:
            if abs(omega) < tol:
                return x, -11, j
            beta = (rho / rho_prev) * (alpha / omega)    # 6. beta = (rho_j/rho_{j-1}) (alpha/omega)
            if not all_finite(beta):
                return x, -10, j
            p = r + beta * (p - omega * v)               # 7. p = r + beta (p - omega v)
        else:
            p = r.copy()                                 # 2. p_0 = r_0
        phat = psolve(p)                                 #    p^ = M p
        v = matvec(phat)                                 #    v = A p^
        rv = confirmed_dot(space, rt, v, lambda d: d == 0)
        if rv == 0:                                      #    (confirmed, as rho is)
            return x, -11, j
        alpha = rho / rv                                 # 3. alpha = rho / <r~, v>
        if not all_finite(rv, alpha):                    #    dpsolve: non-finite -> -10,
            return x, -10, j                             #    x untouched
        s = r - alpha * v                                # 4. s = r - alpha v
        snorm = norm(s)
        if snorm < atol:
            x += alpha * phat
            return x, 0, j + 1
        shat = psolve(s)                                 #    s^ = M s
        t = matvec(shat)                                 #    t = A s^
        ts, tt = dot(t, s), dot(t, t)
        if abs(ts / tt) < tol:                           #    the next omega test, confirmed
            ts = dot_accurate(t, s)
        omega = ts / tt                                  # 5. omega = <t, s> / <t, t>
        x += alpha * phat                                #    x = x + alpha p^ + omega s^
        if not all_finite(snorm, ts, tt, omega):         #    dpsolve: non-finite -> -10, x
            return x, -10, j                             #    with the half step alpha p^ only
        x += omega * shat
        r = s - omega * t                                #    r = s - omega t
        rho_prev = rho
        tau = norm(r)
        if callback is not None:
            callback(x)
        if not all_finite(tau):                          #    dpsolve: -10 at j + 1
            return x, -10, j + 1
    return x, maxiter, maxiter
