"""Test problems: generators, Matrix Market reading, the shared test matrices, the paper's set-up.

Generators write the CSR arrays of the stencil (the Kronecker sums of 1-D stencils) directly into
arrays of the final size, CHUNK_ROWS rows at a time: no dense, Kronecker or sum intermediate, so
the paper's A252 (252^3 = 16,003,008 rows) is generated in seconds in little more than its own
memory, and Ctrl-C stops a build within one chunk:

    laplace_1d(n), laplace_2d(nx[, ny]), laplace_3d(nx[, ny, nz])    SPD
    convdiff_2d(nx[, ny], peclet=..., angle=...)                      nonsymmetric (bicg/bicgstab)

``generate("laplace3d-64")`` builds a problem from its name (see :func:`generate`), after a size
guard (:func:`check_size`) that refuses at once what would not fit in the memory available.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import io
import os
import re
import shutil
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ._errors import DpsolveError

ROOT = Path(__file__).resolve().parents[1]       # the checkout, for an editable install


# --------------------------------------------------------------------------- generators
CHUNK_ROWS = 1 << 18      # rows built per step: no single NumPy call runs long, so Ctrl-C is seen


def _between_chunks():
    """Called after every chunk of rows (a test hook; the Python step itself lets a pending
    signal, Ctrl-C, be raised here rather than after the whole matrix)."""


def _index_dtype(n: int, nnz: int):
    return np.int32 if max(n, nnz) <= np.iinfo(np.int32).max else np.int64


def _stencil(dims, diag, lower, upper, dtype):
    """(dims, n, strides, offs, vals) of a (2 d + 1)-point stencil on a grid of ``dims`` (x
    fastest): ``offs`` the neighbours as (dimension, step) in increasing column order (down in
    the slowest dimension first, the diagonal as (None, 0)), ``vals`` their values in ``dtype``."""
    dims = [int(d) for d in dims]
    n = int(np.prod(dims, dtype=object))
    strides = [int(np.prod(dims[:k], dtype=object)) for k in range(len(dims))]
    offs = ([(k, -1) for k in reversed(range(len(dims)))] + [(None, 0)]
            + [(k, +1) for k in range(len(dims))])
    vals = np.array([lower[k] if s < 0 else upper[k] if s > 0 else diag for k, s in offs],
                    dtype=dtype)
    return dims, n, strides, offs, vals


def _stencil_chunk(rows, dims, strides, offs):
    """(cols, keep) of the stencil's entries in ``rows`` (int64): one column per neighbour of
    ``offs``, and whether that neighbour is inside the grid (Dirichlet boundary)."""
    cols = np.empty((rows.size, len(offs)), dtype=np.int64)
    keep = np.ones((rows.size, len(offs)), dtype=bool)
    for j, (k, s) in enumerate(offs):
        cols[:, j] = rows if k is None else rows + s * strides[k]
        if k is not None:
            coord = (rows // strides[k]) % dims[k]
            keep[:, j] = coord > 0 if s < 0 else coord < dims[k] - 1
    return cols, keep


def grid_rows(dims, diag, lower, upper, dtype, start: int, stop: int) -> sp.csr_array:
    """Rows ``start:stop`` of the stencil matrix :func:`_grid_csr` builds (the same entries, in
    the same order, bit for bit), with global column indices: shape (stop - start, n). Built
    CHUNK_ROWS rows at a time and never the whole matrix, so each rank of a distributed solve
    generates only its own rows (``dpsolve.distributed.DistributedMatrix.laplace3d``)."""
    dims, n, strides, offs, vals = _stencil(dims, diag, lower, upper, dtype)
    if not 0 <= start <= stop <= n:
        raise ValueError(f"rows {start}:{stop} are not within the {n} rows of the grid")
    datas, cols_all, counts = [], [], []
    for r0 in range(start, stop, CHUNK_ROWS):
        rows = np.arange(r0, min(stop, r0 + CHUNK_ROWS), dtype=np.int64)
        cols, keep = _stencil_chunk(rows, dims, strides, offs)
        cols_all.append(cols[keep])
        datas.append(np.broadcast_to(vals, keep.shape)[keep])
        counts.append(keep.sum(axis=1))
        _between_chunks()
    nrows = stop - start
    cols = np.concatenate(cols_all) if cols_all else np.empty(0, np.int64)
    data = np.concatenate(datas) if datas else np.empty(0, vals.dtype)
    idx = _index_dtype(n, cols.size)
    indptr = np.zeros(nrows + 1, dtype=idx)
    if counts:
        np.cumsum(np.concatenate(counts), out=indptr[1:])
    A = sp.csr_array((data, cols.astype(idx, copy=False), indptr), shape=(nrows, n), copy=False)
    A.has_sorted_indices = True
    A.has_canonical_format = True
    return A


def _grid_csr(dims, diag, lower, upper, dtype) -> sp.csr_array:
    """The CSR matrix of a (2 d + 1)-point stencil on a grid of ``dims`` (x fastest), Dirichlet
    boundary: ``diag`` on the diagonal, ``lower[k]`` / ``upper[k]`` for the neighbour one step
    down / up in dimension k. Built directly, CHUNK_ROWS rows at a time, into arrays of the
    final size: no Kronecker or sum intermediates, columns sorted, no duplicates."""
    dims, n, strides, offs, vals = _stencil(dims, diag, lower, upper, dtype)
    nnz = n + sum(2 * (d - 1) * (n // d) for d in dims)
    idx = _index_dtype(n, nnz)
    data = np.empty(nnz, dtype=dtype)
    indices = np.empty(nnz, dtype=idx)
    indptr = np.empty(n + 1, dtype=idx)
    indptr[0] = 0
    pos = 0
    for r0 in range(0, n, CHUNK_ROWS):
        rows = np.arange(r0, min(n, r0 + CHUNK_ROWS), dtype=np.int64)
        cols, keep = _stencil_chunk(rows, dims, strides, offs)
        m = int(np.count_nonzero(keep))
        indices[pos:pos + m] = cols[keep]
        data[pos:pos + m] = np.broadcast_to(vals, keep.shape)[keep]
        indptr[rows + 1] = pos + np.cumsum(keep.sum(axis=1))
        pos += m
        _between_chunks()
    assert pos == nnz
    A = sp.csr_array((data, indices, indptr), shape=(n, n), copy=False)
    A.has_sorted_indices = True
    A.has_canonical_format = True
    return A


def laplace_1d(n: int, dtype=np.float64) -> sp.csr_array:
    """Tridiagonal [-1, 2, -1] of order n (n >= 1)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return _grid_csr([n], 2, [-1], [-1], dtype)


