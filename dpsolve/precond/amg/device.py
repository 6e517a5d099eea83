"""Smoothed-aggregation AMG on the GPU: the set-up and the V-cycle (the stream face).

The rules are the host reference's (``reference.py``, the specification), step for step:
strength, the MIS-2 aggregation (``dpsolve/cuda/amg.cu``: the same keys and decisions, so the
same aggregates), the tentative prolongator, its smoothing, R = P^H, the Galerkin product (cuSPARSE
SpGEMM through CuPy) and the coarsest level's dense pseudo-inverse (cuSOLVER). Everything stays on
the device; the host reads a few counters (the MIS-2 rounds, the sizes of each level).

The V-cycle runs as kernels on the solve's executor (``apply``), so the host-driven variants call
it between their own kernels and variant ``graph`` captures it into its WHILE body: one launch
for a whole AMG-PCG solve. Per level above the coarsest (Jacobi smoothing; Chebyshev adds its
steps):

    vc_presmooth_residual   X = (omega / rho) D^-1 b (pre-smoothing from zero) and
                            res = b - A X, in one kernel
    spmv (R)      b_{l+1} = R res                          dpsolve's CSR-vector SpMV
    ...           the coarser levels, then the coarsest: vc_dense  x_c = pinv(A_c) b_c
    vc_prolong    X += P x_{l+1}
    vc_jacobi     out = X + (omega / rho) D^-1 (b - A X)    post-smoothing (the same smoother)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ...cuda import ops
from ...cuda._loader import get_kernel
from ...cuda.device_matrix import vector_width
from ...cuda.executor import launch
from .. import smoothers
from . import reference
from . import sparse as sps

BLOCK = ops.BLOCK


def _grid(work: int) -> int:
    return ops.grid_for(work)


@dataclass
class DeviceLevel:
    """One level on the device: A_l (CuPy CSR), D^-1, rho, P and R (None on the coarsest), the
    lanes per row of its products, and the V-cycle's work vectors."""
    A: object
    inv_diag: object
    rho: float
    P: object = None
    R: object = None
    aggregates: object = None
    scale: object = None                     # (omega / rho) D^-1: the Jacobi sweep's weights
    cheb: tuple = ()                         # Chebyshev (c1, c2) per step
    lanes: int = 2
    lanes_P: int = 2
    R_matrix: object = None                  # R as a dpsolve CSR-vector DeviceMatrix
    X: object = None
    Wb: object = None
    res: object = None
    d: object = None
    b_in: object = None                      # the level's right-hand side (levels below 0)
    out: object = None                       # and its result

    @property
    def n(self) -> int:
        return int(self.A.shape[0])


