"""A's diagonal, for every preconditioner that divides by it: Jacobi, Chebyshev and AMG's
smoothers, on the host and on the GPU, and the distributed Jacobi. Its reciprocal in the working
dtype, and one set of words for refusing it (``refusal``), so that the same bad diagonal reads
the same whichever preconditioner or variant meets it. Before, AMG's GPU set-up called its
levels and its problems by other words than the host's, and M="chebyshev" on the GPU was refused
as "AMG".
"""
from __future__ import annotations

import numpy as np

PROBLEMS = ("zero", "nonfinite", "negative", "reciprocal")


def reciprocal(d, dtype):
    """(1 / d in ``dtype``, the rows where that is not finite), with no NumPy warning: a nonzero
    d_i whose reciprocal is past the largest float (a float32 |d_i| of 2^-128 or less) is one.
    Before, D^-1 held Inf there: the solve broke down (info -10) and NumPy's overflow warning
    escaped."""
    d = np.asarray(d)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        inv = (1.0 / d).astype(dtype)
    return inv, np.flatnonzero(~np.isfinite(inv))


def rows_text(idx, label="row", start=0) -> str:
    """"row 3", "rows 1, 4, 9", "rows 0, 10, ..., 90 and 14 more": ten at most, and how many
    more (``start`` added to each: a rank's global rows)."""
    idx = np.asarray(idx)
    shown = ", ".join(str(int(i) + start) for i in idx[:10])
    more = f" and {idx.size - 10} more" if idx.size > 10 else ""
    return f"{label}{'s' if idx.size > 1 else ''} {shown}{more}"


def refusal(problem: str, idx, who: str, where: str = "A", dtype=None, label="row",
            start=0) -> str:
    """The ValueError's text for a diagonal that ``who`` ("Jacobi preconditioner", "AMG",
    "M='chebyshev'") cannot take, in the rows ``idx`` of ``where`` ("A", an AMG level's coarse
    matrix): ``problem`` one of PROBLEMS (a zero or missing entry; NaN or Inf in the row's
    entries; a negative entry, or a complex one with a non-positive real part; one whose
    reciprocal is past the largest float of ``dtype``)."""
    idx = np.asarray(idx)
    k = int(idx.size)
    entries = f"entr{'y' if k == 1 else 'ies'}"
    rows = rows_text(idx, label, start)
    if problem == "zero":
        return (f"{who} needs a nonzero diagonal (a missing entry is 0), but {where} has {k} "
                f"zero diagonal {entries} ({rows})")
    if problem == "nonfinite":
        return (f"{who} needs finite values, but {where} has NaN or Inf entries in {k} "
                f"{label}{'s' if k > 1 else ''} ({rows})")
    if problem == "negative":
        what = ("negative diagonal " + entries if np.dtype(dtype).kind != "c"
                else f"diagonal {entries} with a non-positive real part")
        return f"{who} needs a positive diagonal, but {where} has {k} {what} ({rows})"
    if problem == "reciprocal":
        name = np.finfo(dtype).dtype.name
        return (f"{who} needs 1 / A[i, i] within {name}'s range, but {where} has {k} diagonal "
                f"{entries} whose reciprocal is past the largest {name} ({rows})")
    raise ValueError(f"problem must be one of {', '.join(PROBLEMS)}, got {problem!r}")


def inverse_diagonal(d, dtype, who="Jacobi preconditioner", label="row", start=0):
    """(D^-1, None) from A's diagonal ``d``, or (None, ``refusal``'s text naming the rows where
    it cannot be formed: a zero entry, a NaN or Inf, or one whose reciprocal is past the largest
    float of ``dtype``). ``label`` and ``start``: how rows are named and numbered (a distributed
    rank's global rows)."""
    d = np.asarray(d)
    for problem, idx in (("nonfinite", np.flatnonzero(~np.isfinite(d))),
                         ("zero", np.flatnonzero(d == 0))):
        if idx.size:
            return None, refusal(problem, idx, who, dtype=dtype, label=label, start=start)
    inv, big = reciprocal(d, dtype)
    if big.size:
        return None, refusal("reciprocal", big, who, dtype=dtype, label=label, start=start)
    return inv, None