def laplace_2d(nx: int, ny: int | None = None, dtype=np.float64) -> sp.csr_array:
    """5-point Laplacian on an nx x ny grid (Dirichlet boundary), n = nx*ny: the Kronecker sum
    I (x) T_nx + T_ny (x) I of 1-D Laplacians (built directly)."""
    ny = nx if ny is None else ny
    if nx < 1 or ny < 1:
        raise ValueError(f"grid sizes must be >= 1, got {nx} x {ny}")
    return _grid_csr([nx, ny], 4, [-1, -1], [-1, -1], dtype)


def laplace_3d(nx: int, ny: int | None = None, nz: int | None = None,
               dtype=np.float64) -> sp.csr_array:
    """7-point Laplacian on an nx x ny x nz grid (Dirichlet boundary), n = nx*ny*nz.

    laplace_3d(252) is the paper's A252: n = 16,003,008, nnz = 111,640,032.
    """
    ny = nx if ny is None else ny
    nz = nx if nz is None else nz
    if nx < 1 or ny < 1 or nz < 1:
        raise ValueError(f"grid sizes must be >= 1, got {nx} x {ny} x {nz}")
    return _grid_csr([nx, ny, nz], 6, [-1, -1, -1], [-1, -1, -1], dtype)


def convdiff_2d(nx: int, ny: int | None = None, peclet: float = 100.0, angle: float = np.pi / 4,
                dtype=np.float64) -> sp.csr_array:
    """Nonsymmetric 2-D convection-diffusion: -Lap(u) + w . grad(u) on the unit square, Dirichlet
    boundary, 5-point diffusion and first-order upwind convection, scaled by h^2 (h = 1/(nx+1)).

    The wind is w = peclet * (cos(angle), sin(angle)) with unit diffusion, so ``peclet`` is the
    global Peclet number |w| L / eps (L = 1, eps = 1); the mesh Peclet number is peclet * h / 2.
    Upwinding keeps the matrix an M-matrix (nonsingular, positive diagonal, nonpositive
    off-diagonals) at every Peclet number; peclet = 0 gives laplace_2d. n = nx*ny, 5 entries a row.

    The matrix is laplace_2d + I (x) U_x + U_y (x) I, U_c = |c| times the upwind difference for
    velocity c (backward for c >= 0, forward for c < 0), summed in that order in ``dtype``.
    """
    ny = nx if ny is None else ny
    if nx < 1 or ny < 1:
        raise ValueError(f"grid sizes must be >= 1, got {nx} x {ny}")
    if not np.isfinite(peclet) or peclet < 0:
        raise ValueError(f"peclet must be a finite number >= 0, got {peclet}")
    h = 1.0 / (nx + 1)
    cx, cy = peclet * h * np.cos(angle), peclet * h * np.sin(angle)
    one, four = np.array(1, dtype), np.array(4, dtype)
    ax, ay = np.array(abs(cx), dtype), np.array(abs(cy), dtype)
    diag = (four + ax) + ay
    lower = [-one - ax if cx >= 0 else -one, -one - ay if cy >= 0 else -one]
    upper = [-one if cx >= 0 else -one - ax, -one if cy >= 0 else -one - ay]
    return _grid_csr([nx, ny], diag, lower, upper, dtype)


_GEN = re.compile(r"^(laplace1d|laplace2d|laplace3d|convdiff2d)-(\d+)(?:-pe([0-9.]+))?$")


