"""Several right-hand sides: ``dpsolve.cg(A, B)`` with B of shape (n, k) (issue 31, part 1).

SciPy has no (n, k) form: ``b`` of shape (n,) or (n, 1) keeps SciPy's behaviour exactly, and a B of
k != 1 columns returns X of shape (n, k), an integer array of k info codes (each SciPy's meaning
for its column) and, with ``full_output``, a :class:`BlockReport` with one ``SolveReport`` per
column. Each column converges to its own tolerance (``max(rtol * ||b_j||, atol)``), with its own
restarts from the true residual and its own final check.

How it runs: A is prepared once (``dpsolve.prepare``: checks, transfer, format, the
preconditioner's set-up, once for all k columns). Then, on the GPU, CG and BiCGStab of small
systems (each column's vectors fit one block's shared memory: n <= 6,400 for float64 CG) with
``variant="auto"``, M None or Jacobi, polling sync and no callback or energy: the
columns run as a batch of systems that share A (dpsolve.batch's one-launch kernels, a block per
column, A read through L2), every column to its own tolerance in one launch. CG and BiCGStab on
larger systems under the same conditions (a real dtype; blocking sync too, and small systems
then as well) run as a fused block (``_block_fused``, ``_block_bicgstab``: A read once an
iteration, twice for BiCGStab, for up to 32 columns, each column frozen once it converged; the
true residuals checked and restarted from as a single solve would; a column that broke down
finished by its single solve); variants cuda, merge and graph pinned run it too, graph (and
auto) replaying its iterations as CUDA graphs. Otherwise the columns are solved one after
another on the prepared system, so every variant and method runs blocks: a NumPy block of a
system on the GPU goes up once and X comes down once (no callback: it is handed X as NumPy), and
where only (X, info) is asked for (no report, callback, energy or x0) each column is a plain
``P.solve(b_j)``, which the prepared one-launch paths (``_fast``: persistent, graph, AMG) take.
The report says which path ran (``path``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ._setup import download, upload
from .formats.csr import _is_cupy


class ColumnFigures:
    """What a block report reads from its ``columns`` (a report per column, each with
    ``iterations``, ``info`` and ``residual_norm``): :class:`BlockReport`'s and
    ``dpsolve.distributed``'s ``DistributedBlockReport``'s."""

    @property
    def k(self) -> int:
        return len(self.columns)

    @property
    def iterations(self) -> np.ndarray:
        return np.array([r.iterations for r in self.columns], dtype=np.int64)

    @property
    def info(self) -> np.ndarray:
        return np.array([r.info for r in self.columns], dtype=np.int64)

    @property
    def residual_norm(self) -> np.ndarray:
        return np.array([r.residual_norm for r in self.columns], dtype=np.float64)

    def summed(self, name: str) -> float | None:
        """The columns' ``name`` (J) summed; None when a column has none."""
        e = [getattr(r, name) for r in self.columns]
        return None if not e or any(v is None for v in e) else float(sum(e))

    def heading(self) -> str:
        """"k right-hand sides (path): info [...], iterations lo-hi": a summary's start."""
        its = self.iterations
        return (f"{self.k} right-hand sides ({self.path}): info {self.info.tolist()}, "
                f"iterations {int(its.min()) if its.size else 0}-"
                f"{int(its.max()) if its.size else 0}")


@dataclass
class BlockReport(ColumnFigures):
    """What a block solve did: one :class:`dpsolve.SolveReport` per column (``columns``), and
    the call's own figures. ``path``: how the columns ran ("columns, one prepared system")."""
    columns: list = field(default_factory=list)
    prepare_time: float | None = None     # s: the one set-up of A for every column
    wall_time: float | None = None        # s: the whole call
    path: str = "columns, one prepared system"

    @property
    def gpu_energy(self) -> float | None:
        """J summed over the columns' solves (None when a column's solve has none)."""
        return self.summed("gpu_energy")

    def summary(self) -> str:
        return (f"{self.heading()}, wall {self.wall_time:.3g} s "
                f"(prepare {self.prepare_time:.3g} s)")


def is_block(b) -> bool:
    """Whether ``b`` is a block of right-hand sides: 2-D with a number of columns other than 1
    ((n,) and (n, 1) are SciPy's single right-hand side)."""
    shape = getattr(b, "shape", None)
    if shape is None:
        try:
            shape = np.shape(b)
        except Exception:
            return False
    return len(shape) == 2 and shape[1] != 1


