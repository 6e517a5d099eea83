"""Matrices on the device: one class per SpMV format, plus the user's operator.

Each class holds its arrays and answers what the host wrappers (ops.py) ask of a matrix, so that
they never branch on the format:

* ``format`` (a name of ``dpsolve.formats.FORMATS``, or ``"operator"``), ``n``, ``nnz``,
  ``dtype``, and ``matrix_bytes()``: the bytes of matrix data one SpMV reads;
* ``spmv_launch(grid_for, sm_count)``: its spmv.cu kernel, grid and arguments (x and y follow);
  None for an operator (its ``apply`` runs the user's function);
* ``work``: the threads its row mapping needs (n; n * width for CSR-vector), which sizes the grids
  of the dynamic and persistent kernels;
* ``dynamic_code``: the W template argument of the kernels built on dynamic.cuh's ``for_rows``
  (abi.cuh's DYN_* codes, or the CSR-vector width), and ``dyn_args()``: their matrix arguments;
* ``fused_kernel(base)``: the merge variant's fused SpMV + DOT kernel ``base<T, W>`` (W its
  ``dynamic_code``: the formats with one thread per row), or None where SpMV and DOT cannot share a
  kernel (the merge variant then runs the SpMV, then the DOT); ``merge_args()``: the matrix
  arguments of its merge kernels (the fused ones take (width, indptr, indices, data), as the
  dynamic kernels do); ``spmv2_kernel()``: BiCG's A p and A^H p~ in one kernel where there is no
  fused one (CSR-vector), else None.

A new format is one class here (and its kernels), listed in ``FORMAT_CLASSES``. Nothing here
launches a kernel: ops.launch does (it counts launches and records plans); the grid helpers come in
as arguments (``grid_for``, ``sm_count``), which keeps this module free of the device and of ops.
"""
from __future__ import annotations

import numpy as np

from ..formats import CSR, DEFAULT_MAX_FILL, ELL, RowBins
from . import abi
from ._loader import CSR_VECTOR_WIDTHS, DYN_ADAPTIVE, DYN_CSR_SCALAR, DYN_ELL

_NULL = np.uint64(0)     # a null device pointer, passed by value (8 zero bytes)


def vector_width(mean_row: float) -> int:
    """Lanes per row for CSR-vector: the power of two nearest the mean row length, in [2, 32]."""
    for w in CSR_VECTOR_WIDTHS:
        if mean_row <= w * 1.5:
            return w
    return CSR_VECTOR_WIDTHS[-1]


def adaptive_descriptor(A: "CsrAdaptiveMatrix"):
    """csr-adaptive's row bins as dynamic.cuh's Bins<T> reads them: abi.DPS_BINS_WORDS (11) 64-bit
    words on the device
    (the pointers short, medium, long, chunk_long, chunk_begin, first_chunk, counters, partials;
    then n_short, n_med, n_chunks), built once per prepared matrix and kept with its bins (which
    keep the arrays the pointers name alive)."""
    bins = A.bins
    if bins.descriptor is None:
        import cupy
        ns, nm, _ = bins.counts()
        ptrs = [bins.short, bins.medium, bins.long, bins.chunk_long, bins.chunk_begin,
                bins.first_chunk, bins.counters, bins.partials]
        words = [a.data.ptr if a.size else 0 for a in ptrs] + [ns, nm, bins.nchunks]
        assert len(words) == abi.DPS_BINS_WORDS
        bins.descriptor = cupy.asarray(np.array(words, dtype=np.uint64))
    return bins.descriptor


class DeviceMatrix:
    """A matrix prepared on the device in one SpMV format: the base of the format classes.

    ``DeviceMatrix.build(csr, fmt)`` makes the class of ``fmt``. ``csr``, ``ell``, ``width`` and
    ``bins`` are None / 0 where a format has none, so every matrix answers them.
    """
    format = ""
    fusable = False          # has the merge variant's fused SpMV + DOT kernels (a thread per row:
                             # _loader.FUSED_CODES)
    csr: CSR | None = None
    ell: ELL | None = None
    width = 0                # CSR-vector lanes per row
    bins: RowBins | None = None   # csr-adaptive's row bins

    def __init__(self, n: int, nnz: int, dtype):
        self.n, self.nnz, self.dtype = n, nnz, np.dtype(dtype)

    @classmethod
    def build(cls, csr: CSR, fmt: str, max_fill: float = DEFAULT_MAX_FILL) -> "DeviceMatrix":
        """The matrix of ``csr`` (copied to the device) in format ``fmt`` (see ``build``)."""
        return build(csr, fmt, max_fill)

    def __repr__(self):
        return f"<{type(self).__name__} {self.format} n={self.n} nnz={self.nnz} {self.dtype}>"

    @property
    def work(self) -> int:
        """Threads the row mapping needs: one per row."""
        return self.n

    @property
    def dynamic_code(self) -> int:
        raise NotImplementedError

    def matrix_bytes(self) -> int:
        raise NotImplementedError

    def spmv_launch(self, grid_for, sm_count):
        """(spmv.cu expression with ``{T}``, blocks, arguments before x and y) of y = A x;
        ``grid_for(work_items)`` and ``sm_count()`` are ops' grid helpers. None: no kernel."""
        raise NotImplementedError

    def dyn_args(self) -> tuple:
        """(ELL width or 0, indptr or null, indices, data, csr-adaptive's bin descriptor or null),
        as the dynamic chains and the persistent kernels take them."""
        raise NotImplementedError

    def merge_args(self) -> tuple:
        """The matrix's arguments of its merge kernels, after n: (width, indptr or null, indices,
        data) for the fused kernels; (indptr, indices, data) for CSR-vector's spmv2 kernel."""
        raise NotImplementedError

    def fused_kernel(self, base: str) -> str | None:
        """The expression of the merge variant's fused SpMV + DOT kernel ``base`` for this row
        mapping (``base<T, W>``, W the dynamic code), or None: the SpMV and the DOT run as two
        kernels."""
        return f"{base}<{{T}}, {self.dynamic_code}>" if self.fusable else None

    def spmv2_kernel(self) -> str | None:
        """bicg_merge.cu's expression of A p and A^H p~ in one kernel (without the DOT), for a
        format with no fused kernel; None: two SpMVs."""
        return None


