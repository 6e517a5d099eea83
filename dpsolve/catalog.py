"""The paper's test matrices (its Table 1): paper name, acronym, SuiteSparse group/name, n, nnz.

The same rows are in ``matrices/paper.csv`` at the top of the project (a test checks that the two
agree). n and nnz are the paper's; nnz counts both triangles of a symmetric matrix, as a reader
that expands the symmetry returns it. A252 is not in SuiteSparse: it is the 3-D 7-point Laplacian
on a 252^3 grid, generated (``dpsolve.matrices.laplace_3d(252)``); the paper prints its n as
16,003,001, but 252^3 = 16,003,008 (nnz = 7 n - 6 * 252^2 = 111,640,032 matches the paper).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CatalogEntry:
    paper_name: str          # as Table 1 prints it
    acronym: str             # the paper's short name
    source: str              # "GROUP/NAME" in SuiteSparse, or a generator name
    n: int
    nnz: int
    kind: str                # "SPD" for every matrix of the paper (CG)
    note: str = ""

    @property
    def suitesparse(self) -> bool:
        return "/" in self.source

    @property
    def group(self) -> str | None:
        return self.source.split("/")[0] if self.suitesparse else None

    @property
    def name(self) -> str:
        return self.source.split("/")[-1]


PAPER = (
    CatalogEntry("BMWCRA1_1", "bmw", "GHS_psdef/bmwcra_1", 148_770, 10_641_602, "SPD"),
    CatalogEntry("CRANKSEG_2", "crank", "GHS_psdef/crankseg_2", 63_838, 14_148_858, "SPD"),
    CatalogEntry("F1", "F1", "Koutsovasilis/F1", 343_791, 26_837_113, "SPD"),
    CatalogEntry("INLINE_1", "inline", "GHS_psdef/inline_1", 503_712, 38_816_170, "SPD"),
    CatalogEntry("LDOOR", "ldoor", "GHS_psdef/ldoor", 952_203, 42_493_817, "SPD"),
    CatalogEntry("AUDIKW_1", "audi", "GHS_psdef/audikw_1", 943_645, 77_651_847, "SPD"),
    CatalogEntry("A252", "A252", "laplace3d-252", 16_003_008, 111_640_032, "SPD",
                 "3-D 7-point Laplacian, 252^3 grid, generated; the paper prints n = 16,003,001"),
)

CSV_FIELDS = ("paper_name", "acronym", "source", "n", "nnz", "kind", "note")


def lookup(name: str) -> CatalogEntry | None:
    """The entry whose paper name, acronym, SuiteSparse name or GROUP/NAME is ``name``
    (case-insensitive), or None."""
    key = name.strip().lower()
    for e in PAPER:
        if key in (e.paper_name.lower(), e.acronym.lower(), e.source.lower(), e.name.lower()):
            return e
    return None


def lookup_source(group: str, name: str) -> CatalogEntry | None:
    """The entry of SuiteSparse ``group/name``, or None (matrices outside the paper's set)."""
    src = f"{group}/{name}".lower()
    return next((e for e in PAPER if e.source.lower() == src), None)


def as_csv_rows() -> list[dict]:
    return [{f: str(getattr(e, f)) for f in CSV_FIELDS} for e in PAPER]