@dataclass
class DeviceHierarchy:
    levels: list
    coarse_inv: object
    smoother: str
    omega: float
    degree: int
    dtype: np.dtype
    setup_times: dict = field(default_factory=dict)
    B: list = field(default_factory=list)

    # (its levels, complexities and V-cycle bytes: reference.levels_table / vcycle_bytes, which
    # read only each level's shapes and nnz, serve the device hierarchy as they are)

    def to_host(self) -> "reference.Hierarchy":
        """The same hierarchy as the host reference's objects (SciPy CSR, NumPy): the tests run
        the reference V-cycle on it and compare."""
        import scipy.sparse as sp

        def host(M):
            return None if M is None else sp.csr_array(M.get())
        levels = [reference.Level(A=host(lev.A), inv_diag=lev.inv_diag.get(), rho=lev.rho,
                                  P=host(lev.P), R=host(lev.R),
                                  aggregates=None if lev.aggregates is None
                                  else lev.aggregates.get().astype(np.int64))
                  for lev in self.levels]
        return reference.Hierarchy(levels=levels, coarse_inv=self.coarse_inv.get(),
                                   smoother=self.smoother, omega=self.omega, degree=self.degree,
                                   B=[b.get() for b in self.B])

    # --- the V-cycle: kernels on the executor's stream ----------------------------------------
    def vcycle(self, b, out, stream) -> None:
        """Issue out = M b (b, out: the finest level's vectors; out is not read)."""
        self._cycle(0, b, out, stream)

    def _cycle(self, l, b, out, stream):  # noqa: E741
        levels = self.levels
        if l == len(levels) - 1:
            nc = levels[l].n
            launch(get_kernel("amg", "vc_dense<{T}>", self.dtype),
                   (_grid(nc * 32),), (BLOCK,), (np.int32(nc), self.coarse_inv, b, out), stream)
            return
        lev = levels[l]
        nxt = levels[l + 1]
        if self.smoother == "jacobi":                          # X = s .* b; res = b - A X
            A, X = lev.A, lev.X
            launch(get_kernel("amg", f"vc_presmooth_residual<{{T}}, {lev.lanes}>", self.dtype),
                   (_grid(lev.n * lev.lanes),), (BLOCK,),
                   (np.int32(lev.n), A.indptr, A.indices, A.data, lev.scale, b, X, lev.res),
                   stream)
        else:
            X = self._smooth(lev, None, b, lev.X, stream)      # pre-smoothing from zero
            self._residual(lev, X, b, stream)                  # res = b - A X
        ops.spmv(lev.R_matrix, lev.res, nxt.b_in, stream)      # b_{l+1} = R res
        self._cycle(l + 1, nxt.b_in, nxt.out, stream)
        P = lev.P
        launch(get_kernel("amg", f"vc_prolong<{{T}}, {lev.lanes_P}>", self.dtype),
               (_grid(lev.n * lev.lanes_P),), (BLOCK,),
               (np.int32(lev.n), P.indptr, P.indices, P.data, nxt.out, X), stream)
        self._smooth(lev, X, b, out, stream)                   # post-smoothing into out

    def _residual(self, lev, x, b, stream):
        A = lev.A
        launch(get_kernel("amg", f"vc_residual<{{T}}, {lev.lanes}>", self.dtype),
               (_grid(lev.n * lev.lanes),), (BLOCK,),
               (np.int32(lev.n), A.indptr, A.indices, A.data, x, b, lev.res), stream)

    def _smooth(self, lev, x, b, out, stream):
        """The level's smoother from x (None: zero, Chebyshev only: the Jacobi pre-smoothing from
        zero is fused into the residual), its last step written into ``out``; returns out.
        Out-of-place steps alternate between out and the level's Wb."""
        A, n, dt = lev.A, np.int32(lev.n), self.dtype
        grid = (_grid(lev.n * lev.lanes),)
        if self.smoother == "jacobi":
            launch(get_kernel("amg", f"vc_jacobi<{{T}}, {lev.lanes}>", dt), grid, (BLOCK,),
                   (n, A.indptr, A.indices, A.data, lev.scale, x, b, out), stream)
            return out
        steps = len(lev.cheb)
        kernel = get_kernel("amg", f"vc_cheb<{{T}}, {lev.lanes}>", dt)
        bufs = (out, lev.Wb)                   # the last step lands in out
        cur = x
        for k, (c1, c2) in enumerate(lev.cheb):
            dst = bufs[(steps - 1 - k) % 2]
            launch(kernel, grid, (BLOCK,),
                   (n, A.indptr, A.indices, A.data, lev.inv_diag,
                    cur if cur is not None else ops._NULL, b, lev.d, c1, c2, dst), stream)
            cur = dst
        return out


# --- set-up -------------------------------------------------------------------------------------

def _sync_time(stream) -> float:
    stream.synchronize()
    return time.perf_counter()


def _csr(data, indices, indptr, shape):
    import cupyx.scipy.sparse as csp
    return csp.csr_matrix((data, indices, indptr), shape=shape)


def _canonical(M):
    """CSR without explicit zeros (the reference's ``_canonical``). cuSPARSE's products, sums and
    transposes already give sorted rows without duplicates; the zeros are dropped here with
    CuPy's array operations. (cupyx's sum_duplicates / eliminate_zeros / sort_indices sequence
    lost entries with CuPy 14.2 on CUDA 13: P had 401 of its 1,063 nonzeros on 2-D Poisson
    20^2; which of the three is not pinned down, so none is used.)"""
    import cupy
    M = M.tocsr()
    keep = M.data != 0
    if bool(keep.all()):
        return M
    n = M.shape[0]
    rows = sps.row_ids(M.indptr, int(M.nnz))
    counts = cupy.bincount(rows[keep], minlength=n)
    indptr = cupy.zeros(n + 1, cupy.int32)
    indptr[1:] = cupy.cumsum(counts).astype(cupy.int32)
    return _csr(M.data[keep], M.indices[keep], indptr, M.shape)