class _CsrMatrix(DeviceMatrix):
    """The formats over CSR arrays."""

    def __init__(self, csr: CSR):
        super().__init__(csr.n, csr.nnz, csr.dtype)
        self.csr = csr

    @classmethod
    def from_csr(cls, csr: CSR, max_fill: float = DEFAULT_MAX_FILL) -> "_CsrMatrix":
        return cls(csr)

    def matrix_bytes(self) -> int:
        return self.nnz * (self.dtype.itemsize + 4) + (self.n + 1) * 4

    def merge_args(self) -> tuple:
        c = self.csr
        return (c.indptr, c.indices, c.data)

    def dyn_args(self) -> tuple:
        c = self.csr
        return 0, c.indptr, c.indices, c.data, _NULL


class CsrScalarMatrix(_CsrMatrix):
    """CSR-scalar: one thread per row."""
    format = "csr-scalar"
    fusable = True
    dynamic_code = DYN_CSR_SCALAR

    def spmv_launch(self, grid_for, sm_count):
        c = self.csr
        return ("spmv_csr_scalar<{T}>", grid_for(self.n),
                (np.int32(self.n), c.indptr, c.indices, c.data))

    def merge_args(self) -> tuple:
        c = self.csr
        return (np.int32(0), c.indptr, c.indices, c.data)


class CsrVectorMatrix(_CsrMatrix):
    """CSR-vector: a group of ``width`` lanes per row (by default the power of two nearest the
    mean row length). No fused SpMV + DOT: a group, not a thread, owns a row."""
    format = "csr-vector"

    def __init__(self, csr: CSR, width: int | None = None):
        super().__init__(csr)
        self.width = vector_width(csr.nnz / max(csr.n, 1)) if width is None else int(width)

    @property
    def work(self) -> int:
        return self.n * self.width

    @property
    def dynamic_code(self) -> int:
        return self.width

    def spmv_launch(self, grid_for, sm_count):
        c = self.csr
        return (f"spmv_csr_vector<{{T}}, {self.width}>", grid_for(self.work),
                (np.int32(self.n), c.indptr, c.indices, c.data))

    def spmv2_kernel(self) -> str:
        return f"bicg_spmv2_vector<{{T}}, {self.width}>"


class CsrAdaptiveMatrix(_CsrMatrix):
    """csr-adaptive: CSR with row bins (dpsolve/formats/adaptive.py), three row mappings in one
    kernel. No fused SpMV + DOT."""
    format = "csr-adaptive"
    dynamic_code = DYN_ADAPTIVE

    def __init__(self, csr: CSR, bins: RowBins | None = None):
        super().__init__(csr)
        self.bins = RowBins.from_csr(csr) if bins is None else bins

    def matrix_bytes(self) -> int:
        return super().matrix_bytes() + 4 * self.n       # the binned row numbers

    def spmv_launch(self, grid_for, sm_count):
        c, bins = self.csr, self.bins
        ns, nm, _ = bins.counts()
        nc = bins.nchunks
        b_short = grid_for(ns * bins.group) if ns else 0   # `group` lanes per row
        b_med = grid_for(nm * 32) if nm else 0             # a warp per row
        b_long = min(nc, 32 * sm_count())                  # a block per chunk, grid-strided
        return (f"spmv_csr_adaptive<{{T}}, {bins.group}>", b_short + b_med + b_long,
                (np.int32(ns), bins.short, np.int32(nm), bins.medium, np.int32(nc), bins.long,
                 bins.chunk_long, bins.chunk_begin, bins.first_chunk, bins.counters,
                 bins.partials, np.int32(b_short), np.int32(b_med), c.indptr, c.indices, c.data))

    def dyn_args(self) -> tuple:
        c = self.csr
        return 0, c.indptr, c.indices, c.data, adaptive_descriptor(self)


