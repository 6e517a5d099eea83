"""BiConjugate Gradient (Saad, Iterative Methods for Sparse Linear Systems, 2nd ed., Alg. 7.3),
with SciPy's preconditioning, breakdown tests and codes:

* info = -10: rho = <r~, z> below eps**2 (rho breakdown), also when recomputed accurately
  (``dot_accurate``: dpsolve's departure from SciPy, which stops on the fast sum)
* info = -11: <p~, A p> == 0, also when recomputed accurately

dpsolve extension (as CG's): a non-finite scalar also stops the solve with info = -10 instead of
iterating on NaNs until maxiter, as SciPy would (float32 overflow on a diverging iteration, a
huge matrix). The tests, each before anything touches x, so x is the last finite iterate:

* rho_j, then beta_j, non-finite: -10 at j (loop head, after the rho breakdown test)
* <p~, A p> or alpha non-finite: -10 at j (after the -11 test), x untouched
* tau = ||r_{j+1}|| non-finite: -10 at j + 1 (end of iteration j, after the callback)

``space`` (optional): where the vectors' inner products, norms and the test ``x.any()`` are
reduced -- an object with ``dot``, ``norm``, ``dot_accurate`` and ``any`` (``_util.LocalSpace``,
the default: NumPy in this process; ``dpsolve.distributed`` passes one that all-reduces over the
ranks of a row-partitioned system, so this very solver runs distributed).
"""
import numpy as np

from ._util import LocalSpace, all_finite, breakdown_tol, confirmed_dot, dotprod


def bicg(matvec, b, x, *, atol, maxiter, rmatvec, psolve=None, rpsolve=None, callback=None,
         space=None):
    space = LocalSpace(dotprod(x)) if space is None else space
    norm = space.norm
    rhotol = breakdown_tol(x.dtype)
    ident = lambda v: v  # noqa: E731
    psolve = psolve or ident
    rpsolve = rpsolve or ident
    r = b - matvec(x) if space.any(x) else b.copy()    # 1. r_0 = b - A x_0, r~_0 = r_0
    rt = r.copy()
    rho_prev = p = pt = None
    tau = norm(r)
    for j in range(maxiter):
        if tau < atol:
            return x, 0, j
        z = psolve(r)
        zt = rpsolve(rt)
        rho = confirmed_dot(space, rt, z, lambda d: abs(d) < rhotol)  # rho_j = <r~_j, z_j>
        if abs(rho) < rhotol:                            #    (confirmed with the accurate
            return x, -10, j                             #    sum before it is a breakdown)
        if not all_finite(rho):                          #    dpsolve: non-finite -> -10
            return x, -10, j
        if j > 0:
            beta = rho / rho_prev                        # 6. beta_j = rho_{j+1} / rho_j
            if not all_finite(beta):
                return x, -10, j
            p = z + beta * p                             # 7. p = z + beta p
            pt = zt + np.conj(beta) * pt                 #    p~ = z~ + conj(beta) p~
        else:
            p = z.copy()                                 # 2. p_0 = z_0, p~_0 = z~_0
            pt = zt.copy()
        q = matvec(p)                                    #    q = A p
        qt = rmatvec(pt)                                 #    q~ = A^H p~
        rv = confirmed_dot(space, pt, q, lambda d: d == 0)  #    <p~, A p>
        if rv == 0:                                      #    (confirmed, as rho is)
            return x, -11, j
        alpha = rho / rv                                 # 3. alpha = rho / <p~, A p>
        if not all_finite(rv, alpha):                    #    dpsolve: non-finite -> -10,
            return x, -10, j                             #    x untouched
        x += alpha * p                                   # 4. x = x + alpha p
        r -= alpha * q                                   # 5. r = r - alpha A p
        rt -= np.conj(alpha) * qt                        #    r~ = r~ - conj(alpha) A^H p~
        rho_prev = rho
        tau = norm(r)
        if callback is not None:
            callback(x)
        if not all_finite(tau):                          #    dpsolve: -10 at j + 1
            return x, -10, j + 1
    return x, maxiter, maxiter
