import math

import numpy as np


def dotprod(x):
    """SciPy's inner product: conjugate-linear in the first argument for complex data."""
    return np.vdot if np.iscomplexobj(x) else np.dot


def norm(r):
    return float(np.linalg.norm(r))


def breakdown_tol(dtype):
    """SciPy's rhotol / omegatol: eps**2 of the working precision."""
    return np.finfo(np.dtype(dtype).char).eps ** 2


def _two_product(a, c):
    """Error-free products of float64 arrays: a * c == p + e exactly (Dekker's split)."""
    p = a * c
    f = 134217729.0                                     # 2**27 + 1
    ah = f * a
    ah = ah - (ah - a)
    ch = f * c
    ch = ch - (ch - c)
    e = ((ah * ch - p) + ah * (c - ch) + (a - ah) * ch) + (a - ah) * (c - ch)
    return p, e


def _exact_sum_of_products(pairs):
    """sum of x * y over the (x, y) real array pairs, correctly rounded to float64."""
    terms = []
    for x, y in pairs:
        p, e = _two_product(np.asarray(x, np.float64), np.asarray(y, np.float64))
        terms += (p, e)
    return math.fsum(np.concatenate(terms)) if terms else 0.0


def dot_accurate(a, b):
    """<a, b> (conjugate-linear in a), correctly rounded: the confirmation of a breakdown test.

    SciPy's test |rho| < eps**2 is met, in practice, only when the sum cancels to 0 or a few ulps,
    and whether it does depends on the summation order: on a near-orthogonal <r~, r> one order
    breaks down where another goes on (orsirr_1 + BiCGStab + Jacobi: 4 in 24 right-hand sides
    perturbed by 1e-15 break down with NumPy's dot, none with this one). Every dpsolve variant
    therefore recomputes a rho below eps**2 accurately before it reports -10 (the GPU variants
    with Dot2 in dps::dot_accurate), and goes on with the accurate value when it is not below;
    the same holds for the -11 tests (<p~, A p> == 0, <r~, v> == 0, and <t, s> of an |omega|
    below eps**2). A breakdown in exact arithmetic is still reported.
    """
    dt = np.result_type(a, b)
    a0, b0 = a, b
    with np.errstate(all="ignore"):
        if np.iscomplexobj(a) or np.iscomplexobj(b):
            a, b = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
            (ar, ai), ea = _unit_scaled(a.real, a.imag)
            (br, bi), eb = _unit_scaled(b.real, b.imag)
            re = _exact_sum_of_products([(ar, br), (ai, bi)])
            im = _exact_sum_of_products([(ar, bi), (-ai, br)])
            value = complex(ldexp_or_inf(re, ea + eb), ldexp_or_inf(im, ea + eb))
        else:
            (a,), ea = _unit_scaled(np.asarray(a, np.float64))
            (b,), eb = _unit_scaled(np.asarray(b, np.float64))
            value = ldexp_or_inf(_exact_sum_of_products([(a, b)]), ea + eb)
        value = dt.type(value)
        if np.isfinite(value):
            return value
        # where even the accurate sum leaves the range (or its input holds inf / NaN), the fast
        # value stands: the test is then made on what the iteration computed (as on the GPU)
        return dotprod(a0)(a0, b0)


def _unit_scaled(*parts):
    """The real arrays ``parts`` times one power of two 2^-e that brings their largest
    magnitude into [0.5, 1) (exact), and e: no product of two such entries, nor Dekker's split of
    one, can overflow, and a sum of n products stays below n."""
    m = max((float(np.max(np.abs(p))) for p in parts if p.size), default=0.0)
    if m == 0 or not np.isfinite(m):
        return parts, 0
    e = int(np.frexp(m)[1])
    return tuple(np.ldexp(p, -e) for p in parts), e


def ldexp_or_inf(v: float, e: int) -> float:
    """v 2^e, +-inf past the largest float (math.ldexp raises OverflowError there)."""
    try:
        return math.ldexp(v, e)
    except OverflowError:
        return math.copysign(math.inf, v)


def confirmed_dot(space, a, b, fails):
    """<a, b> as a breakdown test sees it: the fast sum, recomputed with the accurate one
    (``space.dot_accurate``) where ``fails(value)`` says the test fails on it; the caller then
    makes the test on the value returned. Every dpsolve method confirms its breakdown tests so
    (see dot_accurate; on the device, dps::confirm_dot)."""
    v = space.dot(a, b)
    return space.dot_accurate(a, b) if fails(v) else v


def all_finite(*vals):
    """Whether every scalar is finite (both parts of a complex one): dpsolve's non-finite stop."""
    return all(np.isfinite(v) for v in vals)


class LocalSpace:
    """The vector space of a solve whose vectors are whole in this process (the default of every
    reference solver's ``space=``): NumPy's inner product and norm, today's behaviour bit for bit.

    A reference solver reaches its vectors' global reductions only through a space:

        space.dot(a, b)           <a, b>, conjugate-linear in a (SciPy's), in the working dtype
        space.dots(pairs)         [<a, b> for (a, b) in pairs] in ONE reduction, each the bits
                                  of ``dot(a, b)`` (the single-reduction CG's)
        space.norm(r)             ||r||_2 as a Python float
        space.dot_accurate(a, b)  <a, b> correctly rounded (the confirmation of a breakdown test)
        space.any(x)              whether any entry of x is nonzero (decides r_0 = b - A x_0)

    so that the same solver runs on one process (this class) or on the rows of one rank of a
    distributed system (``dpsolve.distributed.DistributedSpace``, whose five all-reduce).
    ``dot`` is the inner product to use (``dotprod(x)`` of the solver's module, looked up when
    the solve starts); None picks it from the first argument's dtype at each call.
    """

    def __init__(self, dot=None):
        self._dot = dot

    def dot(self, a, b):
        return (self._dot or dotprod(a))(a, b)

    def dots(self, pairs):
        return [self.dot(a, b) for a, b in pairs]

    def norm(self, r):
        return norm(r)

    def dot_accurate(self, a, b):
        return dot_accurate(a, b)

    def any(self, x):
        return bool(x.any())
