"""GMRES, restarted (a first-cut feature: the method table's proof that a method is one folder).

``dpsolve.gmres`` takes SciPy's ``gmres`` arguments (``restart``, ``callback_type`` included)
and runs on two variants:

* ``host``: ``reference.py``, the specification (left preconditioning, modified Gram-Schmidt,
  Givens rotations, SciPy's adaptive inner tolerance and its true-residual test per cycle);
* ``cublas``: ``gpu.py``, the host driving the Arnoldi process on the GPU: dpsolve's SpMV and
  Jacobi kernels, CuPy (cuBLAS) for the Gram-Schmidt projections and norms, the small
  Hessenberg least-squares problem on the host.

``maxiter`` counts restart cycles, and ``info > 0`` is the cycles run, as in SciPy (with
``callback_type="legacy"``, SciPy's default when a callback is given, it counts inner
iterations). Not yet: the other GPU variants (fused or device-driven Arnoldi).
"""
from __future__ import annotations

import numbers

from .. import Method, Option, define, implement


def _restart(v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"restart must be a positive integer or None, got {v!r}")
    if v < 1:
        raise ValueError(f"restart must be a positive integer, got {v}")
    return int(v)


def _callback_type(v):
    if v not in (None, "x", "pr_norm", "legacy"):
        raise ValueError(f"Unknown callback_type: {v!r}; expected 'x', 'pr_norm' or 'legacy'")
    return v


define(Method(
    "gmres", "the Generalized Minimal RESidual method (restarted)",
    "dpsolve.methods.gmres.reference:gmres",
    doc_A=" dpsolve runs GMRES on the variants 'host' and 'cublas' (a first-cut feature).",
    breakdown=": never (an exact solution in the Krylov space ends the cycle)",
    options=(Option("restart", None, _restart,
                    "int, optional\n        Krylov dimension before a restart (default "
                    "``min(20, n)``)."),
             Option("callback_type", None, _callback_type,
                    "{'x', 'pr_norm', 'legacy'}, optional\n        What ``callback`` gets: "
                    "the iterate per restart cycle (``x``), or the relative\n        "
                    "preconditioned residual norm per inner iteration (``pr_norm``; ``legacy``, "
                    "SciPy's\n        default, likewise, with ``maxiter`` counting inner "
                    "iterations).")),
    callback_gets_x=False,
    scipy_keywords=("rtol", "atol", "restart", "maxiter", "M", "callback", "callback_type")))

implement("gmres", "cublas", "dpsolve.methods.gmres.gpu:gmres_cublas")