# products whose cuSPARSE result failed the check and were made on the host (``spgemm``)
FALLBACKS = {"count": 0}


def _spmv(M, x, magnitude=False):
    """M x (|M| x with ``magnitude``) with dpsolve's own CSR-vector SpMV (not cuSPARSE's), M a
    CuPy CSR of any shape: the products' check, the aggregate norms, the leftover counts."""
    import cupy

    from ...cuda.device_matrix import CsrVectorMatrix
    from ...formats import CSR
    data = cupy.abs(M.data) if magnitude else M.data
    y = cupy.empty(M.shape[0], x.dtype)
    ops.spmv(CsrVectorMatrix(CSR(M.indptr, M.indices, data.astype(x.dtype), M.shape[0])), x, y)
    return y


def spgemm(A, B):
    """A @ B through cuSPARSE (cupyx), checked: C x against A (B x) for a fixed x, with dpsolve's
    own SpMV. cupyx's SpGEMM can return a wrong product or fail with
    CUSPARSE_STATUS_INSUFFICIENT_RESOURCES (CuPy issue 10033; on the H100 with CuPy 14.2 and CUDA
    13, compute-sanitizer saw out-of-bounds reads in its workEstimation on a float32 hierarchy
    and a float64 one failed to converge); a product that fails the check, or the call, is made
    on the host by SciPy and uploaded, with a DpsolveWarning, so that the hierarchy is right."""
    import cupy
    import scipy.sparse as sp
    try:
        C = A @ B
        wide = np.complex128 if np.dtype(C.dtype).kind == "c" else np.float64
        x = smoothers.start_vector(B.shape[1], cupy).astype(wide)
        y1 = _spmv(C, x)
        y2 = _spmv(A, _spmv(B, x))
        scale = _spmv(A, _spmv(B, cupy.abs(x), True), True)   # |A| |B| |x|
        bound = (np.sqrt(np.finfo(C.dtype).eps) * float(cupy.linalg.norm(scale))
                 + np.finfo(C.dtype).tiny)
        if C.shape == (A.shape[0], B.shape[1]) and float(cupy.linalg.norm(y1 - y2)) <= bound:
            return C
        why = "a product that failed its check"
    except Exception as e:                         # INSUFFICIENT_RESOURCES and the like
        why = f"{type(e).__name__}: {e}"
    import warnings

    from ..._errors import DpsolveWarning
    FALLBACKS["count"] += 1
    warnings.warn(f"AMG set-up: cuSPARSE's SpGEMM ({A.shape[0]} x {A.shape[1]} times "
                  f"{B.shape[0]} x {B.shape[1]}) gave {why}; that product was made on the host",
                  DpsolveWarning, stacklevel=3)
    C = sp.csr_array(sp.csr_array(A.get()) @ sp.csr_array(B.get()))
    C.sort_indices()
    return _csr(cupy.asarray(C.data), cupy.asarray(C.indices.astype(np.int32)),
                cupy.asarray(C.indptr.astype(np.int32)), C.shape)


# device bytes a hierarchy takes, per byte of A in CSR (the levels at an operator complexity up to
# ~3, P and R, and the sparse products' intermediates) and per vector (the V-cycle's work vectors,
# the set-up's): on the safe side of what the H100 runs showed (operator complexity 1.9-2.9)
HIERARCHY_PER_MATRIX_BYTE, HIERARCHY_VECTORS = 8, 24


def check_memory(n: int, nnz: int, dtype) -> None:
    """The size guard for the hierarchy: ProblemTooLargeError, before any work, when its
    estimate exceeds the device's free memory (DPSOLVE_NO_SIZE_GUARD=1 to try anyway)."""
    import os

    import cupy

    from ...matrices import SIZE_GUARD_ENV, ProblemTooLargeError, human_bytes
    if os.environ.get(SIZE_GUARD_ENV, "") not in ("", "0"):
        return
    item = np.dtype(dtype).itemsize
    need = (HIERARCHY_PER_MATRIX_BYTE * (nnz * (item + 4) + (n + 1) * 4)
            + HIERARCHY_VECTORS * n * item)
    free, _ = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    free += pool.total_bytes() - pool.used_bytes()     # CuPy's cached blocks are reusable
    if need > free:
        raise ProblemTooLargeError(
            f"M='amg': n = {n:,}, nnz = {nnz:,} ({np.dtype(dtype).name}) needs about "
            f"{human_bytes(need)} of device memory for its hierarchy, more than the "
            f"{human_bytes(free)} free; set {SIZE_GUARD_ENV}=1 to try anyway")


