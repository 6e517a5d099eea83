"""At rtol = atol = 0 dpsolve counts a true residual of exactly 0, computed in the working
precision, as success (README). How often is that residual exact? 300 small SPD systems (n = 1
to 3, float32 and float64, host variant, seed 0); each success is checked with exact rational
arithmetic. Output (2026-11-30): "info 0 cases 50 of which exact residual != 0: 50"."""
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

import dpsolve

rng = np.random.default_rng(0)
bad = tot = 0
for trial in range(300):
    dt = np.float32 if trial % 2 else np.float64
    n = int(rng.integers(1, 4))
    A = np.diag(rng.uniform(1, 3, n)).astype(dt)
    if n > 1:
        A[0, 1] = A[1, 0] = dt(rng.uniform(-0.3, 0.3))
    b = rng.standard_normal(n).astype(dt)
    x, info = dpsolve.cg(sp.csr_array(A), b, rtol=0.0, atol=0.0, maxiter=5, variant="host")
    if info == 0:
        tot += 1
        r = [Fraction(float(b[i])) - sum(Fraction(float(A[i, j])) * Fraction(float(x[j]))
                                         for j in range(n)) for i in range(n)]
        if any(ri != 0 for ri in r):
            bad += 1
            if bad <= 3:
                print(dt.__name__, n, "info 0 but exact residual", [float(ri) for ri in r])
print("info 0 cases", tot, "of which exact residual != 0:", bad)