def _block(B, n: int, what: str, finite: bool = True):
    """B (or X0) checked: a 2-D numeric array of n rows, finite (``finite``: else the caller
    checks that, as the batch path's kernel does), NumPy or CuPy (as given)."""
    from ._system import _check_dtype
    B = B if _is_cupy(B) else np.asarray(B)
    if B.dtype == object:
        raise TypeError(f"{what} has dtype object; expected a numeric array")
    if B.ndim != 2 or B.shape[0] != n:
        raise ValueError(f"shapes of A {(n, n)} and {what} {tuple(B.shape)} are incompatible "
                         f"(a block of right-hand sides has shape (n, k))")
    _check_dtype(B.dtype, what)
    if finite:
        _check_finite(B, what)
    return B


def _check_finite(B, what: str) -> None:
    """A ValueError naming the columns of B that hold a NaN or Inf."""
    from ._system import _all_finite
    xp = __import__("cupy") if _is_cupy(B) else np
    if _all_finite(B):                    # one reduction over all of B: the common case
        return
    finite = xp.isfinite(B).all(axis=0)   # per column (on a C-ordered CuPy B, a slow reduction)
    _non_finite(np.flatnonzero(~(finite.get() if _is_cupy(B) else finite)), what)


def non_finite_columns(bad, what: str) -> str | None:
    """The words for the columns ``bad`` (indices) of ``what`` that hold a NaN or Inf; None
    when there are none (``dpsolve.distributed``'s block checks say the same)."""
    if not bad.size:
        return None
    cols = ", ".join(str(int(j)) for j in bad[:10]) + (", ..." if bad.size > 10 else "")
    return f"{what} contains NaN or Inf in column{'s' if bad.size > 1 else ''} {cols}"


def _non_finite(bad, what: str) -> None:
    problem = non_finite_columns(bad, what)
    if problem:
        raise ValueError(problem)


def solve_columns(P, B, X0, *, rtol, atol, maxiter, callback, full_output, energy, options,
                  t0=None):
    """Solve the k columns of B on the prepared system P, one after another; returns
    (X, info) or (X, info, BlockReport). ``callback`` receives X (n, k) after each iteration, with
    the column in progress updated (the columns after it are still x0, the ones before final)."""
    t0 = time.perf_counter() if t0 is None else t0
    B = _block(B, P.n, "b", finite=False)       # the batch path checks it in its kernel
    k = B.shape[1]
    x0_mb = isinstance(X0, str)
    if X0 is not None and not x0_mb:
        X0 = _block(X0, P.n, "x0")
        if X0.shape != B.shape:
            raise ValueError(f"x0 {tuple(X0.shape)} and b {tuple(B.shape)} must have the same "
                             f"shape")
    cupy_out = _is_cupy(B)
    fast = _batch_path(P, B, X0, rtol=rtol, atol=atol, maxiter=maxiter, callback=callback,
                       full_output=full_output, energy=energy, options=options, t0=t0)
    if fast is not None:
        return fast
    host = B, X0                                  # the caller's, where the device has no room
    up = _on_device(P, B, X0, x0_mb, callback)   # a NumPy block moved up once, X down once
    if up is not None:
        B, X0 = up
    _check_finite(B, "b")                         # on the device for a block moved up
    from . import _block_fused
    if FUSED_PATH and _block_fused.usable(P, B, X0, callback=callback, energy=energy,
                                          options=options):
        out = _block_fused.solve(P, B, X0, rtol=rtol, atol=atol, maxiter=maxiter, t0=t0)
        if out is not None:
            if up is not None:
                out = (download(out[0]),) + tuple(out[1:])
            return out if full_output else out[:2]
    X = _device_zeros((P.n, k), P.dtype) if up is not None else None
    if up is not None and X is None:              # no room for X there: the host's columns
        (B, X0), up = host, None
    xp = __import__("cupy") if cupy_out or up is not None else np
    if X is None:
        X = xp.zeros((P.n, k), dtype=P.dtype)
    if X0 is not None and not x0_mb:
        X[...] = X0.astype(P.dtype, copy=False) if xp is np else xp.asarray(X0, P.dtype)
    info = np.zeros(k, dtype=np.int64)
    if not full_output and callback is None and not energy and not options and X0 is None:
        for j in range(k):                  # (x, info) alone: the prepared fast paths take it
            X[:, j], info[j] = P.solve(xp.ascontiguousarray(B[:, j]), rtol=rtol, atol=atol,
                                       maxiter=maxiter)
        return (download(X) if up is not None else X), info
    report = BlockReport(prepare_time=getattr(P, "prepare_time", None))
    for j in range(k):
        cb = None
        if callback is not None:
            def cb(xk, j=j):
                X[:, j] = xk
                callback(X)
        x0 = X0 if x0_mb else (None if X0 is None else xp.ascontiguousarray(X0[:, j]))
        out = P.solve(xp.ascontiguousarray(B[:, j]), x0, rtol=rtol, atol=atol, maxiter=maxiter,
                      callback=cb, full_output=True, energy=energy, **options)
        X[:, j] = out[0]
        info[j] = out[1]
        report.columns.append(out[2])
    if up is not None:
        X = download(X)
    report.wall_time = time.perf_counter() - t0
    return (X, info, report) if full_output else (X, info)


