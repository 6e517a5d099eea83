"""Single-reduction Conjugate Gradient (Chronopoulos & Gear 1989; PETSc's KSPCG with
``-ksp_cg_single_reduction``): the CG iterates, in an operation order whose inner products of an
iteration are all formed from the same vectors, so that they are reduced together.

Standard CG (``dpsolve/reference/cg.py``) needs ``<p, A p>`` before it can update r, and
``<r, z>`` of the updated r: two reductions per iteration (three preconditioned, with ||r||).
Chronopoulos & Gear carry s = A p by its own recurrence (s = w + beta s, with w = A u, u = M r)
and get ``<p, A p>`` from the inner products of the new residual:

    <p', A p'> = <u, A u> - beta^2 <p, A p>,  with <p, A p> = gamma / alpha (old), so
    alpha' = gamma' / (delta - beta gamma' / alpha),  delta = <u, w>, gamma' = <r', u>

so gamma', delta (and ||r||^2 when preconditioned) come from one ``space.dots`` call: one
all-reduce per iteration on a distributed space, where standard CG makes two or three. The
price is one vector more (s), one SpMV more at set-up, and a recurrence for A p that rounding
makes drift from the true A p: it could cost attainable accuracy or iterations on
ill-conditioned systems; on s3rmt3m3 (cond ~ 1e10, Jacobi, rtol 1e-8) it costs neither --
12,420 iterations against CG's 12,421, the true residual where the recurrence's is
(tests/test_cg1.py).

Semantics as ``reference/cg.py`` as far as the algebra allows: SciPy's stop test
``||r|| < atol`` on the recurrence residual at the head of each iteration (tau = sqrt(<r, r>),
sqrt(|<r, u>|) unpreconditioned, as CG's O9), the same info codes and iteration counting, the
callback after each iteration. dpsolve's non-finite stop: alpha' (or beta) non-finite -- a zero
or non-finite denominator, A not positive definite -- is -10 at the iteration that would use it,
after that iteration's tau test, with x untouched (where CG's O2 test stops); a non-finite tau
is -10 at the end of the iteration, after the callback. Only the set-up differs in count: it
makes one SpMV more (w_0 = A u_0) than CG's, before the first test.

``space``: where the reductions run (``_util.LocalSpace`` by default), with ``dots`` -- several
inner products in one reduction, each the bits ``dot`` would give -- besides ``dot``, ``norm``,
``dot_accurate`` and ``any``.
"""
import numpy as np

from ...reference._util import LocalSpace, all_finite, dotprod


# alpha and beta are computed before the tau test that may make them moot (CG computes its
# alpha after it): their 0/0 on an exactly zero residual is no warning; a non-finite value that
# is used is -10
def _quiet():
    return np.errstate(divide="ignore", invalid="ignore", over="ignore")


def _reduce(space, r, u, w, pre):
    """gamma = <r, u>, delta = <u, w> and tau = ||r|| from ONE reduction of the space."""
    if pre:
        gamma, delta, rr = space.dots([(r, u), (u, w), (r, r)])
    else:
        gamma, delta = space.dots([(r, u), (u, w)])           # u is r: <r, r> is gamma
        rr = gamma
    return gamma, delta, float(np.sqrt(abs(rr)))


def cg1(matvec, b, x, *, atol, maxiter, psolve=None, callback=None, space=None):
    space = LocalSpace(dotprod(x)) if space is None else space
    pre = psolve is not None
    r = b - matvec(x) if space.any(x) else b.copy()    # r_0 = b - A x_0
    u = psolve(r) if pre else r                          # u_0 = M r_0
    w = matvec(u)                                        # w_0 = A u_0
    gamma, delta, tau = _reduce(space, r, u, w, pre)    # [gamma, delta, ||r||^2]: 1 reduction
    with _quiet():
        alpha = gamma / delta                            # alpha_0 = <r, u> / <u, A u>
    ok = all_finite(alpha)
    p, s = u.copy(), w.copy()                            # p_0 = u_0, s_0 = w_0 (beta_{-1} = 0)
    for j in range(maxiter):
        if tau < atol:
            return x, 0, j
        if not ok:                                       # dpsolve: a non-finite alpha (or beta)
            return x, -10, j                             # -> -10 at j, x untouched (CG's O2)
        x += alpha * p                                   # x = x + alpha p
        r -= alpha * s                                   # r = r - alpha s        (s = A p)
        u = psolve(r) if pre else r                      # u = M r
        w = matvec(u)                                    # w = A u
        gamma_new, delta, tau = _reduce(space, r, u, w, pre)     # [gamma', delta, ||r||^2]
        if callback is not None:
            callback(x)
        if not np.isfinite(tau):
            return x, -10, j + 1
        with _quiet():
            beta = gamma_new / gamma                     # beta = gamma' / gamma
            alpha = gamma_new / (delta - beta * gamma_new / alpha)   # gamma' / <p', A p'>
        gamma = gamma_new
        ok = all_finite(beta, alpha)
        if ok:                                           # (else -10 at the next head: p, s unused)
            p = u + beta * p                             # p = u + beta p
            s = w + beta * s                             # s = w + beta s    (= A p)
    return x, maxiter, maxiter