class EllMatrix(DeviceMatrix):
    """ELL (column-major, padded): one thread per row."""
    format = "ell"
    fusable = True
    dynamic_code = DYN_ELL

    def __init__(self, ell: ELL):
        super().__init__(ell.n, ell.nnz, ell.dtype)
        self.ell = ell

    @classmethod
    def from_csr(cls, csr: CSR, max_fill: float = DEFAULT_MAX_FILL) -> "EllMatrix":
        return cls(ELL.from_csr(csr, max_fill))

    def matrix_bytes(self) -> int:
        return self.ell.width * self.n * (self.dtype.itemsize + 4)

    def spmv_launch(self, grid_for, sm_count):
        e = self.ell
        return ("spmv_ell<{T}>", grid_for(self.n),
                (np.int32(self.n), np.int32(e.width), e.indices, e.data))

    def merge_args(self) -> tuple:
        e = self.ell
        return (np.int32(e.width), _NULL, e.indices, e.data)

    def dyn_args(self) -> tuple:
        e = self.ell
        return e.width, _NULL, e.indices, e.data, _NULL


class OperatorMatrix(DeviceMatrix):
    """A, A^H or M given as an operator (anything with ``matvec``): ``spmv`` calls the user's
    Python function between dpsolve's kernels (a host-driven variant calls it every iteration).

    ``on_device`` (set per solve): the function takes and returns CuPy arrays (the caller passed
    CuPy arrays). Otherwise x is copied to the host, the function applied to a NumPy array, and
    the result copied back, on the solve's stream. On the device, SciPy's public ``matvec`` would
    convert its argument with NumPy, so the operator's own implementation (``_matvec``: the user's
    function for every SciPy LinearOperator) is called instead.

    It has no device arrays: no kernel takes it (the device-driven variants refuse operators).
    """
    format = "operator"

    def __init__(self, op, name: str, n: int, dtype, what: str, on_device: bool = False):
        super().__init__(n, 0, dtype)
        self.op, self.name, self.what = op, name, what
        self.on_device = on_device

    @property
    def fn(self):
        if self.on_device and hasattr(self.op, "_" + self.name):
            return getattr(self.op, "_" + self.name)
        return getattr(self.op, self.name)

    def matrix_bytes(self) -> int:
        return 0

    def spmv_launch(self, grid_for, sm_count):
        return None

    def _no_kernel(self):
        return TypeError(f"{self.what} is an operator (a Python function): no device kernel "
                         "takes it as a matrix")

    @property
    def dynamic_code(self) -> int:
        raise self._no_kernel()

    def dyn_args(self) -> tuple:
        raise self._no_kernel()

    def merge_args(self) -> tuple:
        raise self._no_kernel()

    def apply(self, x, y, stream) -> None:
        """y = op(x) on ``stream``: a CuPy function runs with the solve's stream as CuPy's
        current one, so its kernels and the copy into y are ordered with the solve's kernels.
        The true residual's product is queued after the loop's ``with stream`` has closed, where
        the caller's stream was current: the copy into y could race the norm that reads it
        (BiCGStab with a cupyx operator reached maxiter on `cuda` and `merge` in 1-2 of 3 runs
        under ``pytest -n 4``; with this, 3 of 3 passed, H100, 2026-11-27)."""
        import contextlib
        with stream if stream is not None else contextlib.nullcontext():
            self._apply(x, y, stream)

    def _apply(self, x, y, stream) -> None:
        import cupy
        out = self.fn(x if self.on_device else x.get(stream=stream))
        shape = getattr(out, "shape", None)
        if shape not in ((self.n,), (self.n, 1)):
            raise ValueError(f"{self.what} returned an array of shape {shape}, expected "
                             f"({self.n},) or ({self.n}, 1)")
        if isinstance(out, cupy.ndarray):
            cupy.copyto(y, out.reshape(self.n), casting="same_kind")
        else:
            out = np.asarray(out).reshape(self.n)
            if not np.can_cast(out.dtype, y.dtype, "same_kind"):
                raise TypeError(f"{self.what} returned dtype {out.dtype}, which does not cast "
                                f"to the system's {y.dtype}")
            y.set(np.ascontiguousarray(out, dtype=y.dtype), stream=stream)


# format name -> class: every name of dpsolve.formats.FORMATS
FORMAT_CLASSES = {cls.format: cls for cls in
                  (CsrScalarMatrix, CsrVectorMatrix, EllMatrix, CsrAdaptiveMatrix)}

# formats whose SpMV cannot be fused with a DOT in one kernel (a group of lanes owns a row; a
# Python operator; csr-adaptive's three mappings): the merge variant runs the SpMV, then the DOT's
# stage 1
UNFUSED_SPMV = tuple(cls.format for cls in (*FORMAT_CLASSES.values(), OperatorMatrix)
                     if not cls.fusable)


def build(csr: CSR, fmt: str, max_fill: float = DEFAULT_MAX_FILL) -> DeviceMatrix:
    """``csr`` on the device in format ``fmt`` (ELL refuses more than ``max_fill`` x padding)."""
    cls = FORMAT_CLASSES.get(fmt)
    if cls is None:
        raise ValueError(f"unknown format {fmt!r}")
    return cls.from_csr(csr.to_device(), max_fill)
