"""Sparse formats: plain containers over NumPy (host) or CuPy (device) arrays.

* :class:`CSR` - sorted, de-duplicated, checked compressed sparse rows (int32 indices).
* :class:`ELL` - column-major padded ELLPACK, so that a warp's loads coalesce.

The SpMV *kernels* that read them are ``csr-scalar``, ``csr-vector`` and ``csr-adaptive`` (over
:class:`CSR`; the last with :class:`RowBins`) and ``ell`` (over :class:`ELL`).
"""
from __future__ import annotations

from .._errors import FormatError
from .adaptive import RowBins
from .csr import CSR, to_csr
from .ell import DEFAULT_MAX_FILL, ELL

FORMATS = ("csr-scalar", "csr-vector", "ell", "csr-adaptive")


def row_stats(csr: CSR, adjoint: bool = False) -> dict:
    """Row-length statistics the format choice is made from (computed where ``csr`` lives).
    ``adjoint`` (a method that runs A^H too, in A's format: BiCG): "max" and "ell_fill" are
    those of whichever of A and A^H has the longer row, so that a format picked from them
    takes both (A^H's mean is A's)."""
    xp = csr.xp
    n = csr.n
    mean = csr.nnz / n if n else 0.0
    mx = csr.max_row if csr.max_row is not None else (int(xp.diff(csr.indptr).max()) if n else 0)
    if adjoint and csr.nnz:
        mx = max(mx, csr.max_column())
    return {"n": n, "nnz": csr.nnz, "mean": mean, "max": mx,
            "ell_fill": (n * mx / csr.nnz) if csr.nnz else 1.0}


def choose_format(csr: CSR, requested: str = "auto", allowed=FORMATS,
                  adjoint: bool = False) -> str:
    """Resolve ``format=``. Explicit names are returned as they are; ``auto`` picks from row stats
    among ``allowed`` (the variant's formats), A^H's rows counted too where the method runs A^H
    (``adjoint``: ``row_stats``).

    ``auto`` rule where the measured rule (dpsolve/autotune.py) has nothing to say: CSR-adaptive
    when a heavy tail of long rows would stall a thread- or warp-mapped kernel (longest row > 1024
    and > 16x the mean); ELL when rows are regular (padding at most 1.25x the nonzeros); CSR-vector
    when rows are long (mean >= 12 entries); CSR-scalar otherwise. ``auto`` never picks ELL when
    ELL would refuse.
    """
    if requested not in FORMATS + ("auto",):
        raise ValueError(f"unknown format {requested!r}; expected one of "
                         f"{', '.join(('auto',) + FORMATS)}")
    if requested != "auto":
        return requested
    s = row_stats(csr, adjoint)
    if "csr-adaptive" in allowed and s["max"] > 1024 and s["max"] > 16 * s["mean"]:
        return "csr-adaptive"
    if s["nnz"] and s["ell_fill"] <= min(1.25, DEFAULT_MAX_FILL) and s["mean"] <= 32:
        return "ell"
    if s["mean"] >= 12:
        return "csr-vector"
    return "csr-scalar"


__all__ = ["CSR", "ELL", "FORMATS", "FormatError", "DEFAULT_MAX_FILL", "RowBins", "choose_format",
           "row_stats", "to_csr"]
