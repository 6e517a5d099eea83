"""Chebyshev polynomial preconditioning, ``M="chebyshev"`` or ``dpsolve.precond.Chebyshev(...)``.

z = M r is ``degree`` steps of the Chebyshev semi-iteration for D^-1 A z = D^-1 r from z = 0,
over [rho / 30, 1.1 rho] with rho the estimate of rho(D^-1 A) (``smoothers.chebyshev``, the same
polynomial AMG smooths with). M is a fixed polynomial in D^-1 A times D^-1: symmetric for a
symmetric A, so a CG preconditioner. Each application costs degree - 1 products with A, in
exchange for fewer iterations (and fewer inner products: the reductions the device-driven
variants pay most for). Its stream face is amg.cu's ``vc_cheb``, one kernel a step, the first
two in one (over the solve's own ELL arrays, ``vc_cheb_ell``, where the solve holds A in ELL);
the host face is the reference recurrence.
"""
from __future__ import annotations

import numpy as np

from . import register, smoothers
from .base import DeviceFace, Preconditioner
from .diagonal import inverse_diagonal


@register
class Chebyshev(Preconditioner):
    name = "chebyshev"
    has_adjoint = False

    # degree 5 by default: against 3, 36-38 % fewer iterations for 5-8 % more products with A
    # (host, rtol 1e-8, the ten shared SPD matrices), and on an H200 (prepared, float64) faster
    # on every one of them (1.1-1.4x) and on 2-D 128^2..1024^2 and 3-D 40^3..160^3 Laplacians
    # (1.04-1.41x; degree 5 within 5 % of the best of 2..8 on each). The runs:
    # benchmarks/chebyshev-degree-2026-11-29.csv
    DEFAULT_DEGREE = 5

    def __init__(self, degree=DEFAULT_DEGREE, lower=1.0 / 30.0, upper=1.1):
        if isinstance(degree, bool) or not isinstance(degree, int) or not 1 <= degree <= 16:
            raise ValueError(f"Chebyshev degree must be an integer in 1..16, got {degree!r}")
        if not (0 < lower < upper):
            raise ValueError(f"Chebyshev needs 0 < lower < upper, got {lower!r}, {upper!r}")
        self.degree, self.lower, self.upper = degree, float(lower), float(upper)
        self.csr = self.rho = self.inv_diag = None

    def options(self):
        return {"degree": self.degree, "lower": self.lower, "upper": self.upper}

    def bind(self, csr, n, dtype, *, snapshot=False):
        if csr is None:
            raise ValueError("M='chebyshev' needs A as a matrix, not a LinearOperator")
        out = Chebyshev(self.degree, self.lower, self.upper)
        out.csr, out.dtype, out.bound = csr, np.dtype(dtype), True
        return out

    def host(self):
        A = self.csr.to_scipy()
        inv, why = inverse_diagonal(A.diagonal(), self.dtype, who="M='chebyshev'")
        if why:
            raise ValueError(why)
        rho = smoothers._positive_rho(smoothers.spectral_radius(A, inv), "M='chebyshev'")
        self.rho = rho

        def psolve(r):
            return smoothers.chebyshev(A, inv, rho, self.degree, None, r, self.lower, self.upper)
        return psolve, None

    def device(self, state):
        from .amg import device
        c = self.csr.to_device()
        A = device._csr(c.data, c.indices, c.indptr, (c.n, c.n))
        with state.stream:
            inv = device._check_level(A, 0, who="M='chebyshev'", positive=False)
            rho = smoothers._positive_rho(device.spectral_radius(A, inv), "M='chebyshev'")
        self.rho = rho
        coeffs = device.chebyshev_coefficients(rho, self.degree, state.dtype, self.lower,
                                               self.upper)
        ell = device.ell_of(getattr(state, "A", None), c.n, state.dtype)
        return ChebyshevFace(A, inv, coeffs, state, ell)

    def adopt(self, other):
        if isinstance(other, Chebyshev):
            self.rho = other.rho

    def describe(self):
        return {"precond": "chebyshev", **self.options(), "rho": self.rho}


class ChebyshevFace(DeviceFace):
    """degree - 1 vc_cheb kernels (the first two steps, from z = 0, in one:
    ``device.chebyshev_launches``; degree 1: one), alternating between z and a work vector so
    that the last lands in z; over ``ell`` (the solve's (width, indices, data): ``vc_cheb_ell``,
    a thread a row) where given."""

    def __init__(self, A, inv_diag, coeffs, state, ell=None):
        import cupy

        from ..cuda.device_matrix import vector_width
        self.A, self.inv_diag, self.coeffs, self.ell = A, inv_diag, coeffs, ell
        self.lanes = vector_width(A.nnz / max(A.shape[0], 1))
        with state.stream:
            self.W = cupy.full(state.n, np.nan, state.dtype)
            self.d = cupy.full(state.n, np.nan, state.dtype)

    def apply(self, ex, r, z):
        from ..cuda import ops
        from ..cuda._loader import get_kernel
        from ..cuda.executor import launch
        from .amg.device import chebyshev_steps, rows_launch
        A, n = self.A, np.int32(self.A.shape[0])
        kernel = get_kernel("amg_vc", f"vc_cheb<{{T}}, {self.lanes}>", r.dtype)
        grid, rows = rows_launch(int(n), self.lanes, int(A.nnz))
        for src, dst, c0, c1, c2, product in chebyshev_steps(self.coeffs, None, z, self.W):
            tail = (self.inv_diag, ops._NULL if src is None else src, r, self.d, c0, c1, c2, dst)
            if product and self.ell is not None:
                launch(get_kernel("amg_vc", "vc_cheb_ell<{T}, false>", r.dtype),
                       (ops.grid_for(int(n)),), (ops.BLOCK,),
                       (n, *self.ell, r.dtype.type(1), *tail), ex.stream)
            else:                   # CSR, or the first step alone (no product, from zero)
                launch(kernel, grid, (ops.BLOCK,),
                       (n, A.indptr, A.indices, A.data, *tail, rows), ex.stream)

    def apply_adjoint(self, ex, r, z):
        raise ValueError("the Chebyshev preconditioner's adjoint is not built; use cg or "
                         "bicgstab")
