"""Restarted GMRES on the host: the specification of ``dpsolve.gmres``.

Left-preconditioned (the inner iteration minimises ||M (b - A x)||), Arnoldi with modified
Gram-Schmidt, the Hessenberg matrix reduced by Givens rotations as it grows. Each restart cycle
ends with the true residual r = b - A x, which is what the convergence test ``||r|| <= atol``
reads (SciPy's). The inner iteration stops when the rotated right-hand side says the
preconditioned residual is below ``ptol``, a tolerance adapted per cycle as SciPy adapts it
(scipy/scipy gh-8400): starting from ||M b|| * min(1, atol / ||b||), tightened when a cycle met
it but the true residual did not, loosened otherwise.

    gmres(matvec, b, x, *, atol, maxiter, psolve=None, callback=None, restart=None,
          callback_type=None) -> (x, info, iterations)

``iterations`` and ``maxiter`` count restart cycles (inner iterations with ``callback_type=
"legacy"``). ``info``: 0 when the true residual meets ``atol``, else ``maxiter``. A "happy"
breakdown (the Krylov space invariant) whose true residual still misses ``atol`` restarts from
the new x, as long as each such cycle lowers the residual.
"""
from __future__ import annotations

import numpy as np

from ..._system import vector_norm as norm   # no under- or overflow of the squares
from ...reference._util import dotprod


def _rotation(f, g):
    """(c, s, r) with c real and [[c, s], [-conj(s), c]] @ [f, g] = [r, 0]."""
    if g == 0:
        return 1.0, 0.0 * g, f
    if f == 0:
        return 0.0, np.conj(g) / abs(g), abs(g) + 0 * g
    d = np.hypot(abs(f), abs(g))
    phase = f / abs(f)
    return abs(f) / d, phase * np.conj(g) / d, phase * d


def _triangularize(R, g, rot, k):
    """Rotate column k of the Hessenberg matrix R by the cycle's rotations ``rot``, add the one
    that zeroes R[k + 1, k], apply it to the right-hand side g; returns |g[k + 1]|, the norm of
    the (preconditioned) residual the least-squares solution would leave."""
    for i, (c, s) in enumerate(rot):             # the previous rotations on the new column
        R[i, k], R[i + 1, k] = (c * R[i, k] + s * R[i + 1, k],
                                -np.conj(s) * R[i, k] + c * R[i + 1, k])
    c, s, R[k, k] = _rotation(R[k, k], R[k + 1, k])
    R[k + 1, k] = 0
    rot.append((c, s))
    g[k], g[k + 1] = c * g[k], -np.conj(s) * g[k]
    return abs(g[k + 1])


def _upper_solve(R, g, k):
    """y with R[:k+1, :k+1] y = g[:k+1], R upper triangular; a zero pivot gives y_i = 0 (the
    least-squares problem is then singular in that direction)."""
    y = np.zeros(k + 1, dtype=R.dtype)
    for i in range(k, -1, -1):
        num = g[i] - R[i, i + 1:k + 1] @ y[i + 1:]
        y[i] = num / R[i, i] if R[i, i] != 0 else 0
    return y


def callback_kind(callback, callback_type):
    """SciPy's rule: no callback -> None; a callback without a type -> "legacy"."""
    if callback is None:
        return None
    return "legacy" if callback_type is None else callback_type


