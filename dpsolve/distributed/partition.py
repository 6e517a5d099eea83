"""Row partitions: which rank owns which rows of a distributed system.

A :class:`Partition` is the list of global row offsets ``offsets[0] = 0 <= offsets[1] <= ... <=
offsets[size] = n``: rank ``r`` owns the contiguous rows ``offsets[r]:offsets[r + 1]`` (possibly
none). It holds no communicator; the same object describes the system on every rank.
"""
from __future__ import annotations

import numbers

import numpy as np


def _count(value, what) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return int(value)


def _integers(values, what: str, min_size: int, expected: str) -> np.ndarray:
    """``values`` as a 1-D integer array of at least ``min_size`` entries, or a ValueError
    naming ``what`` was wrong with it."""
    try:
        raw = np.asarray(values)
    except Exception:
        raise ValueError(f"{what} must be a 1-D sequence of integers, got "
                         f"{type(values).__name__}") from None
    if raw.ndim != 1 or raw.size < min_size:
        raise ValueError(f"{what} must be a 1-D sequence of {expected}, got shape {raw.shape}")
    if raw.dtype.kind not in "iu":
        raise ValueError(f"{what} must be integers, got dtype {raw.dtype}")
    return raw


class Partition:
    """Contiguous row blocks, one per rank, in rank order.

    Attributes: ``offsets`` (int64, length ``size + 1``, read-only), ``n`` (global rows),
    ``size`` (ranks). ``rows(rank)`` is ``(start, stop)``; ``owner(i)`` the rank owning global
    row(s) ``i`` (vectorised). Ranks may own 0 rows.
    """

    __slots__ = ("offsets",)

    def __init__(self, offsets):
        raw = _integers(offsets, "partition offsets", 2, "at least 2 integers (size + 1 of them)")
        off = raw.astype(np.int64)
        if off[0] != 0:
            raise ValueError(f"partition offsets must start at 0, got {int(off[0])}")
        steps = np.diff(off)
        if (steps < 0).any():
            r = int(np.flatnonzero(steps < 0)[0])
            raise ValueError(f"partition offsets must not decrease: rank {r} would own rows "
                             f"{int(off[r])}:{int(off[r + 1])}")
        off.setflags(write=False)
        self.offsets = off

    # ------------------------------------------------------------------ constructors
    @classmethod
    def even(cls, n, size) -> "Partition":
        """``n`` rows over ``size`` ranks as evenly as possible: the first ``n % size`` ranks get
        one row more (PETSc's PETSC_DECIDE split)."""
        n, size = _count(n, "n"), _count(size, "size")
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if size < 1:
            raise ValueError(f"size must be >= 1 rank, got {size}")
        q, r = divmod(n, size)
        sizes = np.full(size, q, dtype=np.int64)
        sizes[:r] += 1
        return cls.from_sizes(sizes)

    @classmethod
    def from_sizes(cls, sizes) -> "Partition":
        """Rank r owns ``sizes[r]`` rows (>= 0), in rank order."""
        s = _integers(sizes, "sizes", 1, "one count per rank")
        if (s < 0).any():
            r = int(np.flatnonzero(s < 0)[0])
            raise ValueError(f"sizes must be >= 0, got {int(s[r])} rows for rank {r}")
        off = np.zeros(s.size + 1, dtype=np.int64)
        np.cumsum(s, out=off[1:])
        return cls(off)

    # ------------------------------------------------------------------ queries
    @property
    def n(self) -> int:
        return int(self.offsets[-1])

    @property
    def size(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def sizes(self) -> np.ndarray:
        """Rows per rank (int64)."""
        return np.diff(self.offsets)

    def rows(self, rank) -> tuple[int, int]:
        """(start, stop) of the global rows ``rank`` owns."""
        rank = _count(rank, "rank")
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is not in this partition of {self.size} rank"
                             f"{'s' if self.size != 1 else ''}")
        return int(self.offsets[rank]), int(self.offsets[rank + 1])

    def owner(self, global_idx):
        """The rank owning each global row index (an int for a scalar, else an int64 array of the
        same shape). An index outside ``0:n`` is a ValueError naming it."""
        idx = np.asarray(global_idx)
        if idx.dtype.kind not in "iu":
            raise ValueError(f"global indices must be integers, got dtype {idx.dtype}")
        if idx.size:
            lo, hi = idx.min(), idx.max()
            if lo < 0 or hi >= self.n:
                bad = int(lo) if lo < 0 else int(hi)
                raise ValueError(f"global index {bad} is outside the partition's rows 0:{self.n}")
        # side="right" minus one: the last rank whose block starts at or before i, which skips
        # ranks owning 0 rows (their start equals the next rank's)
        own = np.searchsorted(self.offsets, idx, side="right") - 1
        return int(own) if np.ndim(own) == 0 else own.astype(np.int64, copy=False)

    # ------------------------------------------------------------------ value semantics
    def __eq__(self, other):
        return isinstance(other, Partition) and np.array_equal(self.offsets, other.offsets)

    def __hash__(self):
        return hash(self.offsets.tobytes())

    def __repr__(self):
        sizes = self.sizes.tolist()
        shown = sizes if len(sizes) <= 8 else sizes[:4] + ["..."] + sizes[-2:]
        return f"Partition(n={self.n}, size={self.size}, rows per rank={shown})"

    def __getstate__(self):
        return self.offsets.tolist()

    def __setstate__(self, state):
        self.__init__(state)