def power_law(n: int = 10**6, mean: float = 16.0, heavy=(10**4, 3 * 10**4, 10**5), seed: int = 0,
              dtype=np.float64) -> sp.csr_array:
    """An irregular test matrix for load-balanced SpMV: row lengths drawn from a Zipf-like
    (power-law) distribution with about ``mean`` entries a row, plus a few rows of the lengths in
    ``heavy`` (capped at n); random columns, a dominant diagonal (so it is also solvable)."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.zipf(2.2, n), 200).astype(np.int64)
    lengths = np.maximum(1, np.round(lengths * (mean - 1) / lengths.mean())).astype(np.int64)
    rows_heavy = rng.choice(n, size=min(len(heavy), n), replace=False)
    lengths[rows_heavy] = np.minimum(np.asarray(heavy[:len(rows_heavy)]), n)
    rows = np.repeat(np.arange(n), lengths)
    cols = rng.integers(0, n, rows.size)
    vals = rng.uniform(-1.0, 0.0, rows.size)
    A = sp.coo_array((vals, (rows, cols)), shape=(n, n)).tocsr()
    A.sum_duplicates()
    d = np.asarray(abs(A).sum(axis=1)).ravel() + 1.0
    return (A + sp.diags_array(d)).tocsr().astype(dtype)


def banded(n: int, entries: int = 201, dtype=np.float64) -> sp.csr_array:
    """A symmetric positive definite banded matrix with ``entries`` (odd) entries a row (long,
    regular rows; crankseg_2 has ~200 a row)."""
    half = entries // 2
    offs = list(range(-half, half + 1))
    diags = [np.full(n - abs(k), -1.0 / (1 + abs(k))) for k in offs]
    diags[half] = np.full(n, 2.0 * sum(1.0 / (1 + abs(k)) for k in offs if k))
    return sp.diags_array(diags, offsets=offs, format="csr").astype(dtype)


def is_generated(name: str) -> bool:
    return bool(_GEN.match(name))


def _parse_generated(name: str):
    """``laplace3d-64`` -> ("laplace3d", 64, None); a clear error for what is not one."""
    if name.upper() == "A252":
        name = "laplace3d-252"
    m = _GEN.match(name)
    if not m:
        raise ValueError(f"unknown generated problem {name!r}; expected laplace1d-N, laplace2d-N, "
                         f"laplace3d-N or convdiff2d-N[-peP]")
    kind, digits, pe = m.group(1), m.group(2), m.group(3)
    if pe is not None and kind != "convdiff2d":
        raise ValueError(f"{name!r}: only convdiff2d takes a Peclet number")
    if pe is not None:
        try:
            pe = float(pe)
        except ValueError:
            raise ValueError(f"{name!r}: the Peclet number {pe!r} is not a number") from None
    if len(digits.lstrip("0")) > 30:            # beyond any index (and int()'s digit limit)
        raise ValueError(f"{name[:40]}...: a grid size of {len(digits)} digits is far more than a "
                         f"sparse matrix can index (at most 2^63 - 1 entries)")
    return kind, int(digits), pe


def generated_size(name: str) -> tuple[int, int]:
    """(n, nnz) of a generated problem, from its formula, without building it."""
    kind, k, _ = _parse_generated(name)
    dims = {"laplace1d": 1, "laplace2d": 2, "laplace3d": 3, "convdiff2d": 2}[kind]
    n = k ** dims
    return n, (n + dims * 2 * (k - 1) * (n // k) if k else 0)


# --------------------------------------------------------------------------- the size guard
SIZE_GUARD_ENV = "DPSOLVE_NO_SIZE_GUARD"
CSR_COPIES = 4            # the matrix as built, the solver's checked copy, A^H (host), slack
VECTORS = 16              # b, x*, x and the solver's work vectors, with slack
BASE_BYTES = 200 * 2**20  # the interpreter, NumPy and SciPy


class ProblemTooLargeError(DpsolveError, MemoryError):
    """A generated problem whose estimated memory exceeds what this machine has available."""


def memory_estimate(n: int, nnz: int, dtype="float64") -> int:
    """Bytes that building and solving a system of order n with nnz entries takes, roughly and
    on the safe side (measured: laplace3d-160 float64 on the host variant peaked at 1.5 GB for
    an estimate of 2.1 GB): CSR_COPIES copies of the CSR matrix and VECTORS vectors."""
    item = np.dtype(dtype).itemsize
    idx = np.dtype(_index_dtype(n, nnz)).itemsize
    csr = nnz * (item + idx) + (n + 1) * idx
    return CSR_COPIES * csr + VECTORS * n * item + BASE_BYTES


def available_memory() -> int | None:
    """Bytes of memory available to this process: MemAvailable (Linux), else the physical
    memory, capped by a cgroup (v2) limit where there is one; None where it cannot be told."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            avail = min(avail, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return avail


