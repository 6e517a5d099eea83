"""Jacobi: M = D^-1, the inverse of A's diagonal. Pointwise, so every variant runs it, fused
into its kernels (the paper's preconditioner, and dpsolve's only one before this package).

Made from ``M="jacobi"`` (D from A), or from what the caller passes as the inverse diagonal: a
1-D array, or a diagonal sparse matrix (``dpsolve.precond.make``).
"""
from __future__ import annotations

import numpy as np

from .base import DeviceFace, Preconditioner


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


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
    """"row 3", "rows 1, 4, ..." (at most ten; ``start`` added to each: a rank's global rows)."""
    shown = ", ".join(str(int(i) + start) for i in idx[:10])
    return f"{label}{'s' if idx.size > 1 else ''} {shown}{', ...' if idx.size > 10 else ''}"


def inverse_diagonal(d, dtype, label="row", start=0):
    """(D^-1, None) for Jacobi from A's diagonal ``d``, or (None, the ValueError's text naming
    the rows where it cannot be formed: a zero entry, or one whose reciprocal is past the largest
    float of ``dtype``). ``label`` and ``start``: how rows are named and numbered (a distributed
    rank's global rows)."""
    def rows(idx):
        return rows_text(idx, label, start)

    def entries(k):
        return f"entr{'y' if k == 1 else 'ies'}"
    zero = np.flatnonzero(np.asarray(d) == 0)
    if zero.size:
        return None, (f"Jacobi preconditioner needs a nonzero diagonal, but A has {zero.size} "
                      f"zero diagonal {entries(zero.size)} ({rows(zero)})")
    inv, big = reciprocal(d, dtype)
    if big.size:
        name = np.finfo(dtype).dtype.name
        return None, (f"Jacobi preconditioner needs 1 / A[i, i] within {name}'s range, but A "
                      f"has {big.size} diagonal {entries(big.size)} whose reciprocal is past "
                      f"the largest {name} ({rows(big)})")
    return inv, None


class Jacobi(Preconditioner):
    """z = D^-1 r. ``inv_diag`` (bound): D^-1 as a host array in the working dtype."""

    name = "jacobi"
    pointwise = True

    def __init__(self):
        self.inv_diag = None

    @classmethod
    def from_inverse_diagonal(cls, inv_diag) -> "Jacobi":
        """A bound Jacobi from a checked host array holding D^-1 (already in the working dtype)."""
        out = cls()
        out.inv_diag = inv_diag
        out.bound = True
        return out

    def bind(self, csr, n, dtype, *, snapshot=False):
        if csr is None:
            raise ValueError("M='jacobi' needs A as a matrix, not a LinearOperator")
        inv, why = inverse_diagonal(_host(csr.diagonal()), dtype)
        if why:
            raise ValueError(why)
        return self.from_inverse_diagonal(inv)

    def host(self):
        # closures over named arrays: a bound ``tmp.__mul__`` of an unnamed array lets NumPy's
        # temporary elision reuse (overwrite) that array's buffer for the product
        inv = np.asarray(self.inv_diag)
        inv_conj = np.conj(inv)
        return (lambda r: inv * r), (lambda r: inv_conj * r)

    def apply_host(self, b):
        return np.asarray(self.inv_diag) * b

    def device(self, state):
        import cupy
        with state.stream:
            inv = cupy.asarray(self.inv_diag, dtype=state.dtype)
        return PointwiseFace(inv_diag=inv)

    def cache_arrays(self):
        return [self.inv_diag]


class PointwiseFace(DeviceFace):
    """The faces of a pointwise preconditioner on a GPU state: its ``PrecondArgs`` (the device
    face, fused by merge, dynamic and persistent) and precond.cu's kernels (the stream face)."""

    def __init__(self, **fields):
        from ..cuda import abi
        self.fields = fields                   # keeps the device arrays alive
        self.args = abi.pack("PrecondArgs", **fields)

    def apply(self, ex, r, z):
        ex.pointwise(self.args, r, z)

    def apply_adjoint(self, ex, r, z):
        ex.pointwise(self.args, r, z, adjoint=True)
