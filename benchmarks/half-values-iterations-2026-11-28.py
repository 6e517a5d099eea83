# ruff: noqa
# The CPU experiment behind BENCHMARKS.md's session-22 note on float16 V-cycle values (issue 30), as run
# from the repository root: `python3 benchmarks/half-values-iterations-2026-11-28.py` (needs ../shared/matrices).
"""Issue 30's next step, on the CPU: does a V-cycle whose matrices hold float16 values (a
power-of-two scale per matrix) cost CG iterations? The reference hierarchy (float64 set-up, the
float32 cycle as shipped) against the same cycle with A_l, P_l, R_l values rounded to float16
(D^-1 and the coarse inverse kept float32); CG to rtol 1e-8 in float64, b = A u."""
import dataclasses, math, sys
import numpy as np, scipy.sparse as sp
from scipy.sparse.linalg import cg, LinearOperator
sys.path.insert(0, "tests")
from dpsolve.precond.amg import reference as ref
from dpsolve.matrices import laplace_2d, laplace_3d
from scipy_cases import scipy_mmread

def rounded16(M, level0=False):
    if M is None:
        return None
    top = float(np.abs(M.data).max())
    e = math.ceil(math.log2(top)) - 15 if top > 0 else 0      # top / 2^e in [2^14, 2^15]: < 65504
    s = 2.0 ** e
    d = (M.data / s).astype(np.float16)
    small = int(((M.data != 0) & (d == 0)).sum())
    out = M.copy()
    out.data = (d.astype(np.float32) * np.float32(s)).astype(np.float32)
    return out, small

def half(h):
    low = h.low
    lost = 0
    levels = []
    for lev in low.levels:
        A, a = rounded16(lev.A) if lev.A is not None else (None, 0)
        P, p = rounded16(lev.P) if lev.P is not None else (None, 0)
        R = None if P is None else sp.csr_array(P.T.conj()).astype(np.float32)
        levels.append(dataclasses.replace(lev, A=A, P=P, R=R))
        lost += a + p
    return dataclasses.replace(low, levels=levels), lost

def iterations(A, M):
    b = A @ np.random.default_rng(0).random(A.shape[0])
    count = [0]
    _, info = cg(A, b, rtol=1e-8, M=M, callback=lambda xk: count.__setitem__(0, count[0] + 1), maxiter=3000)
    return count[0], info

def op(h, n):
    return LinearOperator((n, n), matvec=lambda r: ref._cycle(h, 0, np.asarray(r).astype(np.float32)).astype(np.float64))

def sym(h, n):
    rng = np.random.default_rng(1)
    x, y = rng.random(n), rng.random(n)
    M = op(h, n)
    a, b = (M @ x) @ y, x @ (M @ y)
    return abs(a - b) / abs(a)

probs = [("2-D 256^2", laplace_2d(256)), ("3-D 40^3", laplace_3d(40)), ("2-D 512^2", laplace_2d(512))]
for name in ["Laplace3D10", "1138_bus", "bcsstk14", "bcsstk26", "bcsstk13", "bcsstk16", "FEM_3D_thermal1"]:
    probs.append((name, sp.csr_array(scipy_mmread(f"../shared/matrices/{name}.mtx.gz")).astype(np.float64)))
print(f"{'problem':16s} {'n':>8s} {'f32 it':>7s} {'f16 it':>7s} {'lost':>6s} {'asym f32':>9s} {'asym f16':>9s}", flush=True)
for name, A in probs:
    A = sp.csr_array(A)
    h = ref.setup(A)
    if h.low is None:
        print(f"{name:16s} {A.shape[0]:8d}  (one level or no single cycle)", flush=True)
        continue
    n = A.shape[0]
    h16, lost = half(h)
    i32, f32 = iterations(A, op(h.low, n))
    i16, f16 = iterations(A, op(h16, n))
    print(f"{name:16s} {n:8d} {i32:7d} {i16:7d} {lost:6d} {sym(h.low, n):9.1e} {sym(h16, n):9.1e}  info {f32} {f16}", flush=True)
