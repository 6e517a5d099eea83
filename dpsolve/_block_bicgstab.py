"""BiCGStab on k right-hand sides at once, A read twice an iteration for all of them (issue 31).

The fused block of ``_block_fused`` (its driver ``run`` and ``solve``, its layout: X, R, ... row-
interleaved, a group of G lanes a row, a lane a column) for BiCGStab: SciPy's algorithm per column
(``dpsolve.reference.bicgstab``), M = D^-1 (Jacobi) or none, each column to its own tolerance:

    r = b - A x0, r~ = r; converged at once when ||r|| <= tol; rho = <r~, r>
    each iteration:  p = r (the first), else p = r + beta (p - omega v)
                     v = A M p; alpha = rho / <r~, v>
                     s = r - alpha v; ||s|| <= tol: x += alpha M p, converged (the half step)
                     t = A M s; omega = <t, s> / <t, t>
                     x += alpha M p, then x += omega M s; r = s - omega t
                     converged when ||r|| <= tol; rho' = <r~, r>; beta = (rho'/rho) (alpha/omega)

A column breaks down where SciPy's would (|rho| or |omega| below eps^2, <r~, v> = 0) or where a
value stops being finite; ``solve`` hands it to the single solve, which confirms the breakdown with
its accurate sum and reports SciPy's code. ``HostBlockBiCGStab`` is the specification in NumPy (the
GPU tests compare ``DeviceBlockBiCGStab``, block.cu's ``bs_*`` kernels, with it).
"""
from __future__ import annotations

import numpy as np

from ._block_fused import ACTIVE, BROKE, CONVERGED, MAXITER, DeviceBlock, HostBlock


def breakdown_tol(dtype) -> float:
    """SciPy's rhotol / omegatol: eps^2 of the working precision."""
    return float(np.finfo(np.dtype(dtype)).eps) ** 2


class HostBlockBiCGStab(HostBlock):
    """The BiCGStab block's steps in NumPy (``HostBlock`` in _block_fused says what it takes)."""

    def __init__(self, A, B, X0, tol, dinv=None, limit=None):
        super().__init__(A, B, X0, tol, dinv, limit)
        self.brk = breakdown_tol(self.dt)
        k = self.B.shape[1]
        self.rho, self.alpha, self.omega, self.beta = (np.zeros(k, self.dt) for _ in range(4))

    def _m(self, V):
        return V if self.dinv is None else self.dinv * V

    def _stop(self, mask, code):
        self.status[mask] = code

    def start(self):
        self.R = self.B.astype(self.dt) - (0 if self.x0_zero else self.A @ self.X)
        self.Rt = self.R.copy()
        self.P, self.V, self.T = (np.zeros_like(self.R) for _ in range(3))
        s = (self.R.conj() * self.R).sum(axis=0)
        on = self.status == ACTIVE
        self.rr[on] = np.abs(s[on])
        self.rho[on] = s[on]
        with np.errstate(all="ignore"):
            done = on & np.isfinite(s) & (s.real <= self.tol2)
            bad = on & ~done & (~np.isfinite(s) | (np.abs(s) < self.brk))
        self._stop(done, CONVERGED)
        self._stop(bad, BROKE)
        self.first = True

    def iterate(self):
        on = self.status == ACTIVE
        with np.errstate(all="ignore"):
            if self.first:
                self.P[:, on] = self.R[:, on]
            else:
                self.P[:, on] = self.R[:, on] + self.beta[on] * (
                    self.P[:, on] - self.omega[on] * self.V[:, on])
            self.first = False
            self.V[:, on] = self.A @ self._m(self.P)[:, on]
            rv = (self.Rt.conj() * self.V).sum(axis=0)
            a = self.rho / rv
            bad = on & ((rv == 0) | ~np.isfinite(rv) | ~np.isfinite(a))
            self._stop(bad, BROKE)
            on &= ~bad
            self.alpha[on] = a[on]
            self.R[:, on] -= self.alpha[on] * self.V[:, on]              # s, in r's place
            ss = (self.R.conj() * self.R).sum(axis=0)
            bad = on & ~np.isfinite(ss)
            half = on & ~bad & (ss.real <= self.tol2)
            self._stop(bad, BROKE)
            self._stop(half, CONVERGED)
            self.iters[half] += 1
            on &= ~bad & ~half
            self.T[:, on] = self.A @ self._m(self.R)[:, on]
            ts = (self.T.conj() * self.R).sum(axis=0)
            tt = (self.T.conj() * self.T).sum(axis=0)
            w = ts / tt
            bad = on & ~(np.isfinite(ts) & np.isfinite(tt) & np.isfinite(w))
            self._stop(bad, BROKE)
            on &= ~bad
            self.omega[on] = w[on]
            self.X[:, half] += self.alpha[half] * self._m(self.P)[:, half]
            self.X[:, on] = (self.X[:, on] + self.alpha[on] * self._m(self.P)[:, on]) \
                + self.omega[on] * self._m(self.R)[:, on]
            self.R[:, on] -= self.omega[on] * self.T[:, on]
            rr = (self.R.conj() * self.R).sum(axis=0)
            rho = (self.Rt.conj() * self.R).sum(axis=0)
            self.rr[on] = np.abs(rr[on])
            self.iters[on] += 1
            bad = on & ~np.isfinite(rr)
            done = on & ~bad & (rr.real <= self.tol2)
            spent = on & ~bad & ~done & (self.iters >= self.limit)
            on &= ~bad & ~done & ~spent
            tiny = on & (~np.isfinite(rho) | (np.abs(rho) < self.brk)
                         | (np.abs(self.omega) < self.brk))
            on &= ~tiny
            beta = (rho / self.rho) * (self.alpha / self.omega)
            nonfinite = on & ~np.isfinite(beta)
            on &= ~nonfinite
            self.beta[on] = beta[on]
            self.rho[on] = rho[on]
        self._stop(bad | tiny | nonfinite, BROKE)
        self._stop(done, CONVERGED)
        self._stop(spent, MAXITER)


