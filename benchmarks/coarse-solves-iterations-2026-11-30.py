#!/usr/bin/env python3
"""Would better coarse-level solves buy fewer AMG-PCG iterations? (issue 30's energy target,
session 42, host only, 2026-11-30)

The V-cycle's fine levels draw the watts (648-690 W at 3-D 160^3 on an H200), its coarse tail
222-457 W. If more work on the coarse levels (a W-cycle below a level, or an exact solve of a
level) cut the outer iterations, AMG-PCG would trade high-power fine work for low-power coarse
work. This counts SciPy CG iterations (rtol 1e-8) with dpsolve's reference hierarchy
(``dpsolve.precond.amg.reference.setup``, the defaults) and these cycles:

    ('V', 0)      the V-cycle as shipped
    ('W', L)      two coarse corrections on every level >= L (a W-cycle below L)
    ('exact', L)  level L solved exactly (a sparse LU), the levels below it unused

    python3 benchmarks/coarse-solves-iterations-2026-11-30.py [SIDE_3D]

Its run (this machine, SIDE_3D 60; levels 216,000 -> 33,708 -> 2,578 -> 85 and 2-D 512^2
262,144 -> 54,303 -> 8,528 -> 734):

    3-D 60^3, x* = ones:   V 10, W from 2 10, W from 1 10, exact 2 10, exact 1 9
    3-D 60^3, x* random:   11 for every cycle
    2-D 512^2, x* = ones:  V 11, W from 2 11, W from 1 10, exact 2 10, exact 1 10
    2-D 512^2, x* random:  12 for every cycle

The V-cycle already converges as its two-grid method does (level 1 solved exactly): no coarse
work buys an iteration worth having.
"""
import sys

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import reference as R


def cycle(h, level, b, mode, lu):
    """z = M_level b under ``mode`` (see the docstring); ``lu``: level -> exact solve."""
    if level == len(h.levels) - 1:
        return h.coarse_inv @ b
    if mode[0] == "exact" and level == mode[1]:
        return lu[level](b)
    lev = h.levels[level]
    gamma = 2 if (mode[0] == "W" and level >= mode[1]) else 1
    if R.uses_rs(h, lev) and gamma == 1:
        x = (R.jacobi_weights(lev.inv_diag, lev.rs_weight) * b
             + lev.P @ cycle(h, level + 1, lev.RS @ b, mode, lu))
        return R._smooth(h, lev, x, b)
    x = R._smooth(h, lev, None, b)
    for _ in range(gamma):
        res = b - lev.A @ x
        x = x + lev.P @ cycle(h, level + 1, lev.R @ res, mode, lu)
    return R._smooth(h, lev, x, b)


def main(side_3d: int = 60) -> None:
    for name, A in ((f"3-D {side_3d}^3", laplace_3d(side_3d)), ("2-D 512^2", laplace_2d(512))):
        A = sp.csr_array(A).astype(np.float64)
        h = R.setup(A)
        print(name, "levels", [lev.A.shape[0] for lev in h.levels], flush=True)
        lu = {lv: spla.factorized(sp.csc_matrix(h.levels[lv].A))
              for lv in range(1, len(h.levels) - 1)}
        n = A.shape[0]
        for xs_name, xs in (("ones", np.ones(n)),
                            ("random", np.random.default_rng(0).standard_normal(n))):
            b = A @ xs
            for mode in (("V", 0), ("W", 2), ("W", 1), ("exact", 2), ("exact", 1)):
                if mode[1] >= len(h.levels) - 1:
                    continue
                M = spla.LinearOperator(A.shape, matvec=lambda r, m=mode: cycle(h, 0, r, m, lu))
                it = [0]
                _, info = spla.cg(A, b, rtol=1e-8, M=M, maxiter=200,
                                  callback=lambda xk: it.__setitem__(0, it[0] + 1))
                print(f"  x* = {xs_name}, {mode}: {it[0]} iterations, info {info}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
