import numpy as np


def dotprod(x):
    """SciPy's inner product: conjugate-linear in the first argument for complex data."""
    return np.vdot if np.iscomplexobj(x) else np.dot


def norm(r):
    return float(np.linalg.norm(r))


def breakdown_tol(dtype):
    """SciPy's rhotol / omegatol: eps**2 of the working precision."""
    return np.finfo(np.dtype(dtype).char).eps ** 2