def _check_level(A, level: int):
    """D^-1 of A_l, or the reference's errors (zero, non-finite or non-positive diagonal)."""
    import cupy
    d = A.diagonal()
    bad_zero = cupy.flatnonzero((d == 0) | ~cupy.isfinite(d))
    where = "A" if level == 0 else f"level {level}'s Galerkin matrix"
    if bad_zero.size:
        rows = bad_zero[:10].get()
        raise ValueError(f"AMG needs a nonzero, finite diagonal, but {where} has "
                         f"{int(bad_zero.size)} zero or non-finite diagonal entr"
                         f"{'y' if bad_zero.size == 1 else 'ies'} (rows "
                         f"{', '.join(str(int(r)) for r in rows)}"
                         f"{', ...' if bad_zero.size > 10 else ''})")
    neg = cupy.flatnonzero(d.real <= 0)
    if neg.size:
        rows = neg[:10].get()
        raise ValueError(f"AMG needs a positive diagonal, but {where} has {int(neg.size)} "
                         f"non-positive diagonal entr{'y' if neg.size == 1 else 'ies'} (rows "
                         f"{', '.join(str(int(r)) for r in rows)}"
                         f"{', ...' if neg.size > 10 else ''})")
    return (1.0 / d).astype(A.dtype)


def spectral_radius(A, inv_diag, iterations: int = 20) -> float:
    """``smoothers.spectral_radius`` on the device: the same start vector and steps, in float64
    (complex128), two kernels a step (amg.cu's power_step, power_norm: the normalisation by the
    previous norm is folded into the next product) and one host read at the end."""
    import cupy
    n = A.shape[0]
    wide = np.dtype(np.complex128 if A.dtype.kind == "c" else np.float64)
    data = A.data.astype(wide) if A.dtype != wide else A.data
    d64 = inv_diag.astype(wide)
    lanes = vector_width(A.nnz / max(n, 1))
    grid = _grid(n * lanes)
    v = smoothers.start_vector(n, cupy).astype(wide)
    v /= cupy.linalg.norm(v)
    w = [cupy.empty_like(v), cupy.empty_like(v)]
    partials = cupy.empty(grid, cupy.float64)
    norm, scale = cupy.zeros(1, cupy.float64), cupy.ones(1, cupy.float64)
    step = get_kernel("amg", f"power_step<{{T}}, {lanes}>", wide)
    finish = get_kernel("amg", "power_norm<{T}>", wide)
    src, sc = v, ops._NULL
    for k in range(iterations):
        dst = w[k % 2]
        launch(step, (grid,), (BLOCK,), (np.int32(n), A.indptr, A.indices, data, d64, src, sc,
                                         dst, partials), None)
        launch(finish, (1,), (BLOCK,), (np.int32(grid), partials, norm, scale), None)
        src, sc = dst, scale
    est = float(norm.get()[0])
    return est if math.isfinite(est) else float("nan")


def strength_graph(A, theta: float):
    """The reference's undirected strength graph with self loops, as (indptr, indices) int32.
    With theta = 0, no stored zero, a diagonal entry in every row and a symmetric pattern (the
    usual SPD matrix), it is A's own pattern: no work beyond the checks."""
    import cupy
    indptr = A.indptr
    if theta == 0 and bool((A.data != 0).all()):
        t_ptr, t_idx, _ = sps.transpose(indptr, A.indices, A.indices, A.shape)   # the pattern's
        if bool(cupy.array_equal(t_ptr, indptr)) and bool(cupy.array_equal(t_idx, A.indices)):
            return indptr, A.indices
    gp, gj = sps.strength(indptr, A.indices, A.data, A.diagonal(), theta)   # the reference's
    return gp.astype(cupy.int32), gj.astype(cupy.int32)


