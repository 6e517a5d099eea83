"""The host sweep that found the float32 A far from 1 failures (2026-11-30): A = Laplacian * 2^k
(2-D 24^2 and 3-D 40^3, float32), b = (A0 u) * 2^(-32, 0, 32) or A u, every method on the host
variant, rtol 1e-5; prints every call that does not return info 0. From the checkout:

    PYTHONPATH=. python3 benchmarks/matrix-scale-sweep-2026-11-30.py
"""
import numpy as np
import scipy.sparse as sp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

EXPONENTS = (-120, -100, -80, -64, -48, -40, -32, -24, -16, 16, 24, 32, 40, 48, 64, 80, 100, 120)

for A0 in (sp.csr_array(laplace_2d(24)), sp.csr_array(laplace_3d(40))):
    n = A0.shape[0]
    u = np.random.default_rng(0).random(n)
    for ea in EXPONENTS:
        A = sp.csr_array(A0 * 2.0 ** ea).astype(np.float32)
        for eb in (-32, 0, 32, "Au"):
            b = (A.astype(np.float64) @ u) if eb == "Au" else (A0 @ u) * 2.0 ** eb
            b = b.astype(np.float32)
            if not np.isfinite(b).all():
                continue
            for m in ("cg", "bicg", "cgs", "bicgstab", "gmres"):
                with np.errstate(all="ignore"):
                    x, info = getattr(dpsolve, m)(A, b, variant="host", rtol=1e-5, maxiter=2000)
                if info:
                    print(f"n={n} {m:9s} A*2^{ea} b*2^{eb}: info={info}")