def human_bytes(nbytes) -> str:
    """3 significant digits in decimal units: 27.9 GB, 512 MB."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB", "EB"):
        if nbytes < 999.5 or unit == "EB":
            break
        nbytes /= 1000
    return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.3g} {unit}"


def check_size(name: str, dtype="float64", *, force=False, override="force=True") -> None:
    """Refuse (ProblemTooLargeError, at once) a generated problem whose :func:`memory_estimate`
    exceeds :func:`available_memory`, naming both and the way past: ``override`` (the command
    line's --force) or DPSOLVE_NO_SIZE_GUARD=1. A problem too large to index at all is a
    ValueError even then."""
    n, nnz = generated_size(name)
    if nnz > np.iinfo(np.int64).max or n > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: n = {n:,} rows and nnz = {nnz:,} entries are more than a "
                         f"sparse matrix can index (at most 2^63 - 1)")
    _guard(f"{name}: ", n, nnz, dtype, force, override, "build and solve")


def _guard(what: str, n: int, nnz: int, dtype, force: bool, override: str, action: str) -> None:
    """The size guard itself: ProblemTooLargeError ``"{what}n = ..., nnz = ... needs about ...
    of memory to {action}, more than ... available here; pass {override} ..."`` unless ``force``
    or DPSOLVE_NO_SIZE_GUARD=1."""
    if force or os.environ.get(SIZE_GUARD_ENV, "") not in ("", "0"):
        return
    need, avail = memory_estimate(n, nnz, dtype), available_memory()
    if avail is not None and need > avail:
        raise ProblemTooLargeError(
            f"{what}n = {n:,}, nnz = {nnz:,} ({np.dtype(dtype).name}) needs about "
            f"{human_bytes(need)} of memory to {action}, more than the "
            f"{human_bytes(avail)} available here; pass {override} (or set "
            f"{SIZE_GUARD_ENV}=1) to try anyway")


def generate(name: str, dtype=np.float64, *, force: bool = False) -> sp.csr_array:
    """Build a generated problem from its name: ``laplace1d-N``, ``laplace2d-N`` (N^2 rows),
    ``laplace3d-N`` (N^3 rows; ``A252`` is ``laplace3d-252``), ``convdiff2d-N[-peP]`` (N^2 rows,
    Peclet number P, default 100).

    First :func:`check_size`: a problem whose estimated memory exceeds what is available is
    refused at once (``force=True`` or DPSOLVE_NO_SIZE_GUARD=1 builds it anyway). The build goes
    CHUNK_ROWS rows at a time, so Ctrl-C stops it within one chunk."""
    check_size(name, dtype, force=force)
    kind, size, pe = _parse_generated(name)
    if kind == "laplace1d":
        return laplace_1d(size, dtype)
    if kind == "laplace2d":
        return laplace_2d(size, dtype=dtype)
    if kind == "laplace3d":
        return laplace_3d(size, dtype=dtype)
    return convdiff_2d(size, peclet=100.0 if pe is None else pe, dtype=dtype)


def paper_rhs(A, dtype=None):
    """The paper's set-up: x* = ones, b = A x*, x0 = 0. Returns (b, x_star)."""
    dtype = dtype or A.dtype
    x_star = np.ones(A.shape[0], dtype=dtype)
    return (A @ x_star).astype(dtype), x_star


# --------------------------------------------------------------------------- reading
# A Matrix Market file is read strictly: the header by the code below, then every entry line
# checked (_CheckedEntries) before the parser (SciPy's mmread, or fast_matrix_market) sees it.
# Both parsers read what they can of a malformed number and skip the rest of the line (1.0d0 is
# 1, 1,5 is 1, 0x1p3 is 0, an extra column is dropped), and a NUL byte crashes SciPy's; so what
# reaches them is known to be well formed. The size guard meets the header's n and nnz before any
# entry is read.
MTX_CHUNK = 2 << 20          # bytes of entry lines checked at a time (in the cache, fastest)
MTX_MAX_LINE = 1 << 16       # no entry line is longer: a file whose line is, is not Matrix Market
_TARBALL = (".tar.gz", ".tgz", ".tar")


class MatrixFileError(DpsolveError, ValueError):
    """A matrix file that cannot be read. The message names the file (and the line, where there
    is one; for a .tar.gz, the line of its .mtx member), as do ``path`` and ``line``."""

    def __init__(self, path, message, line=None, member=False):
        self.path, self.line, self.detail, self.member = str(path), line, message, member
        where = (" (its .mtx member)" if member else "") + (f", line {line}" if line else "")
        super().__init__(f"{path}{where}: {message}")


@dataclass(frozen=True)
class MtxHeader:
    """What the first lines of a Matrix Market file declare."""
    format: str              # "coordinate" or "array"
    field: str               # "real", "integer", "complex" or "pattern" ("double" is "real")
    symmetry: str            # "general", "symmetric", "skew-symmetric" or "hermitian"
    rows: int
    cols: int
    entries: int             # the entry lines that follow (for an array, from its shape)
    lines: int               # the header's lines, the size line included

    @property
    def names(self) -> tuple:
        """The fields of an entry line: ("row", "column", "value"), ("value",) ..."""
        values = {"pattern": (), "complex": ("real part", "imaginary part")}.get(self.field,
                                                                                ("value",))
        return (("row", "column") if self.format == "coordinate" else ()) + values

    @property
    def indices(self) -> int:
        return 2 if self.format == "coordinate" else 0

    @property
    def stored(self) -> int:
        """Entries once a symmetric file's other triangle is added (at most)."""
        if self.format == "array":
            return self.rows * self.cols
        return self.entries * (1 if self.symmetry == "general" else 2)

    @property
    def dtype(self) -> str:
        return own_dtype(self.field)


_FORMATS = ("coordinate", "array")
_FIELDS = ("real", "double", "integer", "complex", "pattern")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")
_INDEX = re.compile(rb"[0-9]+")
_INTEGER = re.compile(rb"[+-]?[0-9]+")
_REAL = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BLANKS = re.compile(rb"[ \t\r]+")


def _shown(token: bytes) -> str:
    text = token[:40].decode("ascii", "backslashreplace")
    return f"'{text}{'...' if len(token) > 40 else ''}'"


def _fields(line: bytes) -> list:
    """An entry line's fields: separated by blanks (space, tab, carriage return) alone."""
    line = line.strip(b" \t\r\n")
    return _BLANKS.split(line) if line else []


def _read_header(f, path, member) -> tuple[MtxHeader, bytes]:
    """The header of the Matrix Market stream ``f`` (checked) and its bytes as read."""
    raw = []

    def refuse(message):
        raise MatrixFileError(path, message, len(raw), member)

    def next_line():
        line = f.readline(MTX_MAX_LINE)
        while line.startswith(b"%") and not line.endswith(b"\n") and \
                (part := f.readline(MTX_MAX_LINE)):
            line += part                                # a long comment: all of it
        raw.append(line)
        if b"\0" in line:
            refuse("a NUL byte (a binary or corrupt file)")
        return line

    words = next_line().split()
    if not words or words[0].lower() != b"%%matrixmarket":
        refuse("not a Matrix Market file (the first line is not a %%MatrixMarket banner)")
    if len(words) != 5:
        refuse("the banner should be '%%MatrixMarket matrix FORMAT FIELD SYMMETRY', got "
               + _shown(b" ".join(words)))
    obj, fmt, field, symmetry = (w.decode("ascii", "replace").lower() for w in words[1:])
    for what, word, known in (("format", fmt, _FORMATS), ("field", field, _FIELDS),
                              ("symmetry", symmetry, _SYMMETRIES)):
        if obj == "matrix" and word not in known:
            refuse(f"unknown {what} '{word}' (one of {', '.join(known)})")
    if obj != "matrix":
        refuse(f"a {obj} file, not a matrix")
    if fmt == "array" and field == "pattern":
        refuse("an array file cannot be a pattern")
    line = next_line()
    while line and (line.startswith(b"%") or not line.strip()):
        line = next_line()
    if not line:
        refuse("truncated file: no size line")
    size, want = line.split(), (3 if fmt == "coordinate" else 2)
    if len(size) != want or not all(_INDEX.fullmatch(w) for w in size):
        refuse(f"the size line should be '{' '.join(('rows', 'columns', 'entries')[:want])}' "
               f"(whole numbers), got {_shown(line.strip())}")
    if max(len(w) for w in size) > 30:
        refuse("its size is more than a sparse matrix can index (at most 2^63 - 1)")
    rows, cols = int(size[0]), int(size[1])
    if symmetry != "general" and rows != cols:
        refuse(f"a {symmetry} matrix must be square, not {rows:,} x {cols:,}")
    if fmt == "coordinate":
        entries = int(size[2])
    elif symmetry == "general":
        entries = rows * cols
    else:                       # an array's lower triangle, without the diagonal if skew
        entries = rows * (rows + (-1 if symmetry == "skew-symmetric" else 1)) // 2
    if fmt == "coordinate" and entries > rows * cols:
        refuse(f"the header declares {entries:,} entries, more than a {rows:,} x {cols:,} "
               f"matrix holds")
    header = MtxHeader(fmt, "real" if field == "double" else field, symmetry, rows, cols,
                       entries, len(raw))
    if max(rows, cols, header.stored) > np.iinfo(np.int64).max:
        refuse("its size is more than a sparse matrix can index (at most 2^63 - 1)")
    return header, b"".join(raw)


def _scan_lines(chunk: bytes, header: MtxHeader) -> tuple[int, int, tuple | None]:
    """(entries, lines, problem) of ``chunk`` (whole lines), each line checked in full; problem
    is (the line within the chunk, counted from 1, what is wrong) for the first line that is
    neither blank nor an entry, else None. The exact check, the reference for
    :func:`_count_entries`."""
    lines = chunk.split(b"\n")
    entries = 0
    for k, line in enumerate(lines, start=1):
        problem = _line_problem(line, header)
        if problem:
            return entries, k - 1, (k, problem)
        entries += problem is None
    return entries, len(lines) - 1, None


def _line_problem(line: bytes, header: MtxHeader) -> str | None:
    """What is wrong with an entry line: None when it is an entry, "" when it is blank."""
    if b"\0" in line:
        return "a NUL byte (a binary or corrupt file)"
    fields, names = _fields(line), header.names
    if not fields:
        return ""
    if len(fields) != len(names):
        return (f"expected {len(names)} field{'s' if len(names) > 1 else ''} "
                f"({', '.join(names)}), found {len(fields)}")
    for name, tok in zip(names, fields):
        if name in ("row", "column"):
            if not _INDEX.fullmatch(tok):
                return f"the {name} index {_shown(tok)} is not a positive integer"
        elif header.field == "integer":
            if not _INTEGER.fullmatch(tok):
                return f"{_shown(tok)} is not an integer"
        elif not _REAL.fullmatch(tok):
            try:
                finite = np.isfinite(float(tok))
            except ValueError:
                finite = True
            return f"{_shown(tok)} is not {'a number' if finite else 'finite'}"
        elif not np.isfinite(float(tok)):
            return f"{_shown(tok)} is not finite (beyond the range of float64)"
    return None


# The shape of a chunk, one byte for one (bytes.translate): '0' a digit, 'S' a sign, 'P' a
# point, 'X' an exponent letter, ' ' a blank (space, tab, carriage return), '\n', and '?' for
# anything else, which no entry line holds.
_SHAPE = bytearray(b"?" * 256)
for _chars, _code in ((b"0123456789", b"0"), (b"+-", b"S"), (b".", b"P"), (b"eE", b"X"),
                      (b" \t\r", b" "), (b"\n", b"\n")):
    for _c in _chars:
        _SHAPE[_c] = _code[0]
_SHAPE = bytes(_SHAPE)
_DIGIT, _SIGN, _POINT, _EXP = b"0SPX"


def _ranker(mask):
    """rank(positions): for each position, how many of ``mask[:position + 1]`` are True. Over
    the mask's bits, 64 to a word (NumPy 2), else a binary search over its positions."""
    if not hasattr(np, "bitwise_count"):
        where = np.flatnonzero(mask)
        return lambda at: np.searchsorted(where, at, "right")
    words = np.packbits(mask, bitorder="little")
    words = np.concatenate((words, np.zeros(8 - words.size % 8, np.uint8))).view("<u8")
    before = np.concatenate(([0], np.cumsum(np.bitwise_count(words), dtype=np.int64)))

    def rank(at):
        w, bit = at >> 6, (at & 63).astype(np.uint64)
        upto = words[w] & ((np.uint64(2) << bit) - np.uint64(1))    # bits 0..bit of the word
        return before[w] + np.bitwise_count(upto)
    return rank


def _count_entries(chunk: bytes, header: MtxHeader) -> tuple[int, int] | None:
    """(entries, lines) of ``chunk`` (whole lines) when a vectorised check finds every line
    blank or well formed; None where it may not be (then :func:`_scan_lines` says where and
    why). It may refuse what is valid, never pass what is not (a test holds it to that).

    Only digits, signs, points, e, E and blanks may stand in the chunk; each non-blank line has
    as many fields as the header says; an index field is digits alone; and each sign, point
    and exponent letter is where a number may have it: a sign at the start of a field or after
    the exponent letter, before a digit (or a point); a point next to a digit, at most one and
    before the exponent; an exponent letter after the mantissa's digits, before the exponent's.
    """
    shape = (b"\n" + chunk + b"\n").translate(_SHAPE)     # a blank each side of every field
    if b"?" in shape:
        return None
    a = np.frombuffer(shape, np.uint8)
    blank = a <= 32
    starts = np.zeros(a.size, bool)                         # the first byte of each field
    np.greater(blank[:-1], blank[1:], out=starts[1:])
    fields_to = _ranker(starts)                             # fields up to a position
    newlines = np.flatnonzero(a == 10)
    per_line = np.diff(fields_to(newlines))
    k = len(header.names)
    if not np.all((per_line == k) | (per_line == 0)):
        return None
    counts = int(np.count_nonzero(per_line)), newlines.size - 2
    at = np.flatnonzero(a > _DIGIT)                         # signs, points, exponent letters
    if not at.size:
        return counts
    field = fields_to(at)                                   # the field's ordinal, from 1
    if np.any((field - 1) % k < header.indices):
        return None
    c, before, after = a[at], a[at - 1], a[at + 1]
    sign, point, exp = c == _SIGN, c == _POINT, c == _EXP
    digit_after = after == _DIGIT
    if header.field == "integer":
        return None if np.any(~sign | (before > 32) | ~digit_after) else counts
    bad = sign & ~(((before <= 32) & (digit_after | (after == _POINT)))
                   | ((before == _EXP) & digit_after))
    bad |= point & ~((before == _DIGIT) | digit_after)
    mantissa = (before == _DIGIT) | ((before == _POINT) & (a[at - 2] == _DIGIT))
    bad |= exp & ~(mantissa & (digit_after | (after == _SIGN)))
    # two of {point, exponent letter} in one field: only a point, then the exponent
    same = np.diff(field[~sign]) == 0
    kind = c[~sign]
    if np.any(bad) or np.any(same & ~((kind[:-1] == _POINT) & (kind[1:] == _EXP))):
        return None
    return counts


def _check_chunk(chunk: bytes | None, header: MtxHeader) -> tuple[int, int, tuple | None]:
    """(entries, lines, problem) of a chunk of whole lines, as :func:`_scan_lines` gives them;
    None stands for a line too long to be an entry."""
    if chunk is None:
        return 0, 0, (1, f"a line longer than {MTX_MAX_LINE:,} bytes (not Matrix Market)")
    counted = _count_entries(chunk, header)
    return _scan_lines(chunk, header) if counted is None else (*counted, None)


def _in_order(pool, fn, items, ahead: int):
    """(item, fn(item)) for each of ``items`` in order, fn computed in ``pool`` at most
    ``ahead`` items ahead of what is taken."""
    pending = collections.deque()
    for item in items:
        pending.append((item, pool.submit(fn, item)))
        if len(pending) > ahead:
            item, done = pending.popleft()
            yield item, done.result()
    for item, done in pending:
        yield item, done.result()


class _CheckedEntries(io.RawIOBase):
    """A Matrix Market stream as its parser reads it: the header (read and checked first), then
    the entry lines, about MTX_CHUNK bytes at a time, each chunk checked whole before any of it
    is handed on (:func:`_check_chunk`, in a pool of threads a few chunks ahead of the parser),
    and their number checked against the header's. An error is a MatrixFileError naming the
    file and the line. ``check_all()`` checks them all without handing any on."""

    def __init__(self, f, path, member=False):
        self._f, self._path, self._member = f, path, member
        self._chunks = self._checked()          # started on the first read (close() needs it)
        self.header, head = _read_header(f, path, member)
        self._buf, self._pos = memoryview(head), 0
        self._lines, self._entries = self.header.lines, 0

    def readable(self):
        return True

    def readinto(self, b):
        while self._pos >= len(self._buf):
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._buf, self._pos = memoryview(chunk), 0
        n = min(len(b), len(self._buf) - self._pos)
        b[:n] = self._buf[self._pos:self._pos + n]
        self._pos += n
        return n

    def check_all(self) -> MtxHeader:
        for _ in self._chunks:
            pass
        return self.header

    def close(self):
        self._chunks.close()
        super().close()

    def _raw(self):
        """The entry lines, whole lines about MTX_CHUNK bytes at a time (the last may lack its
        newline); None for a line longer than MTX_MAX_LINE."""
        carry = b""
        while data := self._f.read(MTX_CHUNK):
            data = carry + data
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
            carry = data[cut:]
            if len(carry) > MTX_MAX_LINE:
                yield None
                return
        if carry:
            yield carry

    def _checked(self):
        h, workers = self.header, min(8, os.cpu_count() or 1)
        check = functools.partial(_check_chunk, header=h)
        with ThreadPoolExecutor(workers) as pool:
            for chunk, (entries, lines, problem) in _in_order(pool, check, self._raw(), workers):
                if problem:
                    raise MatrixFileError(self._path, problem[1], self._lines + problem[0],
                                          self._member)
                if self._entries + entries > h.entries:
                    self._too_many(chunk)
                self._entries += entries
                self._lines += lines
                yield chunk
        if self._entries < h.entries:
            raise MatrixFileError(self._path, f"truncated file: the header declares "
                                  f"{h.entries:,} entries, the file holds {self._entries:,}",
                                  member=self._member)

    def _too_many(self, chunk):
        n = self._entries
        for k, line in enumerate(chunk.split(b"\n"), start=self._lines + 1):
            n += bool(_fields(line))
            if n > self.header.entries:
                raise MatrixFileError(self._path, f"more entries than the {self.header.entries:,}"
                                      f" the header declares", k, self._member)


@contextlib.contextmanager
def _mtx_stream(path: Path):
    """(binary stream, member) of the Matrix Market text at ``path``: the file, a .gz or .bz2
    decompressed, or the .mtx member of a SuiteSparse tarball. A damaged container, found now or
    while the stream is read, is a MatrixFileError naming the file."""
    import bz2
    import gzip
    import zlib
    member = path.name.endswith(_TARBALL)
    opener = {".gz": gzip.open, ".bz2": bz2.open}.get(path.suffix, open)
    damaged = (EOFError, zlib.error) + ((OSError,) if opener is bz2.open else ())
    try:
        if member:
            with tarfile.open(path, "r:*") as tf, tf.extractfile(_mtx_member(tf, path)) as f:
                yield f, True
        else:
            with opener(path, "rb") as f:
                yield f, False
    except gzip.BadGzipFile as e:
        head = re.search(r"\((b['\"].*)\)$", str(e))
        raise MatrixFileError(path, "not a gzip file"
                              + (f" (it starts with {head.group(1)})" if head else "")) from None
    except damaged as e:
        what = "archive" if member else "compressed file"
        raise MatrixFileError(path, f"the {what} is cut short or corrupt ({e})") from None
    except tarfile.TarError:
        raise MatrixFileError(path, "not a tar archive (or a corrupt one)") from None


def _mtx_member(tf, tarball: Path, name: str | None = None):
    """The matrix of a SuiteSparse tarball: the member ``<name>.mtx`` (``name`` from the
    tarball's own), or its only ``.mtx``."""
    name = name or tarball.name.split(".")[0]
    members = [m for m in tf.getmembers() if m.isfile() and m.name.endswith(".mtx")]
    pick = [m for m in members if Path(m.name).name == f"{name}.mtx"]
    if not pick and len(members) == 1:
        pick = members
    if not pick:
        found = ", ".join(m.name for m in members) or "no .mtx file"
        raise MatrixFileError(tarball, f"holds no {name}.mtx (found: {found})")
    return pick[0]


def extract_mtx(tarball, dest, name: str | None = None, *, check: bool = False) -> Path:
    """Extract the matrix of a SuiteSparse ``<name>.tar.gz`` to the file ``dest``.

    The collection's tarballs hold ``<name>/<name>.mtx`` and sometimes auxiliary files
    (``<name>_b.mtx``, coordinates...): the member ``<name>.mtx`` is taken, or the only ``.mtx``.
    ``dest`` is written through a temporary file beside it and renamed, so it is either complete
    or absent; with ``check``, only once :func:`check_matrix_file` passed it (a MatrixFileError,
    naming the temporary file, otherwise).
    """
    tarball, dest = Path(tarball), Path(dest)
    with tarfile.open(tarball, "r:*") as tf:
        pick = _mtx_member(tf, tarball, name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        try:
            with os.fdopen(fd, "wb") as out, tf.extractfile(pick) as src:
                shutil.copyfileobj(src, out, 1 << 20)
            if check:
                check_matrix_file(tmp)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return dest


_LINE = re.compile(r"^\s*line\s+(\d+)\s*:\s*(.*)$", re.IGNORECASE | re.DOTALL)


def _reader_message(text: str) -> tuple[int | None, str]:
    """The Matrix Market reader's "Line 4: Invalid floating-point value." as (4, "invalid
    floating-point value"); (None, text) where it names no line."""
    text = " ".join(str(text).split())
    line = None
    m = _LINE.match(text)
    if m:
        line, text = int(m.group(1)), m.group(2)
    text = text.rstrip(".")
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        text = text[0].lower() + text[1:]
    return line, text or "unreadable"


def _existing(path) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no matrix file at {path}")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not a matrix file")
    return path


def _parse(stream):
    """fast_matrix_market's mmread where it is installed, else SciPy's (the same C++ reader)."""
    try:
        import fast_matrix_market as fmm
    except ImportError:
        import inspect

        import scipy.io
        # SciPy 1.18 warns that mmread's default return type changes; ask for arrays where it can
        kw = ({"spmatrix": False} if "spmatrix" in inspect.signature(scipy.io.mmread).parameters
              else {})
        return scipy.io.mmread(stream, **kw)
    return fmm.mmread(stream)


def read_matrix(path, *, force: bool = False) -> sp.csr_array:
    """Read a .mtx or .mtx.gz file (or the matrix of a SuiteSparse .tar.gz) as CSR.

    Strictly: the header first, whose n and nnz meet the size guard (ProblemTooLargeError
    where the matrix would not fit in the memory available; ``force=True`` or
    DPSOLVE_NO_SIZE_GUARD=1 reads it anyway) before any entry is read; then every entry line is
    checked before the parser (fast_matrix_market when installed, else scipy.io.mmread) sees it.
    What is not a number, a value that is not finite, a wrong number of fields, a NUL byte, a
    damaged .gz or tarball: a :class:`MatrixFileError` naming the file and the line.
    """
    path = _existing(path)
    with _mtx_stream(path) as (f, member), contextlib.closing(_CheckedEntries(f, path, member)) \
            as entries:
        h = entries.header
        _guard(f"{path}: the header declares ", max(h.rows, h.cols), h.stored, h.dtype, force,
               "--force (force=True from Python)", "read and solve")
        try:
            if member or path.suffix in (".gz", ".bz2"):
                m = _parse(entries)
            else:                   # checked first, then read by the parser itself (faster)
                entries.check_all()
                m = _parse(str(path))
        except MatrixFileError:
            raise
        except (ValueError, IndexError, OverflowError) as e:
            line, msg = _reader_message(e)
            raise MatrixFileError(path, msg, line, member) from None
    m = sp.coo_array(m) if sp.issparse(m) else sp.coo_array(np.asarray(m))
    if not np.all(np.isfinite(m.data)):         # a number too large for float64 (1e999)
        with _mtx_stream(path) as (f, member):
            h = _read_header(f, path, member)[0]
            _, _, problem = _scan_lines(f.read(), h)
        line, msg = problem or (None, "an entry is not finite")
        raise MatrixFileError(path, msg, line and h.lines + line, member)
    return sp.csr_array(m)


def check_matrix_file(path) -> MtxHeader:
    """Check a Matrix Market file (.mtx, .mtx.gz or a SuiteSparse .tar.gz) as :func:`read_matrix`
    does, line by line and in little memory, without building the matrix; its header, or a
    MatrixFileError naming the file and line (as read_matrix's). A value beyond float64's range
    passes here and fails read_matrix."""
    with _mtx_stream(_existing(path)) as (f, member), \
            contextlib.closing(_CheckedEntries(f, path, member)) as entries:
        return entries.check_all()


def mtx_field(path) -> str | None:
    """The field of a Matrix Market file's banner ("real", "complex", "integer" or "pattern"),
    from its first line (of the .mtx member for a .tar.gz); None where it cannot be told."""
    import gzip
    path = Path(path)
    try:
        if path.name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(path, "r:*") as tf:
                m = next((m for m in tf if m.isfile() and m.name.endswith(".mtx")), None)
                if m is None:
                    return None
                with tf.extractfile(m) as f:
                    head = f.readline(1024).decode("ascii", "replace")
        else:
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(path, "rb") as f:
                head = f.readline(1024).decode("ascii", "replace")
    except (OSError, EOFError, tarfile.TarError):
        return None
    words = head.lower().split()
    if len(words) >= 4 and words[0] == "%%matrixmarket":
        return words[3]
    return None


def own_dtype(field: str | None) -> str:
    """The dtype a matrix is solved in unless told otherwise: complex128 for a complex file,
    float64 for everything else."""
    return "complex128" if field == "complex" else "float64"


def check_dtype_keeps(A_is_complex: bool, dtype, what: str, option: str) -> None:
    """Refuse a real dtype for a complex matrix (it would discard the imaginary part)."""
    if A_is_complex and np.dtype(dtype).kind != "c":
        raise ValueError(f"{what} is a complex matrix: {option} {np.dtype(dtype).name} would "
                         f"discard its imaginary part (use complex128 or complex64)")


def hermitian_defect(A) -> float:
    """max|A - A^H| / max|A| of a sparse or dense matrix (0.0 for a Hermitian one, also for a
    zero matrix): one transpose and one subtraction, O(nnz). CG needs a Hermitian (symmetric)
    matrix; the command line warns and the study skips CG where this exceeds HERMITIAN_TOL."""
    m = sp.csr_array(A)
    scale = float(abs(m).max()) if m.nnz else 0.0
    if scale == 0.0 or not np.isfinite(scale):
        return 0.0 if scale == 0.0 else float("nan")
    d = m - m.conj().T
    return float(abs(d).max()) / scale if d.nnz else 0.0


HERMITIAN_TOL = 1e-10       # relative: a file written with 16 digits keeps symmetry to ~1e-16


def matrix_name(path) -> str:
    """``dir/bcsstk16.mtx.gz`` -> ``bcsstk16``."""
    name = Path(path).name
    for ext in (".mtx.gz", ".mtx", ".tar.gz", ".tgz"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


# --------------------------------------------------------------------------- shared matrices
def shared_matrix_dir() -> Path | None:
    """The real test matrices: a folder named by DPSOLVE_SHARED_MATRICES, else ``.matrices/`` in
    the checkout (the git-ignored copy carried to a GPU machine), else ``../shared/matrices``
    beside the checkout; the same two relative to the current directory for a non-editable
    install. None when none of them holds a ``*.mtx.gz``. A DPSOLVE_SHARED_MATRICES that names
    no folder, or one without a ``*.mtx.gz``, is an error (ValueError), not a silent fallback."""
    env = os.environ.get("DPSOLVE_SHARED_MATRICES", "")
    if env:
        d = Path(env).expanduser()
        if not d.is_dir():
            raise ValueError(f"DPSOLVE_SHARED_MATRICES={env}: no such folder")
        if not any(d.glob("*.mtx.gz")):
            raise ValueError(f"DPSOLVE_SHARED_MATRICES={env}: the folder holds no *.mtx.gz file")
        return d
    cands = []
    for base in dict.fromkeys((ROOT, Path.cwd().resolve())):
        cands += [base / ".matrices", base.parent / "shared" / "matrices"]
    for cand in cands:
        if cand and Path(cand).is_dir() and any(Path(cand).glob("*.mtx.gz")):
            return Path(cand)
    return None


def _readme_kinds(directory: Path) -> dict:
    """name -> kind, from the ``| name | n | nnz | nnz/row | kind | ...`` table of README.md."""
    readme = directory / "README.md"
    if not readme.is_file():
        return {}
    kinds, col = {}, None
    for line in readme.read_text(errors="replace").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not line.lstrip().startswith("|"):
            col = None if not line.strip() else col
            continue
        if "kind" in cells and cells[0] == "name":
            col = cells.index("kind")
        elif col is not None and col < len(cells) and not set(cells[0]) <= set("-: "):
            kinds[cells[0]] = cells[col]
    return kinds


def _header_says_spd(path: Path) -> bool:
    """Without a README: a real symmetric matrix whose diagonal is all positive (a cheap
    necessary condition; CG reports non-convergence or breakdown where it is not enough)."""
    import gzip
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            head = f.readline().lower().split()
    except OSError:
        return False
    if len(head) < 5 or head[3] not in ("real", "integer") or head[4] != "symmetric":
        return False
    A = read_matrix(path)
    return bool((A.diagonal() > 0).all())


def shared_spd_matrices(directory=None) -> list[Path]:
    """The SPD matrices of the shared folder, smallest nnz first: those whose kind in the folder's
    README.md starts with "SPD" (without a README: real symmetric with a positive diagonal)."""
    directory = shared_matrix_dir() if directory is None else Path(directory)
    if directory is None:
        return []
    files = sorted(directory.glob("*.mtx.gz"))
    kinds = _readme_kinds(directory)
    if kinds:
        spd = [f for f in files if kinds.get(matrix_name(f), "").upper().startswith("SPD")]
    else:
        spd = [f for f in files if _header_says_spd(f)]
    return sorted(spd, key=_nnz_hint)


def _nnz_hint(path: Path):
    """The entry count of a Matrix Market header (orders files by size without reading them)."""
    import gzip
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            for line in f:
                if not line.startswith("%"):
                    return (int(line.split()[2]), path.name)
    except (OSError, ValueError, IndexError):
        pass
    return (0, path.name)