def _on_device(P, B, X0, x0_mb, callback):
    """A NumPy B (and X0) on a system prepared on the GPU, with no callback (it is handed X as
    NumPy): (B, X0) copied to the device in one go, or None where the columns stay on the host
    (also where the device has no room for them). A column sliced out of a NumPy (n, k) block,
    and x copied back into it, is a strided host copy each, and B's finiteness a host pass (at
    3-D 100^3, k = 8, 120 of a 330 ms call); on the device these cost microseconds, and the
    columns then solve as CuPy ones, the same bits."""
    if _is_cupy(B) or callback is not None or not getattr(P, "_device", False):
        return None
    import cupy
    x0 = None if X0 is None or x0_mb else X0
    try:
        dB, dX0 = upload([B, x0], cupy.cuda.get_current_stream())
    except cupy.cuda.memory.OutOfMemoryError:
        return None                                   # no room for the block: column by column
    return dB, (X0 if x0 is None else dX0)


def _device_zeros(shape, dtype):
    """A zeroed CuPy array, or None where the device has no room for it."""
    import cupy
    try:
        return cupy.zeros(shape, dtype=dtype)
    except cupy.cuda.memory.OutOfMemoryError:
        return None


BATCH_PATH = True           # False: every block runs as a loop of single solves (tests compare)
FUSED_PATH = True           # False: large blocks run as a loop of single solves (tests compare)


