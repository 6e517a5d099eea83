"""Preconditioners as objects: one registry, one class per preconditioner (on the model of PETSc's
``PC`` and Ginkgo's preconditioner ``LinOp``s).

``M`` of every solver may be:

* a registered name: ``M="jacobi"``, ``"amg"``, ``"chebyshev"`` (:func:`names` lists them),
* a preconditioner object with its options, e.g. ``dpsolve.precond.AMG(theta=0.1)``,
* a 1-D array holding D^-1, or a diagonal sparse matrix (both: Jacobi with that diagonal),
* any matrix or ``LinearOperator`` approximating A^-1 (:class:`Operator`: host-driven variants),
* None: no preconditioner.

:func:`make` turns ``M`` into a bound :class:`Preconditioner` (``base.py`` says what its faces are
and which variants run them). Adding a preconditioner: a module (or package) in this folder that
defines a subclass and decorates it with :func:`register`; every module here is imported with
this package, so nothing else names it. Its CUDA kernels, if any, go in ``dpsolve/cuda``.
"""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np

from .base import DeviceFace, Identity, Preconditioner, check_cast
from .jacobi import Jacobi, PointwiseFace
from .operator import Operator

REGISTRY: dict[str, type] = {}
__all__ = ["Preconditioner", "DeviceFace", "PointwiseFace", "Identity", "Jacobi", "Operator",
           "REGISTRY", "register", "names", "make"]


def register(cls):
    """Class decorator: ``M=cls.name`` makes ``cls()`` (its default options), and the class is
    exported from this package (``dpsolve.precond.AMG``)."""
    if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
        raise ValueError(f"a preconditioner named {cls.name!r} is already registered")
    REGISTRY[cls.name] = cls
    if cls.__module__.startswith(__name__ + "."):
        globals()[cls.__name__] = cls
        if cls.__name__ not in __all__:
            __all__.append(cls.__name__)
    return cls


register(Jacobi)


def names() -> tuple:
    """The names ``M=`` accepts."""
    return tuple(REGISTRY)


def _function_hint(obj, what):
    from .._system import _function_hint as hint
    return hint(obj, what)


def make(M, csr, n: int, dtype, *, snapshot: bool = False, method: str | None = None
         ) -> Preconditioner:
    """``M`` bound to the system; ``method``: the Krylov method it will serve (BiCG needs M^H,
    which not every preconditioner provides). See :func:`_make`."""
    pc = _make(M, csr, n, dtype, snapshot=snapshot)
    if method is not None and not pc.has_adjoint:
        from .. import methods as method_table
        if method_table.get(method).adjoint:
            raise ValueError(f"{method} needs M^H, which M={pc.kind!r} does not provide; use "
                             f"cg (a symmetric A) or bicgstab")
    return pc


def _in_dtype(inv, dtype, what: str):
    """A finite inverse diagonal ``inv`` as a new array in the working ``dtype``, or a
    ValueError naming the rows where the cast goes past the largest float (a float64 M of 1e39
    for a float32 solve: before, NumPy's overflow warning escaped, and D^-1 held Inf)."""
    from .._system import past_the_dtype
    with np.errstate(over="ignore"):
        out = np.array(inv, dtype=dtype, copy=True)
    big = np.flatnonzero(~np.isfinite(out))
    if big.size:
        raise ValueError(past_the_dtype(what, dtype, big))
    return out


def _make(M, csr, n: int, dtype, *, snapshot: bool = False) -> Preconditioner:
    """``M`` as the solvers take it, bound to the system (A as ``csr``, or None for an operator
    A; ``n``; the working ``dtype``), checked: an error names the problem. ``snapshot``: a dense
    M is copied (a prepared system's M, like its A, does not follow later changes); a sparse one
    always is. M's dtype must cast to ``dtype`` (``same_kind``). The caller's M is not modified."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import LinearOperator, aslinearoperator

    from ..formats.csr import _is_cupy
    from ..formats.validate import check_indices
    fix = "cast M, or solve in a complex dtype"
    if M is None:
        return Identity().bind(csr, n, dtype)
    if isinstance(M, str):
        cls = REGISTRY.get(M)
        if cls is None:
            raise ValueError(f"unknown preconditioner M={M!r}; expected "
                             f"{', '.join(repr(k) for k in REGISTRY)}, a preconditioner object, "
                             f"an array or an operator")
        return cls().bind(csr, n, dtype, snapshot=snapshot)
    if isinstance(M, Preconditioner):
        if M.needs_matrix and csr is None:
            raise ValueError(f"M={M!r} needs A as a matrix, not a LinearOperator")
        return M.bind(csr, n, dtype, snapshot=snapshot)
    if isinstance(M, type) and issubclass(M, Preconditioner):
        raise TypeError(f"M={M.__name__} is a class; pass an instance, {M.__name__}(), or its "
                        f"name M={M.name!r}")
    if (isinstance(M, np.ndarray) or _is_cupy(M)) and M.ndim == 1:
        if M.shape != (n,):
            raise ValueError(f"M as a 1-D inverse diagonal must have shape ({n},), got {M.shape}")
        check_cast(M.dtype, dtype, "M", fix)
        inv = (M.get() if _is_cupy(M) else np.asarray(M))
        if not np.isfinite(inv).all():
            raise ValueError("M (inverse diagonal) contains NaN or Inf")
        return Jacobi.from_inverse_diagonal(_in_dtype(inv, dtype, "M (inverse diagonal)"))
    if sp.issparse(M) or _is_cupy(M):
        if tuple(M.shape) != (n, n):
            raise ValueError("matrix and preconditioner have different shapes")
        check_cast(M.dtype, dtype, "M", fix)
        if hasattr(M, "format"):
            check_indices(M, "M")
        Mh = sp.coo_array(M.get() if _is_cupy(M) else M, copy=True)   # M is not touched
        Mh.sum_duplicates()
        Mh.eliminate_zeros()
        if not np.isfinite(Mh.data).all():
            raise ValueError("M contains NaN or Inf")
        if bool((Mh.row == Mh.col).all()):                      # diagonal: a Jacobi application
            return Jacobi.from_inverse_diagonal(_in_dtype(Mh.diagonal(), dtype, "M (diagonal)"))
        M = Mh
    elif isinstance(M, np.ndarray):
        if snapshot:
            M = M.copy()
    elif callable(M) and not hasattr(M, "matvec") and not isinstance(M, LinearOperator):
        raise TypeError(_function_hint(M, "M"))
    op = aslinearoperator(M)
    if op.shape != (n, n):
        raise ValueError("matrix and preconditioner have different shapes")
    if op.dtype is not None:
        check_cast(op.dtype, dtype, "M", fix)
    return Operator(op)


# every other module or package in this folder is a preconditioner that registers itself
for _mod in pkgutil.iter_modules(__path__):
    if _mod.name not in ("base", "jacobi", "operator"):
        importlib.import_module(f"{__name__}.{_mod.name}")
