"""Restarted GMRES on variant ``cublas``: the host drives the Arnoldi process on the GPU.

Per inner iteration: w = M A v_k (dpsolve's SpMV, then its Jacobi kernel or the user's M), the
projections on the basis by classical Gram-Schmidt applied twice (CGS2: two cuBLAS GEMVs each
way through CuPy, as accurate as the reference's modified Gram-Schmidt, in one call instead of
k + 1), ||w|| read back; the Givens rotations and the small triangular solve run on the host,
exactly as in ``reference.py``, whose tests (inner tolerance, breakdown, restarts, callbacks)
this follows line by line. Three host waits per inner iteration: the cost of host-side scalars,
which is what the cublas variant measures.
"""
from __future__ import annotations

import numpy as np

from ...cuda import ops
from .reference import _triangularize, _upper_solve


def _basis(st, m):
    """The state's Krylov basis, (m + 1) x n, allocated once per prepared system and restart."""
    import cupy
    V = getattr(st, "_gmres_basis", None)
    if V is None or V.shape[0] < m + 1:
        with st.stream:
            V = st._gmres_basis = cupy.empty((m + 1, st.n), dtype=st.dtype)
    return V[:m + 1]


def gmres_cublas(backend, st, x, *, atol, maxiter, sync, callback):
    import cupy
    opts = st.options
    n, dt, stream = st.n, st.dtype, st.stream
    eps = np.finfo(dt).eps
    m = min(opts.get("restart") or 20, n)
    callback_type = opts.get("callback_type")
    if callback is None:
        callback_type = None
    elif callback_type is None:
        callback_type = "legacy"
    legacy = callback_type == "legacy"
    V = _basis(st, m)
    w, r = st.v, st.r
    pre = st.preconditioned
    conj = np.issubdtype(dt, np.complexfloating)

    def norm(v):
        sync.waits += 1
        return float(cupy.linalg.norm(v))

    def precondition(src, out):
        """out = M src (a copy without a preconditioner)."""
        if not pre:
            cupy.copyto(out, src)
        else:
            st.psolve(src, out)

    def true_residual():
        ops.spmv(st.A, x, w, stream)                      # r = b - A x
        cupy.subtract(st.b, w, out=r)
        return norm(r)

    bnrm2 = norm(st.b)
    precondition(st.b, w)
    factor = 1.0
    ptol = norm(w) * min(factor, atol / bnrm2)
    R = np.zeros((m + 1, m), dtype=dt)
    rot = []
    inner = 0
    if true_residual() < atol:
        return 0, 0, {}
    for cycle in range(maxiter):
        precondition(r, V[0])
        beta = norm(V[0])
        V[0] *= 1 / beta
        g = np.zeros(m + 1, dtype=dt)
        g[0] = beta
        R[:] = 0
        rot.clear()
        breakdown = False
        presid = 0.0
        for k in range(m):
            ops.spmv(st.A, V[k], r, stream)               # r as scratch: A v_k
            precondition(r, w)                             # w = M A v_k
            h0 = norm(w)
            Vk = V[:k + 1]
            Vh = Vk.conj() if conj else Vk
            h = Vh @ w                                     # CGS, twice
            w -= h @ Vk
            h2 = Vh @ w
            w -= h2 @ Vk
            sync.waits += 1
            R[:k + 1, k] = (h + h2).get()
            hn = norm(w)
            if hn <= eps * h0:
                R[k + 1, k] = 0
                breakdown = True
            else:
                R[k + 1, k] = hn
                cupy.multiply(w, dt.type(1 / hn), out=V[k + 1])
            presid = _triangularize(R, g, rot, k)                 # on the host
            inner += 1
            if callback_type in ("legacy", "pr_norm"):
                callback(float(presid / bnrm2))
            if (legacy and inner == maxiter) or presid <= ptol or breakdown:
                break
        y = _upper_solve(R, g, k)
        x += cupy.asarray(y) @ V[:k + 1]
        rnorm = true_residual()
        if legacy and inner == maxiter:
            return (0 if rnorm <= atol else maxiter), inner, {}
        if callback_type == "x":
            callback(x)
        if rnorm <= atol:
            return 0, (inner if legacy else cycle + 1), {}
        if breakdown:
            break
        factor = max(eps, 0.25 * factor) if presid <= ptol else min(1.0, 1.5 * factor)
        ptol = presid * min(factor, atol / rnorm)
    return maxiter, (inner if legacy else cycle + 1), {}
