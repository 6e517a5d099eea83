"""The batch's one-launch GPU kernels (dpsolve/cuda/batch.cu: a block per system), and what
they need from the host: where each block's vectors live, and the launch.

``solve_cg`` and ``solve_bicgstab`` take the batch as it stands on the device after
dpsolve.batch's checks -- the values (nb, nnz) over one pattern, B and the start X (nb, n),
each system's tolerance, its Jacobi D^-1 or none, and ``info`` preset by the checks (0: solve
it; else its code, kept) -- and run every system to its own tolerance in one launch. They follow
the host reference (``reference.cg`` / ``reference.bicgstab`` plus dpsolve.batch's
true-residual restart), which the GPU tests hold them to.

CG has two kernels: ``solve_cg_rows`` runs ``batch_cg_rows`` (rows a thread, each row's entries
in registers: systems of n <= 1,024 rows of at most 8 entries, 512 of 16, 256 of 32; a stencil's
columns as its diagonals, ``diagonals``; values read once a solve; dpsolve.batch's checks inside
the kernel; then ``solve_cg_redo``: batch_cg_redo solves again, as A_i / 2^f_i, a system it did
not solve whose A_i is far from 1, a near-empty launch where there is none) and ``solve_cg``
runs ``batch_cg`` (vectors in shared or global memory, values read every iteration: any other
pattern; the checks before it, A's by ``a_checks`` in one launch, which
finds each A_i's scale f_i: the kernels read A_i / 2^f_i). BiCGStab has the second kind only.
The path string says which ran.
"""
from __future__ import annotations

import numpy as np

from .._system import square_bounds
from ..cuda import ops
from ..cuda._loader import BATCH_DIAGONALS, BATCH_ROWS, get_kernel
from ..cuda.executor import launch

# a block's vectors: x, r, p, q; x, r, r~, p, v, t, p^, s^; batch_cg_redo's CG's and b_i / 2^e_i,
# D^-1
VECTORS = {"cg": 4, "bicgstab": 8, "redo": 6}
SHARED_MAX = 200 << 10            # what this launcher asks for at most (the H100 allows 227 KB)
BLOCKS_PER_SM = 8                 # resident blocks the grid aims at when vectors are global
ROWS = True                       # False: CG always takes batch_cg (the tests compare the two)
REDO = True                       # False: no batch_cg_redo after batch_cg_rows (the tests)
ROWS_PER_THREAD = (4, 2, 1)       # batch_cg_rows's R, in order of preference where it fits
#                                   (H100, 10,000 systems of 3-D 10^3: R = 4 4.0 ms, R = 2 5.2,
#                                   R = 1 8.0; batch.cu says why)


ROWS_GLOBAL = (4,)                # its R with the entries read through L1 (NZ = 0; H100, 2-D
#                                   64^2, 64 right-hand sides: R = 4 2.55-2.57 ms, R = 8 2.89-3.24,
#                                   batch_cg 3.13-3.40)


