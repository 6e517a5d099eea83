"""CGS, the Conjugate Gradient Squared method (Sonneveld 1989), as SciPy's ``cgs``.

``dpsolve.cgs`` takes SciPy's ``cgs`` arguments and runs on two variants:

* ``host``: ``reference.py``, the specification: SciPy's iteration (right preconditioning, the
  true residual r = b - A x recomputed every iteration instead of the recurrence's), its
  breakdown tests and codes, breakdowns confirmed with the accurate inner product as every
  dpsolve method confirms them, and dpsolve's non-finite -> -10 stop;
* ``cublas``: ``gpu.py``, the host driving that iteration on the GPU: dpsolve's SpMV and
  Jacobi kernels, cuBLAS in host pointer mode for the inner products, norms and AXPYs, every
  scalar on the host.

Not yet: the other GPU variants (kernels with the scalars on the device), which refuse it by
name. Since the residual CGS tests is the true one, the front end's restart from the true
residual does not fire on ``host`` (on ``cublas`` only where its NRM2 and the front end's check
round to opposite sides of the tolerance).
"""
from __future__ import annotations

from .. import _NONFINITE, Method, define, implement

define(Method(
    "cgs", "the Conjugate Gradient Squared method",
    "dpsolve.methods.cgs.reference:cgs",
    doc_A=" dpsolve runs CGS on the variants 'host' and 'cublas' (a first-cut feature).",
    breakdown=": -10 rho breakdown, -11 <r~, v> == 0 (SciPy's codes)" + _NONFINITE,
    info_codes={-10: "rho breakdown, or a non-finite scalar", -11: "<r~, v> == 0"},
    # the host-driven GPU variants' work vectors beyond the state's r, p, v (and z, which holds
    # M p and M (u + q) in turn when preconditioned): allocated when the system is prepared
    gpu_vectors=("rt", "u", "q")))

implement("cgs", "cublas", "dpsolve.methods.cgs.gpu:cgs_cublas")