def _batch_path(P, B, X0, *, rtol, atol, maxiter, callback, full_output, energy, options, t0):
    """The block as a batch of systems sharing A (see the module's doc), or None where that path
    does not take it: (X, info) or (X, info, BlockReport), as ``solve_columns``."""
    from . import _frontend as fe
    base = P._base
    if (not BATCH_PATH or not P._device or callback is not None or energy or options
            or isinstance(X0, str) or P._options["variant"] != "auto" or P.sync != "polling"
            or P.method not in ("cg", "bicgstab") or base.csr is None or base.ascale
            or base.M.name not in ("none", "jacobi")):
        return None
    import cupy

    from ._system import abs_max, square_bounds
    from .batch import BAD_INPUT, device
    from .formats import row_stats
    n, k, dt = P.n, B.shape[1], np.dtype(P.dtype)
    fe._get_atol_rtol(P.method, 0.0, atol, rtol)           # SciPy's errors for bad tolerances
    csr = base.csr
    config = (device.rows_config(n, row_stats(csr)["max"], dt) if P.method == "cg"
              and device.ROWS else None)
    if config is None and device.vector_path(n, dt, P.method)[0] != "shared":
        return None                                           # too large for a block a column
    Bt = cupy.ascontiguousarray(cupy.asarray(B).astype(dt, copy=False).T)       # (k, n)
    Xt = (cupy.zeros((k, n), dt) if X0 is None
          else cupy.ascontiguousarray(cupy.asarray(X0).astype(dt, copy=False).T))
    maxiter = 10 * n if maxiter is None else int(maxiter)
    values = csr.data.reshape(1, -1)
    jacobi = base.M.name == "jacobi"
    # ||b_j||^2 on the device, and the columns outside the safe range (in_safe_range's bounds;
    # NaN among them): those the loop of single solves scales (scale_rhs)
    sq = (Bt * Bt if dt.kind == "f" else cupy.abs(Bt) ** 2).sum(axis=1, dtype=np.float64)
    lo, hi = square_bounds(dt)
    unsafe = (sq != 0) & ~((sq >= lo) & (sq <= hi))
    if config is not None:
        # the kernel checks b (BAD_INPUT: A was checked by prepare) and forms each tolerance;
        # its codes and the unsafe columns read back in one wait
        info, its, res, tol, path = device.solve_cg_rows(
            values, csr.indptr, csr.indices, Bt, Xt, rtol, atol, maxiter, jacobi, config,
            shared_values=True, x0=None if X0 is None else Xt)
        info_h, unsafe_h = cupy.stack((info.astype(cupy.int64),
                                       unsafe.astype(cupy.int64))).get()
        _non_finite(np.flatnonzero(info_h == BAD_INPUT), "b")
        if unsafe_h.any():
            return None
    else:
        _check_finite(B, "b")
        # ||b_j||^2 = 0: b_j = 0, or squares that underflow (float32 subnormals among them: the
        # device reads them as 0, _system.flushes), which the single solves scale
        zero = sq == 0                          # one wait for both; a second where b_j = 0
        any_unsafe, any_zero = (bool(v) for v in cupy.stack((unsafe.any(), zero.any())).get())
        if any_unsafe or any_zero and abs_max(Bt[zero]) != 0:
            return None
        bnorm = cupy.sqrt(sq)
        tol = cupy.maximum(float(rtol) * bnorm, float(atol))
        dinv = (cupy.ascontiguousarray(cupy.broadcast_to(
            cupy.asarray(base.M.inv_diag, dt), (k, n))) if jacobi else None)
        info, its, res, path = device.solve_skipping_zero(
            P.method, values, csr.indptr, csr.indices, Bt, Xt, cupy.zeros(k, cupy.int32), tol,
            maxiter, dinv, bnorm == 0, shared_values=True)
        info_h = info.get()
    X = cupy.ascontiguousarray(Xt.T)
    info = info_h.astype(np.int64)
    if not _is_cupy(B):
        from ._setup import download
        X = download(X)
    if not full_output:
        return X, info
    its, res, tol = its.get(), res.get(), tol.get()
    from .report import SolveReport
    wall = time.perf_counter() - t0
    dev = fe.device_status().name
    report = BlockReport(prepare_time=getattr(P, "prepare_time", None), wall_time=wall,
                         path=f"a batch of {k} systems sharing A: {path}")
    for j in range(k):
        report.columns.append(SolveReport(
            variant="batch", format="csr", sync=P.sync, method=P.method, dtype=dt.name, n=n,
            nnz=P.nnz, iterations=int(its[j]), info=int(info[j]), converged=bool(info[j] == 0),
            residual_norm=float(res[j]), tolerance=float(tol[j]), wall_time=wall,
            device=dev))
    return X, info, report


def solve(method, A, B, x0, options=None, *, rtol, atol, maxiter, M, callback, variant, sync,
          format, full_output, energy):
    """``dpsolve.<method>(A, B)`` with B (n, k): one prepared system, then the columns."""
    from . import _frontend as fe
    from ._prepared import PreparedSystem
    from ._system import check_matrix, coerce, matrix_char
    t0 = time.perf_counter()
    fe.check_options(variant, sync, format, maxiter, callback)
    A, _, shape = check_matrix(A)
    B = _block(B, shape[0], "b")
    if callback is not None and variant == "auto" and fe.on_device(variant):
        from .backends import variant_info          # a callback needs a host-driven variant
        variant = next((v for v in ("merge", "cuda", "cublas") if variant_info(v).available),
                       "host")
    dtype = coerce(matrix_char(A), B.dtype.char)
    P = PreparedSystem(A, method, M=M, variant=variant, format=format, sync=sync, dtype=dtype)
    return solve_columns(P, B, x0, rtol=rtol, atol=atol, maxiter=maxiter, callback=callback,
                         full_output=full_output, energy=energy, options=options or {}, t0=t0)
