"""Batched CG and BiCGStab on the host, vectorised over the batch: the specification of
``dpsolve.batch`` (issue 31) and what runs where no GPU kernel does yet.

Every system i of the batch runs the algorithm of ``dpsolve/reference/cg.py`` /
``bicgstab.py`` (SciPy's, with dpsolve's non-finite stop), with its own tolerance, its own
iteration count and its own info code; the arithmetic is done for the whole batch at once
(arrays of shape (nb, n)), and a system that has stopped is frozen: its x, r and scalars no
longer change. Inner products sum along each row (``_dot``): the order of the sums differs from
``np.vdot`` of one system, so a system's iterates match its single solve to rounding, not bit for
bit.

The matrix is ``values`` (nb, nnz) over one CSR pattern (indptr, indices). ``psolve`` is None or
the per-system inverse diagonal (nb, n) (Jacobi).
"""
from __future__ import annotations

import numpy as np

from ..reference._util import breakdown_tol, dot_accurate


def matvec(values, indptr, indices, X):
    """Y[i] = A_i X[i] for every system: products gathered per nonzero, summed per row."""
    nb, n = X.shape
    prod = values * X[:, indices]
    out = np.zeros((nb, n), dtype=np.result_type(values, X))
    rows = np.flatnonzero(np.diff(indptr))               # rows with at least one entry
    if rows.size:
        out[:, rows] = np.add.reduceat(prod, indptr[rows], axis=1)
    return out


def _dot(A, B):
    """<A[i], B[i]> for every row, conjugate-linear in A (SciPy's inner product)."""
    return np.einsum("ij,ij->i", A.conj(), B) if np.iscomplexobj(A) else np.einsum(
        "ij,ij->i", A, B)


def _norm(A):
    return np.sqrt(np.abs(_dot(A, A)))


def _fin(*vals):
    ok = np.ones(np.shape(vals[0]), dtype=bool)
    for v in vals:
        ok &= np.isfinite(v)
    return ok


class _Stops:
    """Who is still iterating, and each system's info and iteration count once it stopped."""

    def __init__(self, nb, maxiter):
        self.active = np.ones(nb, dtype=bool)
        self.info = np.full(nb, maxiter, dtype=np.int64)
        self.its = np.full(nb, maxiter, dtype=np.int64)

    def stop(self, mask, info, its):
        mask = mask & self.active
        self.info[mask] = info
        self.its[mask] = its
        self.active &= ~mask
        return mask


def cg(values, indptr, indices, B, X, *, atol, maxiter, dinv=None):
    """Batched CG from X (updated in place); atol (nb,). Returns (X, info, iterations)."""
    nb = B.shape[0]
    st = _Stops(nb, maxiter)
    R = B - matvec(values, indptr, indices, X)
    Z = dinv * R if dinv is not None else R
    sigma = _dot(R, Z)
    tau = _norm(R)
    P = Z.copy()
    for j in range(maxiter):
        st.stop(tau < atol, 0, j)
        if not st.active.any():
            break
        a = st.active
        V = matvec(values, indptr, indices, P)
        with np.errstate(all="ignore"):
            alpha = sigma / _dot(P, V)
        st.stop(~_fin(alpha), -10, j)
        a = st.active
        al = np.where(a, alpha, 0)
        X += al[:, None] * P
        R -= al[:, None] * V
        Z = dinv * R if dinv is not None else R
        zeta = _dot(R, Z)
        with np.errstate(all="ignore"):
            beta = np.where(a, zeta / sigma, 0)
        sigma = np.where(a, zeta, sigma)
        P = np.where(a[:, None], Z + beta[:, None] * P, P)
        tau = np.where(a, np.sqrt(np.abs(zeta)) if dinv is None else _norm(R), tau)
        st.stop(~_fin(tau), -10, j + 1)
    return X, st.info, st.its


def bicgstab(values, indptr, indices, B, X, *, atol, maxiter, dinv=None):
    """Batched BiCGStab (right preconditioned, SciPy's codes: -10 rho breakdown or a non-finite
    scalar, -11 omega or <r~, v> breakdown) from X (updated in place)."""
    nb = B.shape[0]
    tol = breakdown_tol(B.dtype)
    st = _Stops(nb, maxiter)
    R = B - matvec(values, indptr, indices, X)
    Rt = R.copy()
    tau = _norm(R)
    P = np.zeros_like(R)
    V = np.zeros_like(R)
    rho_prev = np.ones(nb, dtype=R.dtype)
    omega = np.ones(nb, dtype=R.dtype)
    alpha = np.ones(nb, dtype=R.dtype)
    M = (lambda Y: dinv * Y) if dinv is not None else (lambda Y: Y)

    def confirmed(Aa, Bb, fails):
        d = _dot(Aa, Bb)
        for i in np.flatnonzero(fails(d) & st.active):     # rare: recompute accurately
            d[i] = dot_accurate(Aa[i], Bb[i])
        return d

    with np.errstate(all="ignore"):
        for j in range(maxiter):
            st.stop(tau < atol, 0, j)
            if not st.active.any():
                break
            rho = confirmed(Rt, R, lambda d: np.abs(d) < tol)
            st.stop((np.abs(rho) < tol) | ~_fin(rho), -10, j)
            if j > 0:
                st.stop(np.abs(omega) < tol, -11, j)
                beta = (rho / rho_prev) * (alpha / omega)
                st.stop(~_fin(beta), -10, j)
                a = st.active
                P = np.where(a[:, None], R + np.where(a, beta, 0)[:, None]
                             * (P - np.where(a, omega, 0)[:, None] * V), P)
            else:
                a = st.active
                P = np.where(a[:, None], R, P)
            Phat = M(P)
            V = np.where(a[:, None], matvec(values, indptr, indices, Phat), V)
            rv = confirmed(Rt, V, lambda d: d == 0)
            st.stop(rv == 0, -11, j)
            alpha_new = rho / rv
            st.stop(~_fin(rv, alpha_new), -10, j)
            a = st.active
            alpha = np.where(a, alpha_new, alpha)
            S = np.where(a[:, None], R - alpha[:, None] * V, R)
            snorm = _norm(S)
            done = st.stop(a & (snorm < atol), 0, j + 1)
            X += np.where(done, alpha, 0)[:, None] * Phat
            a = st.active
            Shat = M(S)
            T = matvec(values, indptr, indices, Shat)
            ts, tt = _dot(T, S), _dot(T, T)
            for i in np.flatnonzero(a & (np.abs(ts / tt) < tol)):
                ts[i] = dot_accurate(T[i], S[i])
            om = ts / tt
            X += np.where(a, alpha, 0)[:, None] * Phat
            st.stop(~_fin(snorm, ts, tt, om), -10, j)
            a = st.active
            omega = np.where(a, om, omega)
            X += np.where(a, omega, 0)[:, None] * Shat
            R = np.where(a[:, None], S - omega[:, None] * T, R)
            rho_prev = np.where(a, rho, rho_prev)
            tau = np.where(a, _norm(R), tau)
            st.stop(~_fin(tau), -10, j + 1)
    return X, st.info, st.its
