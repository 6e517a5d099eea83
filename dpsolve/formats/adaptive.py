"""Row bins of the load-balanced CSR SpMV (``format="csr-adaptive"``), computed once per prepared
matrix.

Rows are split by length into three lists (each in increasing row order, so the gathers and the
writes of ``y`` keep their locality):

* **thread-mapped**: length <= ``t_thread``: one thread per row (CSR-scalar's mapping);
* **warp-mapped**: ``t_thread`` < length <= ``t_warp``: one warp per row (CSR-vector's, 32 lanes);
* **block-mapped**: length > ``t_warp``: split into chunks of ``CHUNK`` entries, one block per
  chunk; the block that finishes a row's last chunk sums the row's chunk partials in order
  (deterministic) and writes ``y``, so one very long row does not keep one SM busy alone.

The short rows are thread-mapped where the matrix's columns lie near its diagonal (the mean distance
of an entry from the diagonal, ``spread``, at most ``LOCAL_SPREAD`` columns: the x gathers then hit
in L1 and a thread walking its own row keeps its lines), and otherwise taken by a group of ``group``
lanes (2, 4 or 8: the power of two nearest the short rows' mean length, as CSR-vector's width), so
that their loads coalesce instead of thrashing L1 against the scattered gathers of x.

The thresholds come from the row-length distribution: ``t_thread`` is the 90th percentile of the
lengths, clamped to [4, 32], so the bulk of a regular matrix stays on the cheapest mapping and only
its tail moves; ``t_warp`` is 32 * 32 = 1024 (a warp-mapped row of at most 32 loads per lane).
The measurements behind the rule are in BENCHMARKS.md (issue #7).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cuda import abi
from .csr import CSR

T_WARP = 1024
T_THREAD_RANGE = (4, 32)
CHUNK = abi.DPS_CHUNK  # entries of a block-mapped row per block (16 per thread)
GROUPS = (1, 2, 4, 8)  # lanes per short row: the spmv_csr_adaptive<T, G> the loader compiles
LOCAL_SPREAD = 32768   # columns (256 KB of float64 x): at most this mean |j - i|, one thread per
                       # row


def short_group(mean_short: float, spread: float) -> int:
    """Lanes per short row: 1 where the columns are local (``spread``, the mean |j - i| of the
    entries, at most LOCAL_SPREAD), else the power of two in (2, 4, 8) nearest ``mean_short``."""
    if spread <= LOCAL_SPREAD:
        return 1
    for g in GROUPS[1:]:
        if mean_short <= 1.5 * g:
            return g
    return GROUPS[-1]


def short_stats(csr: CSR, host_lengths, t_thread: int) -> tuple[float, float]:
    """(mean length of the rows <= t_thread, mean |j - i| over the entries) of ``csr``."""
    short = host_lengths[host_lengths <= t_thread]
    mean_short = float(short.mean()) if short.size else 0.0
    if csr.nnz == 0:
        return mean_short, 0.0
    xp = csr.xp
    if xp is np:
        entry_rows = np.repeat(np.arange(csr.n, dtype=np.int64), host_lengths)
    else:   # on the device: one binary search per entry (CuPy's repeat wants host counts)
        entry_rows = xp.searchsorted(csr.indptr, xp.arange(csr.nnz, dtype=csr.indptr.dtype),
                                     side="right") - 1
    spread = float(xp.abs(csr.indices.astype(np.int64) - entry_rows).mean())
    return mean_short, spread


def thresholds(lengths) -> tuple[int, int]:
    """(t_thread, t_warp) for these row lengths (a NumPy array)."""
    if lengths.size == 0:
        return T_THREAD_RANGE[0], T_WARP
    p90 = int(np.percentile(lengths, 90, method="higher"))
    lo, hi = T_THREAD_RANGE
    return min(max(p90, lo), hi), T_WARP


@dataclass
class RowBins:
    short: object      # int32 rows, thread-mapped
    medium: object     # int32 rows, warp-mapped
    long: object       # int32 rows, block-mapped
    t_thread: int
    t_warp: int
    group: int = 1               # lanes per short row (GROUPS; 1 = one thread per row)
    chunk_long: object = None    # per chunk: its row's index in ``long``
    chunk_begin: object = None   # per chunk: its first entry (an offset into indices / data)
    first_chunk: object = None   # per long row: its first chunk (len(long) + 1 entries)
    counters: object = None      # per long row: chunks finished in the current SpMV (reset to 0)
    partials: object = None      # per chunk: its partial sum (the matrix's dtype)
    descriptor: object = None    # the device-driven kernels' view of these arrays (set by
                                 # dpsolve.cuda.device_matrix.adaptive_descriptor,
                                 # on first use)

    @classmethod
    def from_csr(cls, csr: CSR, t_thread: int | None = None, t_warp: int | None = None,
                 group: int | None = None) -> "RowBins":
        """Bins of ``csr``'s rows, as arrays where ``csr`` lives (NumPy or CuPy)."""
        xp = csr.xp
        lengths = xp.diff(csr.indptr)
        host_lengths = lengths.get() if xp is not np else lengths
        tt, tw = thresholds(host_lengths)
        tt = tt if t_thread is None else int(t_thread)
        tw = tw if t_warp is None else int(t_warp)
        if not 1 <= tt <= tw:
            raise ValueError(f"csr-adaptive needs 1 <= t_thread <= t_warp, got {tt}, {tw}")
        g = short_group(*short_stats(csr, host_lengths, tt)) if group is None else int(group)
        if g not in GROUPS:
            raise ValueError(f"csr-adaptive's lanes per short row must be one of {GROUPS}, "
                             f"got {group}")
        rows = xp.arange(csr.n, dtype=np.int32)
        long = rows[lengths > tw]
        # chunks of the block-mapped rows
        nchunks = -(-lengths[long] // CHUNK)                               # per long row
        first = xp.zeros(long.size + 1, dtype=np.int32)
        first[1:] = xp.cumsum(nchunks)
        total = int(first[-1])
        chunk_long = xp.repeat(xp.arange(long.size, dtype=np.int32), nchunks.astype(np.int64))
        within = xp.arange(total, dtype=np.int32) - first[chunk_long]
        chunk_begin = (csr.indptr[long][chunk_long] + within * CHUNK).astype(np.int32)
        return cls(rows[lengths <= tt], rows[(lengths > tt) & (lengths <= tw)], long, tt, tw, g,
                   chunk_long, chunk_begin, first, xp.zeros(long.size, dtype=np.int32),
                   xp.zeros(max(total, 1), dtype=csr.dtype))

    @property
    def nchunks(self) -> int:
        return int(self.chunk_long.size)

    def counts(self) -> tuple[int, int, int]:
        return int(self.short.size), int(self.medium.size), int(self.long.size)
