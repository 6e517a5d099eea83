"""dpsolve: drop-in replacements for scipy.sparse.linalg.cg, bicg and bicgstab on NVIDIA GPUs,
reporting what each solve cost in time and energy.

    x, info = dpsolve.cg(A, b)                                   # SciPy's semantics
    x, info, report = dpsolve.cg(A, b, variant="host", full_output=True)
    P = dpsolve.prepare(A, "cg"); x, info = P.solve(b)           # set up once, solve many times

The solvers (one per method of the method table, ``dpsolve.methods``), prepare, variants() and
SolveReport are imported on first use (PEP 562), so that ``import dpsolve.cli`` loads neither
NumPy nor SciPy: the command line catches Ctrl-C from its very first line, imports included.
"""
from ._errors import (BackendUnavailableError, DistributedError, DpsolveError, DpsolveWarning,
                      FormatError, KernelCompileError)
from .methods import names as _method_names

__version__ = "0.1.0"

# one public function per method of the method table (dpsolve/methods): cg, bicg, bicgstab, ...
_LAZY = {name: "_solvers" for name in _method_names()}
_LAZY.update({"prepare": "_prepared", "PreparedSystem": "_prepared",
              "variants": "backends", "VariantInfo": "backends", "SolveReport": "report",
              "BlockReport": "_block", "clear_cache": "_fast"})

__all__ = [*_method_names(), "prepare", "PreparedSystem", "clear_cache", "variants", "VariantInfo",
           "SolveReport", "BlockReport", "DpsolveError", "BackendUnavailableError", "FormatError",
           "KernelCompileError", "DistributedError", "DpsolveWarning", "__version__"]


def __getattr__(name):
    import importlib
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("__"):       # dpsolve.backends etc. without importing them first
        import importlib.util
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