def _mis(gp, gj, dtype, distance: int, agg=None):
    """``reference.mis_states`` on the device: the values v (state << 60 | key; -1 inactive)
    after the rounds (amg.cu's mis_init, mis2_max, mis2_decide)."""
    import cupy
    n = gp.size - 1
    grid = (_grid(n),)
    k = lambda name: get_kernel("amg", name + "<{T}>", dtype)    # noqa: E731
    v = cupy.empty(n, cupy.int64)
    m1 = cupy.empty(n, cupy.int64)
    m2 = cupy.empty(n, cupy.int64) if distance == 2 else m1
    count = cupy.zeros(1, cupy.int32)
    k("mis_init")(grid, (BLOCK,), (np.int32(n), agg if agg is not None else ops._NULL, v))
    for _ in range(1000):
        k("mis2_max")(grid, (BLOCK,), (np.int32(n), gp, gj, v, m1))
        if distance == 2:
            k("mis2_max")(grid, (BLOCK,), (np.int32(n), gp, gj, m1, m2))
        count.fill(0)
        k("mis2_decide")(grid, (BLOCK,), (np.int32(n), v, m2, count))
        if int(count.get()[0]) == 0:
            return v
    raise RuntimeError("AMG aggregation: the independent set did not settle in 1000 rounds")


def aggregate(gp, gj, dtype):
    """``reference.aggregate``'s three passes on the device: (node -> aggregate int32, n_agg)."""
    import cupy
    n = gp.size - 1
    grid = (_grid(n),)
    join = get_kernel("amg", "agg_join<{T}>", dtype)
    count = cupy.zeros(1, cupy.int32)

    def joined(agg, v, roots_only):
        out = cupy.empty_like(agg)
        count.fill(0)
        join(grid, (BLOCK,), (np.int32(n), np.int32(roots_only), gp, gj,
                              v if v is not None else ops._NULL, agg, out, count))
        return out, int(count.get()[0])

    # pass 1: the MIS-2's roots and their neighbours
    v = _mis(gp, gj, dtype, 2)
    roots = (v >> 60) == 2
    agg = cupy.where(roots, cupy.cumsum(roots.astype(cupy.int32)) - 1, -1).astype(cupy.int32)
    n_agg = int(roots.sum())
    agg, missing = joined(agg, v, 1)
    # pass 2: second roots, the MIS-1 of the leftovers that have a leftover neighbour
    if missing:
        left = agg < 0
        v2 = _mis(gp, gj, dtype, 1, agg)
        counts = _spmv(_csr(cupy.ones(gj.size, cupy.float32), gj, gp, (n, n)),
                             left.astype(cupy.float32)) - left
        second = ((v2 >> 60) == 2) & left & (counts > 0)
        k = int(second.sum())
        agg = cupy.where(second, n_agg + cupy.cumsum(second.astype(cupy.int32)) - 1,
                         agg).astype(cupy.int32)
        n_agg += k
        agg, missing = joined(agg, v2, 1)
    # pass 3: the rest join their aggregated neighbour of largest key
    for _ in range(n + 1):
        if not missing:
            return agg, n_agg
        agg, missing = joined(agg, v, 0)
    raise RuntimeError("AMG aggregation left nodes unaggregated (internal error)")


def tentative(agg, n_agg: int, B, level: int, dtype):
    """T (CuPy CSR, n x n_agg*k) and the coarse B: the reference's rule (c). k = 1 on the device
    (the squared norms summed per aggregate by a CSR product in index order); k > 1 through the
    reference's batched QR on the host (rigid-body modes: small next to the products)."""
    import cupy
    n, kcols = B.shape
    if kcols > 1:
        T, Bc = reference.tentative_prolongator(agg.get().astype(np.int64), n_agg, B.get(), level)
        return _csr(cupy.asarray(T.data), cupy.asarray(T.indices.astype(np.int32)),
                    cupy.asarray(T.indptr.astype(np.int32)), T.shape), cupy.asarray(Bc)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    b = B[:, 0].astype(wide)
    sq = (b.real ** 2 + b.imag ** 2) if b.dtype.kind == "c" else b * b
    rows = cupy.arange(n + 1, dtype=cupy.int32)
    # ||B_agg||^2: T0^T (aggregates x nodes, nodes in index order) times B's squares, with
    # dpsolve's own SpMV (deterministic: a fixed order of the sums)
    t_ptr, t_idx, t_val = sps.transpose(rows, agg, cupy.ones(n, cupy.float64), (n, n_agg))
    norms = cupy.sqrt(_spmv(_csr(t_val, t_idx, t_ptr, (n_agg, n)),
                                  sq.astype(cupy.float64)))
    zero = cupy.flatnonzero(norms == 0)
    if zero.size:
        raise ValueError(f"B is zero on every node of {int(zero.size)} aggregate(s) of level "
                         f"{level} (first: aggregate {int(zero[0])}): the coarse space cannot "
                         f"represent it. Give B a nonzero entry near every node")
    q = (b / norms[agg]).astype(dtype)
    return _csr(q, agg.copy(), rows, (n, n_agg)), norms.astype(dtype)[:, None]


