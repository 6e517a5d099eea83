"""Test problems: Laplace generators, Matrix Market reading, and the paper's right-hand side.

Generators build CSR directly from index arithmetic (Kronecker sums of 1-D stencils), with no dense
or Python-loop intermediate, so the paper's A252 (252^3 = 16,003,008 rows) is generated in seconds.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp


def laplace_1d(n: int, dtype=np.float64) -> sp.csr_array:
    """Tridiagonal [-1, 2, -1] of order n (n >= 1)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return sp.diags_array([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], offsets=[-1, 0, 1],
                          shape=(n, n), format="csr", dtype=dtype)


def _eye(n, dtype):
    return sp.eye_array(n, dtype=dtype, format="csr")


def laplace_2d(nx: int, ny: int | None = None, dtype=np.float64) -> sp.csr_array:
    """5-point Laplacian on an nx x ny grid (Dirichlet boundary), n = nx*ny."""
    ny = nx if ny is None else ny
    Tx, Ty = laplace_1d(nx, dtype), laplace_1d(ny, dtype)
    return (sp.kron(_eye(ny, dtype), Tx) + sp.kron(Ty, _eye(nx, dtype))).tocsr()


def laplace_3d(nx: int, ny: int | None = None, nz: int | None = None,
               dtype=np.float64) -> sp.csr_array:
    """7-point Laplacian on an nx x ny x nz grid (Dirichlet boundary), n = nx*ny*nz.

    laplace_3d(252) is the paper's A252: n = 16,003,008, nnz = 111,640,032.
    """
    ny = nx if ny is None else ny
    nz = nx if nz is None else nz
    A = sp.kron(_eye(nz, dtype), laplace_2d(nx, ny, dtype), format="csr")
    A = A + sp.kron(laplace_1d(nz, dtype), _eye(nx * ny, dtype), format="csr")
    A = A.tocsr()
    A.sum_duplicates()
    return A


def paper_rhs(A, dtype=None):
    """The paper's set-up: x* = ones, b = A x*, x0 = 0. Returns (b, x_star)."""
    dtype = dtype or A.dtype
    x_star = np.ones(A.shape[0], dtype=dtype)
    return (A @ x_star).astype(dtype), x_star


def read_matrix(path) -> sp.csr_array:
    """Read a .mtx or .mtx.gz file as CSR: fast_matrix_market when installed, else scipy.io.mmread."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no matrix file at {path}")
    try:
        import fast_matrix_market as fmm
        m = fmm.mmread(str(path))
    except ImportError:
        import scipy.io
        m = scipy.io.mmread(str(path))
    if not sp.issparse(m):
        m = sp.coo_array(m)
    return sp.csr_array(m)
