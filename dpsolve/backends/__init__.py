"""The variant registry: one small object per back end.

A back end has a ``name``, says whether it can run here (``availability()``), prepares a system
once (``prepare``) and runs one solve (``run``). The front end (``dpsolve/_frontend.py``) does
everything else: validation, tolerances, restarts from the true residual, the report.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import Backend, Run
from .cublas import CublasBackend
from .cuda import CudaBackend
from .dynamic import DynamicBackend
from .graph import GraphBackend
from .host import HostBackend
from .merge import MergeBackend
from .persistent import PersistentBackend

VARIANT_NAMES = ("host", "cublas", "cuda", "merge", "dynamic", "graph", "persistent")

# variant="auto" follows the measured rule (dpsolve/autotune.py); where it has nothing to say (no
# rule file, A a LinearOperator) auto takes the first of these that is available and takes the
# system (a callback rules out device-driven variants). The order is the rule's overall one on the
# H100 (BENCHMARKS.md, issue #5): persistent fastest at every regular sample point, then graph,
# dynamic; merge is the fastest host-driven variant.
AUTO_PREFERENCE = ("persistent", "graph", "dynamic", "merge", "cuda", "cublas")

_DESCRIPTIONS = {
    "host": "pure-NumPy reference solvers on the CPU (the specification)",
    "cublas": ("host loop; cuBLAS vector ops with host-side scalars; dpsolve SpMV "
               "(the paper's CUBLASL)"),
    "cuda": "host loop; dpsolve kernels for every op, scalars kept on the device",
    "merge": "host loop over the fused macro-kernels of the paper's Figure 2",
    "dynamic": "one host launch; the loop chained on the GPU with CDP2 tail launches",
    "graph": "one host launch of a CUDA graph with a conditional WHILE node",
    "persistent": "one cooperative kernel looping with grid-wide synchronisation",
}

_BACKENDS: dict[str, Backend] = {b.name: b for b in (HostBackend(), CublasBackend(), CudaBackend())}
_BACKENDS[MergeBackend.name] = MergeBackend()
_BACKENDS[DynamicBackend.name] = DynamicBackend()
_BACKENDS[GraphBackend.name] = GraphBackend()
_BACKENDS[PersistentBackend.name] = PersistentBackend()


@dataclass(frozen=True)
class VariantInfo:
    name: str
    available: bool
    reason: str | None
    description: str


def get_backend(name: str) -> Backend | None:
    return _BACKENDS.get(name)


def register(backend: Backend) -> None:
    _BACKENDS[backend.name] = backend


def variant_info(name: str) -> VariantInfo:
    backend = _BACKENDS.get(name)
    if backend is None:
        return VariantInfo(name, False, "not implemented yet in this version of dpsolve",
                           _DESCRIPTIONS[name])
    ok, reason = backend.availability()
    return VariantInfo(name, ok, reason, _DESCRIPTIONS[name])


def variants() -> list[VariantInfo]:
    """Every variant, whether it can run here, and why not when it cannot."""
    return [variant_info(n) for n in VARIANT_NAMES]


__all__ = ["Backend", "Run", "VARIANT_NAMES", "VariantInfo", "get_backend", "register",
           "variant_info", "variants"]
