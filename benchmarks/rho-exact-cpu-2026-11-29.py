# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24): CPU 2026-11-29, `python3 <this>` (shared matrices at /work/shared/matrices).
"""CPU, host reference: AMG-PCG iterations with the shipped 20-step power estimate of
rho(D^-1 A) on every level against the exact rho (ARPACK), Jacobi and Chebyshev smoothers."""
import os, sys
import numpy as np, scipy.sparse as sp, scipy.io, scipy.sparse.linalg as sla
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond import smoothers
from dpsolve.precond.amg import reference

probs = [("2d-256", sp.csr_array(laplace_2d(256))), ("3d-40", sp.csr_array(laplace_3d(40))),
         ("3d-64", sp.csr_array(laplace_3d(64)))]
for name in ("bcsstk14", "bcsstk16", "1138_bus", "bcsstk13"):
    f = f"/work/shared/matrices/{name}.mtx.gz"
    if os.path.exists(f):
        probs.append((name, sp.csr_array(scipy.io.mmread(f))))
orig = reference.spectral_radius

def exact(A, inv, iterations=20):
    DA = sp.diags(np.asarray(inv)) @ sp.csr_array(A).astype(np.float64)
    if DA.shape[0] < 50:
        return float(max(abs(np.linalg.eigvals(DA.toarray()))))
    return float(abs(sla.eigs(DA, k=1, which="LM", return_eigenvectors=False, tol=1e-8)[0]))

for name, A in probs:
    A = A.astype(np.float64); b = A @ np.ones(A.shape[0])
    row = [name, A.shape[0]]
    for sm in ("jacobi", "chebyshev"):
        for label, f in (("power20", orig), ("exact", exact)):
            reference.spectral_radius = f
            h = reference.setup(A, dtype=np.float64, smoother=sm)
            M = reference.as_operator(h); its = [0]
            x, info = sla.cg(A, b, rtol=1e-8, M=M, maxiter=2000, callback=lambda xk: its.__setitem__(0, its[0] + 1))
            row += [f"{sm}/{label}", its[0], info]
    reference.spectral_radius = orig
    print(",".join(str(v) for v in row), flush=True)
