"""Restarted GMRES on variant ``cublas``: the host drives the Arnoldi process on the GPU.

Per inner iteration: w = M A v_k (dpsolve's SpMV, then its Jacobi kernel or the user's M), the
projections on the basis by classical Gram-Schmidt applied twice (CGS2: two cuBLAS GEMVs each
way through CuPy, as accurate as the reference's modified Gram-Schmidt, in one call instead of
k + 1), ||w|| read back; the Givens rotations and the small triangular solve run on the host,
by ``reference.run_cycles``, the same control (inner tolerance, breakdown, restarts, callbacks)
the reference runs. Three host waits per inner iteration: the cost of host-side scalars,
which is what the cublas variant measures.
"""
from __future__ import annotations

import numpy as np

from ..._system import vector_norm
from ...cuda import ops
from .reference import run_cycles


class _DeviceSpace:
    """run_cycles' linear algebra on the GPU: the basis V on the device; w = M A v_k with
    dpsolve's kernels; CGS2 through CuPy's GEMV; every norm and projection read back (a host
    wait, counted on ``sync``)."""

    def __init__(self, st, x, m, sync):
        import cupy
        self.cupy, self.st, self.x, self.sync = cupy, st, x, sync
        self.n, self.dtype = st.n, st.dtype
        self.V = _basis(st, min(m or 20, st.n))
        self.w, self.r = st.v, st.r
        self.conj = np.issubdtype(st.dtype, np.complexfloating)
        self.b_norm = self._norm(st.b)

    def _norm(self, v):
        """||v||, read back; its squares neither under- nor overflow (``vector_norm``: M b of a
        system whose |A| is 1e200 has a norm of 1e-200, whose square CuPy's norm made 0)."""
        self.sync.waits += 1
        return vector_norm(v)

    def _precondition(self, src, out):
        """out = M src (a copy without a preconditioner)."""
        if self.st.preconditioned:
            self.st.psolve(src, out)
        else:
            self.cupy.copyto(out, src)

    def precondition_b_norm(self):
        self._precondition(self.st.b, self.w)
        return self._norm(self.w)

    def residual(self):
        st = self.st
        ops.spmv(st.A, self.x, self.w, st.stream)               # r = b - A x
        self.cupy.subtract(st.b, self.w, out=self.r)
        return self._norm(self.r)

    def start(self):
        V = self.V
        self._precondition(self.r, V[0])
        beta = self._norm(V[0])
        V[0] *= 1 / beta
        return beta

    def expand(self, k, R):
        st, w = self.st, self.w
        ops.spmv(st.A, self.V[k], self.r, st.stream)             # r as scratch: A v_k
        self._precondition(self.r, w)                            # w = M A v_k
        h0 = self._norm(w)
        Vk = self.V[:k + 1]
        Vh = Vk.conj() if self.conj else Vk
        h = Vh @ w                                               # CGS, twice
        w -= h @ Vk
        h2 = Vh @ w
        w -= h2 @ Vk
        self.sync.waits += 1
        R[:k + 1, k] = (h + h2).get()
        return h0, self._norm(w)

    def extend(self, k, h):
        self.cupy.multiply(self.w, self.dtype.type(1 / h), out=self.V[k + 1])

    def update(self, y, k):
        self.x += self.cupy.asarray(y) @ self.V[:k + 1]


def _basis(st, m):
    """The state's Krylov basis, (m + 1) x n, allocated once per prepared system and restart."""
    import cupy
    V = getattr(st, "_gmres_basis", None)
    if V is None or V.shape[0] < m + 1:
        with st.stream:
            V = st._gmres_basis = cupy.empty((m + 1, st.n), dtype=st.dtype)
    return V[:m + 1]


def gmres_cublas(backend, st, x, *, atol, maxiter, sync, callback):
    opts = st.options
    restart = opts.get("restart")
    space = _DeviceSpace(st, x, restart, sync)
    info, its = run_cycles(space, atol=atol, maxiter=maxiter, restart=restart, callback=callback,
                           callback_type=opts.get("callback_type"))
    return info, its, {}