def smooth_prolongator(A, inv_diag, rho: float, T, dtype):
    """P = T - (4/3 / rho) D^-1 (A T) (the reference's rule (d))."""
    AT = _canonical(spgemm(A, T))
    n = AT.shape[0]
    launch(get_kernel("amg", "csr_scale_rows<{T}>", dtype), (_grid(n),), (BLOCK,),
           (np.int32(n), AT.indptr, AT.data, inv_diag), None)
    c = np.finfo(dtype).dtype.type(reference.PROLONGATION_OMEGA / rho)
    p, i, d = sps.add((T.indptr, T.indices, T.data), (AT.indptr, AT.indices, -(AT.data * c)),
                      T.shape)
    return _canonical(_csr(d, i, p, T.shape))


def pseudo_inverse(A, dtype):
    """The coarsest level's dense pseudo-inverse on the device (cuSOLVER), as the reference's:
    a Hermitian A through its Hermitian part's eigendecomposition, made exactly Hermitian."""
    import cupy
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    dense = sps.dense(A.indptr, A.indices, A.data, A.shape).astype(wide)
    herm = sps.is_hermitian_dense(dense)
    if not herm:
        return cupy.linalg.pinv(dense).astype(dtype)
    H = (dense + dense.conj().T) / 2
    w, V = cupy.linalg.eigh(H)
    cutoff = float(cupy.abs(w).max()) * max(H.shape) * np.finfo(np.float64).eps
    winv = cupy.where(cupy.abs(w) > cutoff, 1.0 / w, 0.0)
    inv = (V * winv) @ V.conj().T
    return ((inv + inv.conj().T) / 2).astype(dtype)


def chebyshev_coefficients(rho: float, degree: int, dtype, lower=1.0 / 30.0, upper=1.1):
    """(c1, c2) of each step of ``smoothers.chebyshev``'s recurrence (vc_cheb: d = c1 d + c2 q,
    c1 = 0 on the first step, where d = q / theta)."""
    lmin, lmax = lower * rho, upper * rho
    theta, delta = (lmax + lmin) / 2, (lmax - lmin) / 2
    sigma = theta / delta
    rho_k = 1 / sigma
    t = np.dtype(dtype).type
    out = [(t(0), t(1 / theta))]
    for _ in range(2, degree + 1):
        rho_next = 1 / (2 * sigma - rho_k)
        out.append((t(rho_next * rho_k), t(2 * rho_next / delta)))
        rho_k = rho_next
    return tuple(out)


