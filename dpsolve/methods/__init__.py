"""The method table: one descriptor per Krylov method, and which variant runs which method.

Everything dpsolve knows about a method sits in its :class:`Method`: its reference solver (the
specification, on the model of ``dpsolve/reference``), its extra parameters beyond SciPy's common
ones (GMRES's ``restart``), whether it needs A^H, its GPU work vectors, its info codes and the
text of its docstring. Beside it, one table maps ``(method, variant)`` to the function that runs
it there, so "can this variant run this method" is ``implemented(method, variant)``:

* the ``host`` variant runs every method's reference solver (entered by :func:`define`);
* a GPU back end enters the functions named after methods that its class defines
  (``dpsolve/backends/_gpu.py``, ``GpuBackend.__init_subclass__``);
* a method in its own folder (``dpsolve/methods/gmres/``) enters its own implementations with
  :func:`implement`, by ``"module:function"`` name so that nothing heavy is imported here.

The public functions (``dpsolve.cg`` ...), ``dpsolve.prepare``, the study's method list and the
tests' grids all read this table. Sub-packages of ``dpsolve/methods`` are methods, imported
when this module is: adding one needs no edit here. Importing this module imports neither NumPy
nor a back end (``import dpsolve.cli`` stays light).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Option:
    """A method's own keyword parameter (beyond SciPy's common ones): its name, default, a
    ``check(value) -> value`` that raises ValueError / TypeError naming the problem, and its
    docstring entry."""
    name: str
    default: object
    check: Callable
    doc: str


@dataclass(frozen=True)
class Method:
    name: str
    title: str                      # "the Conjugate Gradient method"
    reference: str                  # "module:function" of the reference solver
    doc_A: str = ""                 # the docstring's extra sentence on A
    breakdown: str = ""             # the docstring's text on negative info codes
    info_codes: dict = field(default_factory=dict)     # negative info -> meaning
    adjoint: bool = False           # needs A^H (rmatvec) and M^H
    options: tuple = ()             # Option, ...
    gpu_vectors: tuple = ()         # named work vectors of the host-driven GPU variants
    gpu_vectors_preconditioned: tuple = ()   # ... added with a preconditioner
    callback_gets_x: bool = True    # callback(xk) by default (GMRES: a residual norm, SciPy's)
    # SciPy's keyword-only parameters of this method, in SciPy's order (the public function's
    # signature starts with them; its options are among them)
    scipy_keywords: tuple = ("rtol", "atol", "maxiter", "M", "callback")

    def reference_solver(self):
        return resolve(self.reference)

    def option_defaults(self) -> dict:
        return {o.name: o.default for o in self.options}

    def check_options(self, given: dict) -> dict:
        """The method's options with defaults filled in; an unknown name is a TypeError, as
        Python's own for an unexpected keyword argument."""
        known = {o.name: o for o in self.options}
        for name in given:
            if name not in known:
                raise TypeError(f"dpsolve.{self.name}() got an unexpected keyword argument "
                                f"{name!r}")
        return {name: o.check(given.get(name, o.default)) for name, o in known.items()}


METHODS: dict[str, Method] = {}
TABLE: dict[tuple[str, str], object] = {}     # (method, variant) -> implementation


def resolve(target):
    """A callable, or the object a ``"module:attribute"`` string names (imported on first use)."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def define(method: Method) -> Method:
    """Enter a method: its descriptor, and its reference solver as its ``host`` implementation."""
    if method.name in METHODS and METHODS[method.name] != method:
        raise ValueError(f"method {method.name!r} is already defined")
    METHODS[method.name] = method
    TABLE[(method.name, "host")] = method.reference
    return method


def implement(method: str, variant: str, fn) -> None:
    """Enter ``fn`` (a callable or ``"module:function"``) as ``method`` on ``variant``. GPU
    implementations are called as ``fn(backend, state, x, *, atol, maxiter, sync, callback)``
    (``dpsolve/backends/_gpu.py``, ``GpuBackend.solve_loop``)."""
    TABLE[(method, variant)] = fn


def implemented(method: str, variant: str) -> bool:
    return (method, variant) in TABLE


def implementation(method: str, variant: str):
    fn = TABLE[(method, variant)]
    if isinstance(fn, str):
        fn = TABLE[(method, variant)] = resolve(fn)
    return fn


def names() -> tuple:
    """Every method, in the order they were defined (the built-in three first)."""
    return tuple(METHODS)


def get(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; expected one of {', '.join(METHODS)}") \
            from None


def variants_of(method: str) -> tuple:
    """The variants that run ``method`` (back ends registered so far; ``dpsolve.backends``
    registers them all when it is imported)."""
    return tuple(v for (m, v) in TABLE if m == method)


def methods_of(variant: str) -> tuple:
    return tuple(m for m in METHODS if (m, variant) in TABLE)


_NONFINITE = (";\n                 dpsolve: also -10 when a step gives a non-finite scalar (an "
              "overflow), where\n                 SciPy iterates on NaN to maxiter; x is then the "
              "last finite iterate")

define(Method(
    "cg", "the Conjugate Gradient method, for a Hermitian positive definite `A`",
    "dpsolve.reference.cg:cg",
    doc_A=" `A` must be Hermitian positive definite.",
    breakdown=" (dpsolve: -10 when a step gives a non-finite scalar, i.e. A is not positive "
              "definite)",
    info_codes={-10: "a non-finite scalar (A is not positive definite, or an overflow)"}))
define(Method(
    "bicg", "the BIConjugate Gradient method", "dpsolve.reference.bicg:bicg",
    doc_A=" A LinearOperator must provide ``rmatvec`` (A^H x).",
    breakdown=": -10 rho breakdown, -11 <p~, A p> == 0 (SciPy's codes)" + _NONFINITE,
    info_codes={-10: "rho breakdown, or a non-finite scalar", -11: "<p~, A p> == 0"},
    adjoint=True, gpu_vectors=("rt", "pt", "qt"), gpu_vectors_preconditioned=("zt",)))
define(Method(
    "bicgstab", "the BIConjugate Gradient STABilized method",
    "dpsolve.reference.bicgstab:bicgstab",
    breakdown=": -10 rho breakdown, -11 omega or <r~, v> breakdown (SciPy's codes)" + _NONFINITE,
    info_codes={-10: "rho breakdown, or a non-finite scalar",
                -11: "omega or <r~, v> breakdown"},
    gpu_vectors=("rt", "t"), gpu_vectors_preconditioned=("phat", "shat")))

# every sub-package is a method that defines and implements itself
for _mod in pkgutil.iter_modules(__path__):
    if _mod.ispkg:
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["Method", "Option", "METHODS", "TABLE", "define", "implement", "implemented",
           "implementation", "names", "get", "variants_of", "methods_of", "resolve"]
