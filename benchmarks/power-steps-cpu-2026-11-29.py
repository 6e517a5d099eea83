# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 24). CPU 2026-11-29: `python3 <this>` (needs ../shared/matrices at /work/shared/matrices).
"""CPU, host reference: AMG-PCG iterations (rtol 1e-8, x* = ones) and rho estimates with the
power iteration's step count at 8 / 12 / 20 (20: the shipped), against eigsh's rho(D^-1 A)."""
import glob, os, sys, time
import numpy as np, scipy.sparse as sp, scipy.io, scipy.sparse.linalg as sla
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond import smoothers
from dpsolve.precond.amg import reference

probs = [("2d-256", sp.csr_array(laplace_2d(256))), ("3d-40", sp.csr_array(laplace_3d(40)))]
for name in ("1138_bus", "bcsstk13", "bcsstk14", "bcsstk16", "bcsstk26", "Laplace3D10", "s3rmt3m3", "nos4", "bcsstk04"):
    f = f"/work/shared/matrices/{name}.mtx.gz"
    if os.path.exists(f):
        probs.append((name, sp.csr_array(scipy.io.mmread(f))))
orig = smoothers.spectral_radius
for name, A in probs:
    A = A.astype(np.float64)
    d = A.diagonal()
    DA = sp.diags(1 / d) @ A
    try:
        true = abs(sla.eigs(DA, k=1, which="LM", return_eigenvectors=False, tol=1e-10)[0])
    except Exception as e:
        true = float("nan")
    b = A @ np.ones(A.shape[0])
    row = [name, A.shape[0], f"{true:.6f}"]
    for k in (8, 12, 20):
        reference.spectral_radius = lambda A_, inv, iterations=k: orig(A_, inv, iterations)
        est = orig(A, 1 / d, k)
        h = reference.setup(A, dtype=np.float64)
        M = reference.as_operator(h)
        its = [0]
        x, info = sla.cg(A, b, rtol=1e-8, M=M, maxiter=2000, callback=lambda xk: its.__setitem__(0, its[0] + 1))
        row += [k, f"{est / true:.4f}", its[0], info]
    print(",".join(str(v) for v in row), flush=True)
reference.spectral_radius = orig
