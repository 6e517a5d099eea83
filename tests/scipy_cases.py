"""SciPy's kinds of test case (scipy/sparse/linalg/_isolve/tests/test_iterative.py), shared by the
front-end and parity suites. Each builder returns a matrix (sparse or dense, float64/complex128);
callers cast it to the dtype under test."""
import inspect

import numpy as np
import scipy.io
import scipy.sparse as sp


def scipy_mmread(source):
    """SciPy's own Matrix Market reader, the reference the tests compare dpsolve's with, asked for
    a sparse array where it can be (SciPy 1.18 warns that its default return type changes)."""
    kw = ({"spmatrix": False} if "spmatrix" in inspect.signature(scipy.io.mmread).parameters
          else {})
    return scipy.io.mmread(source, **kw)


def poisson1d(n=40):
    data = np.ones((3, n))
    data[0, :] = 2
    data[1, :] = -1
    data[2, :] = -1
    return sp.dia_array((data, [0, -1, 1]), shape=(n, n)).tocsr()


def poisson2d(n=40):
    return sp.kronsum(poisson1d(n), poisson1d(n)).tocsr()


def neg_poisson1d():
    return (-poisson1d()).tocsr()


def rand_diag_indef():
    """Symmetric indefinite diagonal (SciPy's "rand-diag")."""
    return sp.dia_array((np.array([[6, -5, 2, 7, -1, 10, 4, -3, -8, 9]], dtype=float), [0]),
                        shape=(10, 10)).tocsr()


def rand_dense():
    """Small random dense nonsymmetric matrix (SciPy's "rand")."""
    return np.random.RandomState(1234).rand(4, 4)


def rand_sym():
    A = np.random.RandomState(1234).rand(4, 4)
    return A + A.T


def rand_spd():
    data = np.random.RandomState(1234).rand(9, 9)
    return data @ data.T


def rand_cmplx():
    rng = np.random.RandomState(1234)
    return rng.rand(4, 4) + 1j * rng.rand(4, 4)


def rand_herm():
    A = rand_cmplx()
    return A + A.conj().T


def rand_hpd():
    rng = np.random.RandomState(1234)
    data = rng.rand(9, 9) + 1j * rng.rand(9, 9)
    return data.conj() @ data.T


def nonsym_posdef():
    data = np.ones((2, 10))
    data[0, :] = 2
    data[1, :] = -1
    return sp.dia_array((data, [0, -1]), shape=(10, 10)).tocsr()


def sym_nonpd():
    """SciPy's "sym-nonpd" case: symmetric indefinite, bicg/bicgstab break down on it.
    Returns (A, b)."""
    A = np.array([[0, 0, 0, 0, 0, 1, -1, -0, -0, -0, -0],
                  [0, 0, 0, 0, 0, 2, -0, -1, -0, -0, -0],
                  [0, 0, 0, 0, 0, 2, -0, -0, -1, -0, -0],
                  [0, 0, 0, 0, 0, 2, -0, -0, -0, -1, -0],
                  [0, 0, 0, 0, 0, 1, -0, -0, -0, -0, -1],
                  [1, 2, 2, 2, 1, 0, -0, -0, -0, -0, -0],
                  [-1, 0, 0, 0, 0, 0, -1, -0, -0, -0, -0],
                  [0, -1, 0, 0, 0, 0, -0, -1, -0, -0, -0],
                  [0, 0, -1, 0, 0, 0, -0, -0, -1, -0, -0],
                  [0, 0, 0, -1, 0, 0, -0, -0, -0, -1, -0],
                  [0, 0, 0, 0, -1, 0, -0, -0, -0, -0, -1]], dtype=float)
    b = np.zeros(11)
    b[5] = 1.0
    assert (A == A.T).all()
    return A, b


REAL = (np.float64, np.float32)
COMPLEX = (np.complex128, np.complex64)

# name -> (builder, dtypes): the parity suite's cases; the right-hand side is SciPy's default
# (arange(n)) except for sym-nonpd, which brings its own.
CASES = {
    "poisson1d": (poisson1d, REAL),
    "poisson2d": (poisson2d, REAL),
    "neg-poisson1d": (neg_poisson1d, REAL),
    "rand-diag-indef": (rand_diag_indef, REAL),
    "rand-dense": (rand_dense, REAL),
    "rand-sym": (rand_sym, REAL),
    "rand-spd": (rand_spd, REAL),
    "rand-cmplx": (rand_cmplx, COMPLEX),
    "rand-herm": (rand_herm, COMPLEX),
    "rand-hpd": (rand_hpd, COMPLEX),
    "nonsym-posdef": (nonsym_posdef, REAL),
    "sym-nonpd": (sym_nonpd, (np.float64,)),
}


def build(name, dtype):
    builder = CASES[name][0]
    out = builder()
    A, b = out if isinstance(out, tuple) else (out, None)
    A = A.astype(dtype)
    b = (np.arange(A.shape[0]) if b is None else b).astype(dtype)
    return A, b


def rtol_for(dtype):
    """SciPy uses 1e-8 in double; in single precision 1e-3 is what SciPy itself meets honestly."""
    return 1e-8 if np.dtype(dtype).char in "dD" else 1e-3


def nonsym_dominant(n, dtype, seed=0):
    """A nonsymmetric, diagonally dominant ``n x n`` system (A, b) in ``dtype`` (complex: a
    complex perturbation and b): CGS and GMRES converge on it in a few steps."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=min(1.0, 6 / n), random_state=seed, format="csr")
    A = A - A.T * 0.5 + sp.eye(n) * 4
    b = rng.standard_normal(n)
    if np.issubdtype(dtype, np.complexfloating):
        A = A + 1j * sp.random(n, n, density=min(1.0, 3 / n), random_state=seed + 1)
        b = b + 1j * rng.standard_normal(n)
    return sp.csr_matrix(A, dtype=dtype), b.astype(dtype)