def run_cycles(space, *, atol, maxiter, restart, callback, callback_type):
    """Restarted GMRES over ``space``, the one statement of the method's control: the cycles,
    the inner tolerance, breakdown, callbacks and exits. ``space`` does the linear algebra on
    its own vectors (``HostSpace`` here; the cublas variant's in gpu.py):

        n, dtype, b_norm           the system's size, working dtype and ||b||
        precondition_b_norm()      ||M b||
        residual() -> ||r||        r = b - A x (the true residual)
        start() -> beta            v_0 = M r / beta, beta = ||M r||
        expand(k, R) -> (h0, h)    w = M A v_k orthogonalised on v_0..v_k, R[:k+1, k] its
                                   projections; h0 = ||M A v_k||, h = ||w||
        extend(k, h)               v_{k+1} = w / h
        update(y, k)               x += y @ V[:k+1]
        x                          the iterate (what a callback of type "x" gets)

    Returns (info, iterations): iterations count cycles (inner iterations for "legacy")."""
    dt = space.dtype
    eps = np.finfo(dt).eps
    m = min(restart or 20, space.n)
    callback_type = callback_kind(callback, callback_type)
    legacy = callback_type == "legacy"
    bnrm2 = space.b_norm
    factor = 1.0
    ptol = space.precondition_b_norm() * min(factor, atol / bnrm2)
    R = np.zeros((m + 1, m), dtype=dt)           # the Hessenberg matrix, rotated to triangular
    rot = []                                     # the Givens rotations (c, s) of this cycle
    inner = 0
    last = space.residual()
    if last < atol:
        return 0, 0
    for cycle in range(maxiter):
        g = np.zeros(m + 1, dtype=dt)            # the rotated right-hand side beta e_1
        g[0] = space.start()
        R[:] = 0
        rot.clear()
        breakdown = False
        presid = 0.0
        for k in range(m):
            h0, h = space.expand(k, R)
            if h <= eps * h0:                    # w in the span: the Krylov space is invariant
                R[k + 1, k] = 0
                breakdown = True
            else:
                R[k + 1, k] = h
                space.extend(k, h)
            presid = _triangularize(R, g, rot, k)
            inner += 1
            if callback_type in ("legacy", "pr_norm"):
                callback(presid / bnrm2)
            if (legacy and inner == maxiter) or presid <= ptol or breakdown:
                break
        space.update(_upper_solve(R, g, k), k)
        rnorm = space.residual()
        if legacy and inner == maxiter:
            return (0 if rnorm <= atol else maxiter), inner
        if callback_type == "x":
            callback(space.x)
        if rnorm <= atol:
            return 0, inner if legacy else cycle + 1
        # a breakdown exhausted the Krylov space of the old residual (x solves a rounded problem
        # exactly): restart from the new residual while cycles remain and that makes progress
        if breakdown and rnorm >= last:
            break
        last = rnorm
        factor = max(eps, 0.25 * factor) if presid <= ptol else min(1.0, 1.5 * factor)
        ptol = presid * min(factor, atol / rnorm)
    return maxiter, inner if legacy else cycle + 1


class HostSpace:
    """The reference's linear algebra: NumPy vectors, modified Gram-Schmidt."""

    def __init__(self, matvec, psolve, b, x, m):
        self.matvec, self.psolve, self.b, self.x = matvec, psolve, b, x
        self.n, self.dtype = b.shape[0], x.dtype
        self.dot = dotprod(x)
        self.b_norm = norm(b)
        self.V = np.empty((min(m or 20, self.n) + 1, self.n), dtype=x.dtype)   # one v per row
        self.r = self.w = None

    def precondition_b_norm(self):
        return norm(self.psolve(self.b))

    def residual(self):
        x = self.x
        self.r = (self.b - self.matvec(x) if self.r is not None or x.any()   # x0 = 0: r = b
                  else self.b.copy())
        return norm(self.r)

    def start(self):
        w = self.psolve(self.r)
        beta = norm(w)
        self.V[0] = w / beta
        return beta

    def expand(self, k, R):
        V = self.V
        w = self.psolve(self.matvec(V[k]))
        h0 = norm(w)
        for i in range(k + 1):                   # modified Gram-Schmidt
            R[i, k] = self.dot(V[i], w)
            w = w - R[i, k] * V[i]
        self.w = w
        return h0, norm(w)

    def extend(self, k, h):
        self.V[k + 1] = self.w / h

    def update(self, y, k):
        self.x += y @ self.V[:k + 1]


def gmres(matvec, b, x, *, atol, maxiter, psolve=None, callback=None, restart=None,
          callback_type=None):
    space = HostSpace(matvec, psolve or (lambda v: v), b, x, restart)
    info, its = run_cycles(space, atol=atol, maxiter=maxiter, restart=restart, callback=callback,
                           callback_type=callback_type)
    return x, info, its