def rows_config(n: int, row_max: int, dtype=np.float64):
    """batch_cg_rows's (NZ, R) for systems of order n whose longest row has row_max entries: at
    the first R of ROWS_PER_THREAD whose block holds the system, the smallest NZ of that R that
    holds a row in registers; else, for a real ``dtype``, NZ = 0 (the entries read through L1 at
    each product) at the first R of ROWS_GLOBAL whose block holds it (complex vectors would not
    fit its registers at 1,024 threads); None where no block holds the system."""
    candidates = []
    for r in ROWS_PER_THREAD:
        fits = [nz for nz, rr in BATCH_ROWS if rr == r and nz >= max(row_max, 1)]
        candidates += [(min(fits), r)] if fits else []
    if np.dtype(dtype).kind == "f":
        candidates += [(0, r) for r in ROWS_GLOBAL]
    for nz, r in candidates:
        threads = BATCH_ROWS.get((nz, r))
        if threads is not None and -(-n // r) <= threads:
            return nz, r
    return None


DIAGONALS = True                  # False: batch_cg_rows never takes its DIA form (the tests)
FULL_BLOCK = True                 # False: nor its full block unless asked (the tests)


def diagonals(indptr, indices, n: int, config: tuple):
    """batch_cg_rows's DIA form for a pattern at rows_config's ``config``: (offsets, slot_pos)
    where the pattern's entries lie on few diagonals -- at most NZ // 2 below the main diagonal
    and NZ // 2 above it, one entry a row on each (2-D and 3-D stencils) -- else None. offsets
    (NZ,) int: column - row of each slot, ascending, 0 at slot NZ // 2 (a slot the pattern does
    not fill: offset 0, no entry); slot_pos (NZ, n) int32: the index of each slot's entry in a
    system's values, -1 where the row has none (a = 0). NumPy pattern in, NumPy out (host)."""
    nz, r = config
    if (nz, r) not in BATCH_DIAGONALS or n == 0:
        return None
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    off = np.asarray(indices, dtype=np.int64) - rows
    d = np.unique(off)
    below, above = d[d < 0], d[d > 0]
    half = nz // 2
    if below.size > half or above.size > half:
        return None
    offsets = np.concatenate([np.zeros(half - below.size, np.int64), below, [0], above,
                              np.zeros(half - above.size, np.int64)])
    slot_of = {int(o): k for k, o in enumerate(offsets) if o != 0}
    slot_of[0] = half
    slots = np.fromiter((slot_of[int(o)] for o in d), np.int64, d.size)[np.searchsorted(d, off)]
    slot_pos = np.full((nz, n), -1, np.int64)
    slot_pos[slots, rows] = np.arange(off.size)
    if (slot_pos >= 0).sum() != off.size:                 # two entries of a row on one diagonal
        return None
    return offsets, slot_pos.astype(np.int32)


def threads(n: int) -> int:
    """batch_cg / batch_bicgstab's block: 256 threads, up to 1,024 for systems of more than
    1,024 rows (4 rows a thread): the rows of a thread are a chain of dependent loads, so a
    large system in few blocks (a block of right-hand sides) wants the threads (H100, 2-D 64^2,
    k = 64: 4.9 ms at 256). The kernel's own register count may allow fewer (the launcher
    takes the smaller)."""
    return min(1024, max(ops.BLOCK, -(-n // (4 * 32)) * 32))


def vector_path(n: int, dtype, method: str = "cg") -> tuple:
    """(``"shared"`` or ``"global"``, dynamic shared bytes) for systems of order n: the
    method's vectors in shared memory when they fit SHARED_MAX, else in global scratch."""
    need = VECTORS[method] * n * np.dtype(dtype).itemsize
    return ("shared", need) if need <= SHARED_MAX else ("global", 0)


def granted_path(kernel, n: int, dtype, method: str) -> tuple:
    """``vector_path``'s (path, shared bytes), with ``kernel`` granted that shared memory; where
    it is not, the vectors go to global memory ("global", 0)."""
    path, shared = vector_path(n, dtype, method)
    try:
        ops.allow_shared(kernel, shared)
    except Exception:                         # not granted
        return "global", 0
    return path, shared


def solve_cg(values, indptr, indices, B, X, info, tol, maxiter: int, dinv=None, stream=None,
             shared_values=False, exps=None, fexps=None):
    """Batched CG on the device, in place: X (nb, n) from its start to the solutions, ``info``
    (nb,) int32 preset by the checks (0: solve; a system of b = 0 must be preset too:
    ``solve_skipping_zero`` does it), and returns (its (nb,) int32, res (nb,) float64: the true
    residual norms, NaN for a skipped system, path: where the vectors lived).

    values (nb, nnz), B, X (nb, n) C-contiguous of one dtype; indptr (n + 1,), indices (nnz,)
    int32; tol (nb,) float64; dinv (nb, n) or None; ``shared_values``: as solve_cg_rows's.
    ``exps`` (nb,) int32 or None: system i is b_i / 2^e_i (dpsolve.batch.row_exponents), its x
    and residual written multiplied back by 2^e_i, the tolerance met by the x written (x rounded
    below the normal range: its true residual decides; past the largest float: info maxiter and
    a NaN residual). ``fexps`` (nb,) int32 or None: system i is A_i / 2^f_i (``a_checks``'; its
    values scaled as they are read), x written times 2^(e_i - f_i), its residual times 2^e_i."""
    return _solve("cg", values, indptr, indices, B, X, info, tol, maxiter, dinv, stream,
                  shared_values, exps, fexps)


SKIP = np.iinfo(np.int32).max     # the preset that keeps a system of b = 0 out of the kernels


def solve_skipping_zero(method, values, indptr, indices, B, X, info, tol, maxiter: int, dinv,
                        zero_b, shared_values=False, exps=None, fexps=None):
    """``solve_<method>`` where the systems of b = 0 (``zero_b``, a mask) are not run but given
    SciPy's answer -- x = 0, info 0, residual 0 -- where the kernels' first step would divide 0
    by 0. ``info``: the other systems' preset codes. Returns (info int64, its, res, path)."""
    import cupy
    code = cupy.where(zero_b, SKIP, info).astype(cupy.int32)
    its, res, path = _solve(method, values, indptr, indices, B, X, code, tol, maxiter, dinv,
                            None, shared_values, exps, fexps)
    X[zero_b] = 0
    return (cupy.where(zero_b, 0, code).astype(cupy.int64), its, cupy.where(zero_b, 0.0, res),
            path)


_DIAGONALS_ARG = np.dtype([("bytes", "<i4", (8,))])     # batch.cu's batch::Diagonals


def solve_cg_rows(values, indptr, indices, B, X, rtol: float, atol: float, maxiter: int,
                  jacobi: bool, config: tuple, stream=None, shared_values=False, dia=None,
                  x0=None, full=None):
    """Batched CG by batch_cg_rows (``config`` = rows_config's (NZ, R)), the checks included
    (a b outside the safe range solved as b / 2^e_i, as dpsolve.batch.row_exponents has it):
    values (nb, nnz), B and X (nb, n: the solutions, written) C-contiguous of one dtype, as they
    come; ``x0`` (nb, n) the start, or None for zeros (x0 may be X: each system's start is read
    before its solution is written); returns (info (nb,) int32 with every system's code, its
    (nb,) int32, res (nb,) float64: the true residual norms, NaN for a bad system, tol (nb,)
    float64, path), all written by the kernel. One launch; waits for nothing. ``shared_values``:
    every system has the values of ``values[0]`` (one matrix, several right-hand sides:
    dpsolve._block). ``dia``: ``diagonals``'s (offsets, slot_pos) of the pattern, slot_pos on the
    device, for the DIA form of the kernel (None: the rows' columns in registers). ``full`` (DIA
    form only): launch the form whose block is the launch bound's threads, so that a thread's
    rows are a compile-time stride apart (None: where the block would be over half that anyway;
    the tests force it either way)."""
    import cupy
    nb, n = (int(s) for s in X.shape)
    dt = np.dtype(X.dtype)
    for name, a in (("values", values), ("B", B), ("X", X), ("x0", X if x0 is None else x0)):
        if np.dtype(a.dtype) != dt or not a.flags.c_contiguous:
            raise ValueError(f"solve_cg_rows: {name} must be C-contiguous {dt}")
    if x0 is not None and x0.shape != X.shape:
        raise ValueError(f"solve_cg_rows: x0 must have X's shape {X.shape}, got {x0.shape}")
    nz, r = config
    if (nz, r) not in BATCH_ROWS or -(-n // r) > BATCH_ROWS[nz, r]:
        raise ValueError(f"solve_cg_rows: no batch_cg_rows kernel for n = {n} at {config}")
    out = cupy.empty(24 * nb, cupy.uint8)                # the kernel writes all of it
    info, its = out[:4 * nb].view(cupy.int32), out[4 * nb:8 * nb].view(cupy.int32)
    res, tol = out[8 * nb:16 * nb].view(cupy.float64), out[16 * nb:].view(cupy.float64)
    entries = (f"rows of <= {nz} entries in registers" if nz else
               "the rows' entries read through L1 at each product, p in shared memory")
    path = (f"one launch, a block per system, {r} row{'s' if r > 1 else ''} a thread, {entries}, "
            f"the checks in the kernel")
    if nb == 0:
        return info, its, res, tol, path
    arg = np.zeros((), _DIAGONALS_ARG)
    if dia is not None:
        offsets, slot_pos = dia
        arg["bytes"][:nz] = np.asarray(offsets) * dt.itemsize
        pad = int(np.abs(offsets).max())
    else:
        slot_pos, pad = ops._NULL, 0
    need = -(-n // r)                                    # threads: r rows each
    block = -(-need // 32) * 32                          # whole warps
    bound = BATCH_ROWS[nz, r]                            # the launch bound's threads
    if dia is None and full:
        raise ValueError("solve_cg_rows: full is the DIA form's (dia must be given)")
    # below half the bound, the rows' own smaller blocks fit more an SM (H100: FULL forced there
    # 1.6-6.6x slower; at 192 threads even; at 256, 1.99 -> 1.71 ms: BENCHMARKS.md)
    full = dia is not None and (FULL_BLOCK and 2 * need > bound if full is None else bool(full))
    span = r * bound if full else n                      # rows p's area holds
    block = bound if full else block
    if dia is not None:
        path = path.replace("registers", "registers (as diagonals"
                            + (f", a full block of {bound} threads)" if full else ")"))
    form = (f"{'true' if jacobi else 'false'}{', true' if dia is not None else ''}"
            f"{', true' if full else ''}")
    kernel = get_kernel("batch", f"batch_cg_rows<{{T}}, {nz}, {r}, {form}>", dt)
    shared = (span + 2 * pad + (n if jacobi else 0)) * dt.itemsize   # p (its pads), D^-1
    ops.allow_shared(kernel, shared)
    launch(kernel, (nb,), (block,),
           (np.int32(nb), np.int32(n), indptr.astype(cupy.int32, copy=False),
            indices.astype(cupy.int32, copy=False), values,
            np.int64(0 if shared_values else values.shape[1]), B,
            ops._NULL if x0 is None else x0, X, np.float64(rtol),
            np.float64(atol), np.int32(maxiter), info, its, res, tol,
            slot_pos, arg[()], np.int32(pad), *(np.float64(v) for v in square_bounds(dt))),
           stream, shared_mem=shared)
    return info, its, res, tol, path


_REDO_PLANS = {}                  # batch_cg_redo's (kernel, grid, block, shared) a (dtype, n, nb)


def _redo_plan(dt, n: int, nb: int):
    """batch_cg_redo's launch for nb systems of order n: its vectors (6 n values) in dynamic
    shared memory at two blocks an SM, else in global scratch at one (``shared`` 0). Kept."""
    key = (dt, n, nb, SHARED_MAX, ops._sm_count())   # (the tests and sanitizer change them)
    if key not in _REDO_PLANS:
        kernel = get_kernel("batch", "batch_cg_redo<{T}>", dt)
        path, shared = granted_path(kernel, n, dt, "redo")
        grid = min(nb, (2 if path == "shared" else 1) * ops._sm_count())
        block = min(threads(n), int(kernel.max_threads_per_block) // 32 * 32)
        _REDO_PLANS[key] = (kernel, grid, block, shared)
    return _REDO_PLANS[key]


def solve_cg_redo(values, indptr, indices, B, X, info, its, res, rtol: float, atol: float,
                  maxiter: int, diag_pos=None, stream=None):
    """After ``solve_cg_rows`` (its info, its and res, and X, updated in place): batch_cg_redo
    solves again, as A_i / 2^f_i, each system batch_cg_rows did not solve (info neither 0 nor
    BAD_INPUT) whose A_i is far from 1 (``a_checks``' f_i != 0), as ``a_checks`` then
    ``solve_cg`` would (``diag_pos``: Jacobi's, as ``a_checks`` takes it, or None); the others
    keep their answers. One launch of a few blocks an SM, whatever nb; waits for nothing.
    values (nb, nnz) and B (nb, n) as solve_cg_rows had them. Returns the path's words."""
    import cupy
    nb, n = (int(s) for s in X.shape)
    dt = np.dtype(X.dtype)
    if nb == 0:
        return ""
    kernel, grid, block, shared = _redo_plan(dt, n, nb)
    scratch = cupy.empty(grid * VECTORS["redo"] * n, dt) if shared == 0 else ops._NULL
    launch(kernel, (grid,), (block,),
           (np.int32(nb), np.int32(n), indptr, indices, values, np.int64(values.shape[1]), B, X,
            ops._NULL if diag_pos is None else diag_pos, np.float64(rtol), np.float64(atol),
            np.int32(maxiter), info, its, res, *(np.float64(v) for v in square_bounds(dt)),
            scratch), stream, shared_mem=shared)
    return ("; a second launch solves again, as A_i / 2^f_i, a system the first did not solve "
            "whose A_i is far from 1")


def solve_bicgstab(values, indptr, indices, B, X, info, tol, maxiter: int, dinv=None,
                   stream=None, shared_values=False, exps=None, fexps=None):
    """Batched BiCGStab on the device, as :func:`solve_cg` (codes -10 and -11 as the host
    reference's, each breakdown confirmed with the accurate inner product)."""
    return _solve("bicgstab", values, indptr, indices, B, X, info, tol, maxiter, dinv, stream,
                  shared_values, exps, fexps)


def _solve(method, values, indptr, indices, B, X, info, tol, maxiter, dinv, stream,
           shared_values=False, exps=None, fexps=None):
    import cupy

    from ..reference._util import breakdown_tol
    nb, n = (int(s) for s in X.shape)
    dt = np.dtype(X.dtype)
    for name, a in (("values", values), ("B", B), ("X", X)):
        if np.dtype(a.dtype) != dt or not a.flags.c_contiguous:
            raise ValueError(f"solve_{method}: {name} must be C-contiguous {dt}")
    if dinv is not None and (np.dtype(dinv.dtype) != dt or dinv.shape != X.shape):
        raise ValueError(f"solve_{method}: dinv must have X's shape and dtype")
    for name, a in (("info", info), ("exps", info if exps is None else exps),
                    ("fexps", info if fexps is None else fexps)):
        if np.dtype(a.dtype) != np.int32 or a.shape != (nb,):
            raise ValueError(f"solve_{method}: {name} must be int32 of shape (nb,)")
    its = cupy.zeros(nb, cupy.int32)
    res = cupy.full(nb, np.nan, cupy.float64)
    if nb == 0:
        return its, res, "none"
    indptr = indptr.astype(cupy.int32, copy=False)
    indices = indices.astype(cupy.int32, copy=False)
    tol = tol.astype(cupy.float64, copy=False)
    dinv = dinv if dinv is not None else ops._NULL
    kernel = get_kernel("batch", f"batch_{method}<{{T}}>", dt)
    path, shared = granted_path(kernel, n, dt, method)
    sms = ops._sm_count()
    grid = min(nb, BLOCKS_PER_SM * sms) if path == "global" else nb
    scratch = (cupy.empty(grid * VECTORS[method] * n, dt) if path == "global" else ops._NULL)
    extra = (np.float64(breakdown_tol(dt)),) if method == "bicgstab" else ()
    block = min(threads(n), int(kernel.max_threads_per_block) // 32 * 32)   # its registers
    launch(kernel, (grid,), (block,),
           (np.int32(nb), np.int32(n), indptr, indices, values,
            np.int64(0 if shared_values else values.shape[1]), B, X, dinv, tol, np.int32(maxiter),
            *extra, info, its, res, ops._NULL if exps is None else exps,
            ops._NULL if fexps is None else fexps, scratch), stream,
           shared_mem=shared)
    return its, res, f"one launch, a block per system, vectors in {path} memory"


def a_checks(values, diag_pos=None, stream=None):
    """A's checks for ``solve_cg`` and ``solve_bicgstab`` in one launch (batch.cu's
    batch_a_checks, a block a system): returns (code (nb,) int32: BAD_INPUT where A_i has a NaN or
    Inf, else ZERO_DIAGONAL where Jacobi finds a zero diagonal entry, or one whose reciprocal is
    past the largest float, else 0; fexps (nb,) int32: A_i is solved as A_i / 2^f_i,
    dpsolve.batch.matrix_shifts' rule; dinv (nb, n): D^-1 of A_i / 2^f_i, or None). ``values``
    (nb, nnz) C-contiguous; ``diag_pos`` (n,) int32 on the device, the position of row r's
    diagonal entry among a system's values (-1: none), for Jacobi, or None."""
    import cupy
    nb, nnz = (int(s) for s in values.shape)
    if not values.flags.c_contiguous:
        raise ValueError("a_checks: values must be C-contiguous")
    n = 0 if diag_pos is None else int(diag_pos.shape[0])
    code = cupy.zeros(nb, cupy.int32)
    fexps = cupy.zeros(nb, cupy.int32)
    dinv = None if diag_pos is None else cupy.empty((nb, n), values.dtype)
    if nb == 0:
        return code, fexps, dinv
    kernel = get_kernel("batch", "batch_a_checks<{T}>", np.dtype(values.dtype))
    launch(kernel, (min(nb, BLOCKS_PER_SM * ops._sm_count()),), (256,),
           (np.int32(nb), np.int32(n), np.int64(nnz), values,
            ops._NULL if diag_pos is None else diag_pos.astype(cupy.int32, copy=False), code,
            fexps, ops._NULL if dinv is None else dinv), stream)
    return code, fexps, dinv
