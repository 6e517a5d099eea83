"""dpsolve: drop-in replacements for scipy.sparse.linalg.cg, bicg and bicgstab on NVIDIA GPUs,
reporting what each solve cost in time and energy.

    x, info = dpsolve.cg(A, b)                                   # SciPy's semantics
    x, info, report = dpsolve.cg(A, b, variant="host", full_output=True)
    P = dpsolve.prepare(A, "cg"); x, info = P.solve(b)           # set up once, solve many times
"""
from ._errors import (BackendUnavailableError, DpsolveError, DpsolveWarning, FormatError,
                      KernelCompileError)
from ._prepared import PreparedSystem, prepare
from ._solvers import bicg, bicgstab, cg
from .backends import VariantInfo, variants
from .report import SolveReport

__version__ = "0.1.0"

__all__ = ["cg", "bicg", "bicgstab", "prepare", "PreparedSystem", "variants", "VariantInfo", "SolveReport",
           "DpsolveError", "BackendUnavailableError", "FormatError", "KernelCompileError",
           "DpsolveWarning", "__version__"]
