"""Conjugate Gradient, in the operation order of the paper's Figure 1 (steps O1..O9).

With a preconditioner ``psolve`` (z = M r) the recurrence scalar is sigma = <r, z>; the convergence
test always uses the unpreconditioned ||r||, as SciPy does.

dpsolve extension: when a step produces a non-finite scalar (p^T A p == 0, or overflow: the matrix
is not positive definite) the solver stops with info = -10 instead of iterating on NaNs until
maxiter, as SciPy would.

``space`` (optional): where the vectors' inner products, norms and the test ``x.any()`` are
reduced -- an object with ``dot``, ``norm``, ``dot_accurate`` and ``any`` (``_util.LocalSpace``,
the default: NumPy in this process; ``dpsolve.distributed`` passes one that all-reduces over the
ranks of a row-partitioned system, so this very solver runs distributed).
"""
import numpy as np

from ._util import LocalSpace, dotprod


def cg(matvec, b, x, *, atol, maxiter, psolve=None, callback=None, space=None):
    space = LocalSpace(dotprod(x)) if space is None else space
    dot, norm = space.dot, space.norm
    r = b - matvec(x) if space.any(x) else b.copy()    # r_0 = b - A x_0
    z = psolve(r) if psolve is not None else r           # z_0 = M r_0
    sigma = dot(r, z)                                    # sigma_0 = <r_0, z_0>
    tau = norm(r)                                        # tau_0 = ||r_0||
    p = z.copy()                                         # p_0 = z_0
    for j in range(maxiter):
        if tau < atol:
            return x, 0, j
        v = matvec(p)                                    # O1  SPMV    v = A p
        alpha = sigma / dot(p, v)                        # O2  DOT     alpha = sigma / <p, v>
        if not np.isfinite(alpha):
            return x, -10, j
        x += alpha * p                                   # O3  AXPY    x = x + alpha p
        r -= alpha * v                                   # O4  AXPY    r = r - alpha v
        z = psolve(r) if psolve is not None else r       #     (Jacobi: z = D^-1 r)
        zeta = dot(r, z)                                 # O5  DOT     zeta = <r, z>
        beta = zeta / sigma                              # O6  scalar  beta = zeta / sigma
        sigma = zeta                                     # O7  scalar  sigma = zeta
        p = z + beta * p                                 # O8  XPAY    p = z + beta p
        tau = (float(np.sqrt(abs(zeta))) if psolve is None   # O9  tau = ||r|| = sqrt(zeta)
               else norm(r))
        if callback is not None:
            callback(x)
        if not np.isfinite(tau):
            return x, -10, j + 1
    return x, maxiter, maxiter
