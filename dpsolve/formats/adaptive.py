"""Row bins of the load-balanced CSR SpMV (``format="csr-adaptive"``), computed once per prepared
matrix.

Rows are split by length into three lists (each in increasing row order, so the gathers and the
writes of ``y`` keep their locality):

* **thread-mapped**: length <= ``t_thread``: one thread per row (CSR-scalar's mapping);
* **warp-mapped**: ``t_thread`` < length <= ``t_warp``: one warp per row (CSR-vector's, 32 lanes);
* **block-mapped**: length > ``t_warp``: one block of DPS_BLOCK threads per row.

The thresholds come from the row-length distribution: ``t_thread`` is the 90th percentile of the
lengths, clamped to [4, 32], so the bulk of a regular matrix stays on the cheapest mapping and only
its tail moves; ``t_warp`` is 32 * 32 = 1024 (a warp-mapped row of at most 32 loads per lane).
The measurements behind the rule are in BENCHMARKS.md (issue #7).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .csr import CSR

T_WARP = 1024
T_THREAD_RANGE = (4, 32)


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

    @classmethod
    def from_csr(cls, csr: CSR, t_thread: int | None = None, t_warp: int | None = None) -> "RowBins":
        """Bins of ``csr``'s rows, as arrays where ``csr`` lives (NumPy or CuPy)."""
        xp = csr.xp
        lengths = xp.diff(csr.indptr)
        host_lengths = lengths.get() if xp is not np else lengths
        tt, tw = thresholds(host_lengths)
        tt = tt if t_thread is None else int(t_thread)
        tw = tw if t_warp is None else int(t_warp)
        if not 1 <= tt <= tw:
            raise ValueError(f"csr-adaptive needs 1 <= t_thread <= t_warp, got {tt}, {tw}")
        rows = xp.arange(csr.n, dtype=np.int32)
        return cls(rows[lengths <= tt], rows[(lengths > tt) & (lengths <= tw)], rows[lengths > tw],
                   tt, tw)

    def counts(self) -> tuple[int, int, int]:
        return int(self.short.size), int(self.medium.size), int(self.long.size)