class DeviceBlockBiCGStab(DeviceBlock):
    """The BiCGStab block's steps as block.cu's ``bs_*`` kernels (``DeviceBlock`` says what it
    takes)."""

    VECTORS = ("R", "Rt", "P", "V", "Tv")     # with X and B: the n x k arrays of a pass

    def __init__(self, csr, B, X0, tol, dinv=None, stream=None, limit=None, graphs=False,
                 asleep=False):
        super().__init__(csr, B, X0, tol, dinv, stream, limit, self.VECTORS,
                         ("rho", "rr", "alpha", "omega", "beta"), graphs, asleep)
        self.half = self.cp.zeros(int(self.k), self.cp.int32)
        self.brk2 = self.dt.type(breakdown_tol(self.dt) ** 2)
        self.first = True

    def _sums(self, name, parts, args):
        self._launch(name, (int(self.k),), (parts, self.k) + args)

    def start(self):
        Q = None
        if not self.x0_zero:                  # A X0 into V (unused until the first iteration)
            self._spmm(self.X, self.V, self.X)
            Q = self.V
        self._launch("bs_start", self.grid, (self.n, self.k, self.B, self._null(Q), self.R,
                                             self.Rt, self.active, self.part_a))
        self._sums("bs_first", self.nparts, (self.part_a, self.tol2, self.brk2, self.rr,
                                             self.rho, self.active, self.status_d))
        self.first = True

    def iterate(self):
        c, dinv = self.csr, self._null(self.dinv)
        self._launch("bs_direction", self.grid,
                     (self.n, self.k, self.R, self.V, self.beta, self.omega, self.active,
                      np.int32(self.first), self.P))
        self.first = False
        self._spmm(self.P, self.V, self.Rt, self.dinv)          # v = A M p, <r~, v>
        self._alpha(self.rho)
        self._launch("bs_s", self.grid, (self.n, self.k, self.V, self.alpha, self.active,
                                         self.R, self.part_a))
        self._sums("bs_half", self.nparts, (self.part_a, self.tol2, self.active, self.status_d,
                                            self.iters_d, self.half))
        self._launch("bs_spmm_ts", self.spmm_grid,
                     (self.n, self.k, c.indptr, c.indices, c.data, dinv, self.R, self.Tv,
                      self.active, self.part_a, self.part_b), scaled=self.dinv is not None)
        self._sums("bs_omega", self.spmm_parts, (self.part_a, self.part_b, self.active,
                                                 self.status_d, self.omega))
        self._launch("bs_update", self.grid,
                     (self.n, self.k, self.P, self.Tv, self.Rt, dinv, self.alpha, self.omega,
                      self.active, self.half, self.X, self.R, self.part_a, self.part_b))
        self._sums("bs_next", self.nparts, (self.part_a, self.part_b, self.tol2, self.brk2,
                                            self.limit, self.rr, self.rho, self.alpha,
                                            self.omega, self.beta, self.active, self.status_d,
                                            self.iters_d, self.half))