def setup(csr, dtype, stream, *, theta=0.0, B=None, smoother="jacobi", omega=4.0 / 3.0,
          degree=3, max_coarse=300, max_levels=10, reuse=None) -> DeviceHierarchy:
    """The hierarchy of A (``csr``: a dpsolve CSR on the device) on ``stream``. ``reuse``: a
    hierarchy of a matrix with the same sparsity pattern, whose aggregates (and B) are kept: only
    the numbers are recomputed (``PreparedSystem.update``'s re-set-up)."""
    import cupy
    dtype = np.dtype(dtype)
    times = {"aggregation": 0.0, "products": 0.0, "smoothers": 0.0, "coarse": 0.0}
    check_memory(csr.n, csr.nnz, dtype)
    with stream:
        t0 = _sync_time(stream)
        A_l = _csr(csr.data.astype(dtype, copy=False), csr.indices, csr.indptr, (csr.n, csr.n))
        n0 = csr.n
        if B is None:
            B_l = cupy.ones((n0, 1), dtype)
        else:
            B_l = cupy.asarray(B, dtype)
        levels, Bs = [], []
        while True:
            level = len(levels)
            t = _sync_time(stream)
            inv_diag = _check_level(A_l, level)
            rho = spectral_radius(A_l, inv_diag)
            times["smoothers"] += _sync_time(stream) - t
            n = A_l.shape[0]
            Bs.append(B_l)
            coarsest = n <= max_coarse or level + 1 >= max_levels
            if not coarsest:
                smoothers._positive_rho(rho, f"level {level}'s smoothing")
                t = _sync_time(stream)
                if reuse is not None and level < len(reuse.levels) - 1:
                    agg = reuse.levels[level].aggregates
                    n_agg = int(reuse.levels[level].P.shape[1]) // B_l.shape[1]
                else:
                    agg, n_agg = aggregate(*strength_graph(A_l, theta), dtype)
                times["aggregation"] += _sync_time(stream) - t
                coarsest = n_agg * B_l.shape[1] >= n
            if coarsest:
                levels.append(DeviceLevel(A=A_l, inv_diag=inv_diag, rho=rho))
                break
            t = _sync_time(stream)
            T, B_c = tentative(agg, n_agg, B_l, level, dtype)
            P = smooth_prolongator(A_l, inv_diag, rho, T, dtype)
            R = _csr(*sps.transpose(P.indptr, P.indices, P.data, P.shape, conj=True)[::-1],
                     (P.shape[1], P.shape[0]))         # P^H, with array operations
            levels.append(DeviceLevel(A=A_l, inv_diag=inv_diag, rho=rho, P=P, R=R,
                                      aggregates=agg))
            A_l, B_l = _canonical(spgemm(spgemm(R, A_l), P)), B_c
            times["products"] += _sync_time(stream) - t
        t = _sync_time(stream)
        n_c = A_l.shape[0]
        if n_c > reference.MAX_DENSE_COARSE:
            raise ValueError(f"the coarsest level (level {len(levels) - 1}) has {n_c} rows, more "
                             f"than the {reference.MAX_DENSE_COARSE} a dense pseudo-inverse is "
                             f"built for: aggregation stopped reducing the problem (try a "
                             f"smaller theta or more max_levels)")
        coarse_inv = pseudo_inverse(A_l, dtype)
        times["coarse"] = _sync_time(stream) - t
        h = DeviceHierarchy(levels=levels, coarse_inv=coarse_inv, smoother=smoother,
                            omega=float(omega), degree=int(degree), dtype=dtype, B=Bs)
        _prepare_cycle(h)
        times["total"] = _sync_time(stream) - t0
    h.setup_times = times
    return h


def _prepare_cycle(h: DeviceHierarchy) -> None:
    """The V-cycle's per-level data: smoother weights, lanes per row, R as a dpsolve matrix and
    the work vectors (NaN-poisoned, as every dpsolve work vector)."""
    import cupy

    from ...cuda.device_matrix import CsrVectorMatrix
    from ...formats import CSR
    dt = h.dtype
    real = np.finfo(dt).dtype.type
    for l, lev in enumerate(h.levels):  # noqa: E741
        n = lev.n
        lev.lanes = vector_width(lev.A.nnz / max(n, 1))
        lev.scale = (lev.inv_diag * real(h.omega / lev.rho)).astype(dt)
        if h.smoother == "chebyshev":
            lev.cheb = chebyshev_coefficients(lev.rho, h.degree, dt)
        lev.b_in = cupy.full(n, np.nan, dt) if l > 0 else None
        lev.out = cupy.full(n, np.nan, dt) if l > 0 else None
        if lev.P is None:
            continue
        lev.lanes_P = vector_width(lev.P.nnz / max(n, 1))
        R = lev.R
        lev.R_matrix = CsrVectorMatrix(CSR(R.indptr, R.indices, R.data, int(R.shape[0])))
        lev.X, lev.Wb, lev.res = (cupy.full(n, np.nan, dt) for _ in range(3))
        lev.d = cupy.full(n, np.nan, dt) if h.smoother == "chebyshev" else None
