"""Fuzz test (hypothesis, CPU): dpsolve.cg / bicg / bicgstab with ``variant="host"`` against SciPy.

Systems of order 1-60 of five kinds: SPD, nonsymmetric (diagonally dominant), symmetric
indefinite, complex Hermitian positive definite, and singular (symmetric positive semidefinite of
rank n-1, with a consistent or an inconsistent right-hand side); A as a CSR array or a dense
array; rtol and atol each in {0, 1e-300, 1e-5, 1e-2, inf} (the edge values the brief asks for,
plus two ordinary ones so that the comparison below has cases to compare); maxiter in
{1, 2, 5, None}; every kind of M: None, "jacobi" (where the diagonal has no zero), a 1-D inverse
diagonal, a diagonal sparse matrix, a general LinearOperator; x0 None or random; b of scale 1,
1e-300 or 1e+300.

Invariants, on every example:

1. No exception: every input is valid (Jacobi is used only where the diagonal has no zero).
2. Nothing the caller passed in is modified (A, b, x0, M compared with copies taken before).
3. ``info == 0`` only when the true residual meets the tolerance: ||b - A x|| <= max(atol,
   rtol ||b||), both norms computed without overflow or underflow (scaled), with a relative slack
   of 1e-10 for the rounding of the norms themselves, and A x computed as dpsolve computes it,
   a CSR product in each row's column order (A as the caller passed it may be dense, whose
   product rounds otherwise). SciPy's rule applies: atol = max(atol, rtol ||b||), so rtol = atol
   = 0 asks for an exact zero residual, which never counts as reached on a recurrence (SciPy's
   ``norm(r) < atol`` is strict); dpsolve's true residual decides it (the contract's item 13: an
   exactly zero b - A x is success), so there the product's rounding is the whole question: CGS
   on a nonsymmetric 5 x 5 system ended with b - A x exactly 0 by the CSR product and 2.8e-17 by
   the dense one (found by 15x this file's examples, not derandomized). In float32, exactly 0 in
   float32 (``_working_residual``): a float32 x = b / a of a subnormal b leaves 2^-151 in
   float64 (found by 25x).
4. The same sign of ``info`` as SciPy (0: converged, > 0: not converged, < 0: breakdown) where
   SciPy is *not chaotic*, defined as all of:
   * b of scale 1 (no inner product or norm overflows or underflows);
   * a well-conditioned system of a kind the method is meant for: CG on the SPD or Hermitian
     positive definite kinds (eigenvalues in [1, 1000]) with no M or a Hermitian positive definite
     one; BiCG and BiCGStab on those or on the nonsymmetric kind (diagonally dominant), any M;
   * a tolerance tol = max(atol, rtol ||b||) that is infinite, or at least 1e-6 ||b|| (far above
     the accuracy these systems reach, cond * eps ||b|| <= 1e-12 ||b||): never 0 (with tol = 0
     SciPy iterates on after an exact solution, 0/0 gives NaN, and its info is maxiter while
     dpsolve's CG stops with -10), never 1e-300 ||b|| (SciPy's recurrence residual keeps falling
     below the attainable true residual and can underflow, so its info 0 there is luck);
   * SciPy's sign of info is the same when the tolerance is moved by -1 % and by +1 % (the
     residual does not cross the tolerance within rounding distance of it at the last iteration).

Settings: derandomize=True and no example database, so that every run tries the same examples;
a bounded number of examples per case, under 60 s in all on 2 cores.

The tests: ``test_host_solvers_against_scipy`` checks all four invariants on b of scale 1;
``test_host_solvers_at_extreme_scales`` checks invariants 1 and 2 on b of scale 1e-300 and
1e+300 (invariant 4 does not apply there); ``test_extreme_scales_solve_as_scale_1_does`` checks
invariant 3 there, and that a system scaled by s gives the sign of info it gives at scale 1
(atol = 0, so that the tolerance scales too; where SciPy at scale 1 is not chaotic). It was a
strict xfail until dpsolve scaled extreme right-hand sides (issue 29, class 2).

Then one property per class of false success of issue 29, each with the true residual computed
scaled in float64 as its oracle (not SciPy, which shares class 2):

1. indices held in int64 / uint64 (or float) with an entry past the int32 range, or negative:
   a FormatError, never a solve of the narrowed matrix; intact wide indices solve A;
2. right-hand sides of every scale in float32 and float64 (subnormal to near overflow);
3. ``prepare`` / ``update`` with a dtype that would drop an imaginary part: a TypeError;
4. one prepared system shared by threads, and re-entered from its own callback;
5. a forced restart: runs that claim convergence (some at once) with the true residual above
   the tolerance.

Last, ``test_a_prepared_system_solves_as_the_one_shot_call``: a prepared host system (after an
``update`` too) gives the one-shot call's x bit for bit, with dpsolve's own M (Jacobi,
Chebyshev, AMG).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import LinearOperator

import dpsolve

METHODS = dpsolve.methods.names()     # the method table: every method
KINDS = ("spd", "nonsym", "indefinite", "hermitian", "singular")
TOLS = (0.0, 1e-300, 1e-5, 1e-2, np.inf)
MAXITERS = (1, 2, 5, None)
PRECONDS = ("none", "jacobi", "inv-diag", "diag-sparse", "operator")
SCALES = (1.0, 1e-300, 1e300)
SLACK = 1e-10
FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


# --------------------------------------------------------------------------- the systems
def times_power_of_two(v, k):
    """v times 2^k in complex128, exactly where the result is normal (ldexp on each part): the
    oracles' way to bring b and a subnormal x to scale 1 before a product with A."""
    v = np.asarray(v, np.complex128)
    return np.ldexp(v.real, k) + 1j * np.ldexp(v.imag, k)


def scaled_norm(v) -> float:
    """||v||_2 without overflow or underflow (as BLAS nrm2 does): 2^e ||v / 2^e|| with 2^e the
    power of two above max|v|, applied to each part by ldexp (exact). Not v / max|v|: a complex
    division by a subnormal max|v| overflows (its 1 / |s|^2), which made a GMRES residual of
    1.4e-315 read as inf."""
    v = np.asarray(v)
    s = float(np.max(np.abs(v))) if v.size else 0.0
    if s == 0.0 or not np.isfinite(s):
        return s
    e = int(np.frexp(s)[1])
    w = np.ldexp(v.real, -e) + (1j * np.ldexp(v.imag, -e) if np.iscomplexobj(v) else 0)
    return float(np.ldexp(np.linalg.norm(w), e))


def _orthogonal(rng, n, complex_):
    G = rng.standard_normal((n, n))
    if complex_:
        G = G + 1j * rng.standard_normal((n, n))
    Q, _ = np.linalg.qr(G)
    return Q


def make_matrix(kind, n, rng) -> np.ndarray:
    """A dense matrix of the kind; the SPD / Hermitian ones have eigenvalues in [1, 1000]."""
    if kind in ("spd", "hermitian"):
        Q = _orthogonal(rng, n, kind == "hermitian")
        ev = np.exp(rng.uniform(0, np.log(1000), n))
        A = (Q * ev) @ Q.conj().T
        return (A + A.conj().T) / 2
    if kind == "nonsym":                     # diagonally dominant, positive diagonal
        A = rng.standard_normal((n, n)) * (rng.random((n, n)) < min(1.0, 4.0 / n))
        np.fill_diagonal(A, 0.0)
        d = np.abs(A).sum(axis=1) + rng.uniform(1.0, 10.0, n)
        return A + np.diag(d)
    if kind == "indefinite":
        Q = _orthogonal(rng, n, False)
        ev = rng.uniform(1, 100, n) * rng.choice([-1.0, 1.0], n)
        A = (Q * ev) @ Q.T
        return (A + A.T) / 2
    Q = _orthogonal(rng, n, False)           # singular: PSD of rank n - 1
    ev = rng.uniform(1, 100, n)
    ev[0] = 0.0
    A = (Q * ev) @ Q.T
    return (A + A.T) / 2


def make_preconditioner(kind, A, rng):
    """(M for dpsolve, M for SciPy, Hermitian positive definite?) or None where it does not apply
    (Jacobi on a zero diagonal entry)."""
    n = A.shape[0]
    d = np.diag(A)
    if kind == "none":
        return None, None, True
    if kind == "jacobi":
        if np.any(d == 0):
            return None
        return "jacobi", sp.diags_array(1.0 / d), bool(np.all(d.real > 0))
    if kind == "inv-diag":
        inv = rng.uniform(0.5, 2.0, n) / np.where(d == 0, 1.0, np.abs(d))
        return inv, sp.diags_array(inv), True
    if kind == "diag-sparse":
        inv = rng.uniform(0.5, 2.0, n) / np.where(d == 0, 1.0, np.abs(d))
        Md = sp.diags_array(inv, format="csr")
        return Md, Md, True
    G = rng.standard_normal((n, n))          # a general (dense) Hermitian positive definite P
    P = np.diag(1.0 / np.maximum(np.abs(d), 1.0)) + 0.01 * (G @ G.T) / n
    op = LinearOperator((n, n), matvec=lambda v: P @ v, rmatvec=lambda v: P.T @ v,
                        dtype=np.float64)
    op.P = P
    return op, op, True


def _copy(M):
    if isinstance(M, np.ndarray):
        return M.copy()
    if sp.issparse(M):
        return M.copy()
    if isinstance(M, LinearOperator):
        return M.P.copy()
    return M


def _same(a, b) -> bool:
    if isinstance(a, LinearOperator):
        a = a.P
    if sp.issparse(a):
        a, b = sp.csr_array(a), sp.csr_array(b)
        return (np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
                and np.array_equal(a.data, b.data))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return a == b


@st.composite
def problems(draw, scale):
    method = draw(st.sampled_from(METHODS))
    kind = draw(st.sampled_from(KINDS))
    n = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return dict(
        method=method, kind=kind, n=n, seed=seed, scale=scale,
        dense=draw(st.booleans()), consistent=draw(st.booleans()),
        x0=draw(st.booleans()), rtol=draw(st.sampled_from(TOLS)), atol=draw(st.sampled_from(TOLS)),
        maxiter=draw(st.sampled_from(MAXITERS)), precond=draw(st.sampled_from(PRECONDS)))


def build(p):
    """The inputs of one example: A (CSR or dense), b, x0, M (dpsolve's and SciPy's)."""
    rng = np.random.default_rng(p["seed"])
    n, kind = p["n"], p["kind"]
    Ad = make_matrix(kind, n, rng)
    cplx = np.iscomplexobj(Ad)
    if kind == "singular" and p["consistent"]:
        b = Ad @ rng.standard_normal(n)
    else:
        b = rng.standard_normal(n) + (1j * rng.standard_normal(n) if cplx else 0)
    b = b / max(np.max(np.abs(b)), 1e-300) * p["scale"]
    x0 = None
    if p["x0"]:
        x0 = (rng.standard_normal(n) + (1j * rng.standard_normal(n) if cplx else 0)) * p["scale"]
    pre = make_preconditioner(p["precond"], Ad, rng)
    A = Ad if p["dense"] else sp.csr_array(Ad)
    return A, Ad, b, x0, pre


def tolerance(p, b) -> float:
    """SciPy's rule, max(atol, rtol ||b||), with ||b|| computed without overflow or underflow
    (0 * inf, for rtol = 0 and an infinite ||b||, does not arise: the scaled norm is finite).
    rtol = inf and b = 0 (a consistent singular system of order 1) is rtol ||b|| = 0, not NaN:
    SciPy returns x = 0 at once for b = 0, and so does dpsolve."""
    bn = scaled_norm(b)
    return max(p["atol"], p["rtol"] * bn if bn else 0.0)


def not_chaotic(p, b, Mherm, scipy_solve) -> bool:
    """Where the sign of SciPy's info can be compared with dpsolve's (see the module docstring)."""
    if p["scale"] != 1.0 or p["kind"] not in ("spd", "hermitian", "nonsym"):
        return False
    if p["method"] == "cg" and (p["kind"] == "nonsym" or not Mherm):
        return False
    tol, bn = tolerance(p, b), scaled_norm(b)
    if not (tol == np.inf or tol >= 1e-6 * bn):
        return False
    base = np.sign(scipy_solve(1.0))
    return all(np.sign(scipy_solve(f)) == base for f in (0.99, 1.01))


def run_both(p, A, b, x0, pre):
    Md, Ms, _ = pre
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings(                # invariant 1: no floating-point warning escapes
            "error", r"(overflow|invalid value|divide by zero|underflow) encountered",
            RuntimeWarning)
        x, info, rep = getattr(dpsolve, p["method"])(
            A, b, x0, rtol=p["rtol"], atol=p["atol"], maxiter=p["maxiter"], M=Md,
            variant="host", full_output=True)
    return x, info, rep


def scipy_info(p, A, b, x0, Ms, factor=1.0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, info = getattr(sla, p["method"])(A, b, None if x0 is None else x0.copy(),
                                            rtol=p["rtol"] * factor, atol=p["atol"] * factor,
                                            maxiter=p["maxiter"], M=Ms)
    return info


def check(p, check_residual=True):
    A, Ad, b, x0, pre = build(p)
    if pre is None:                          # Jacobi on a zero diagonal entry: not a valid input
        return
    Md, Ms, Mherm = pre
    saved = (A.copy(), b.copy(), None if x0 is None else x0.copy(), _copy(Md))
    x, info, rep = run_both(p, A, b, x0, pre)                              # invariant 1
    # 2. nothing the caller passed in is modified
    assert _same(A, saved[0]) and _same(b, saved[1]), "A or b was modified"
    assert x0 is None or _same(x0, saved[2]), "x0 was modified"
    assert _same(Md, saved[3]), "M was modified"
    assert x.shape == b.shape and isinstance(info, int)
    # 3. info == 0 only when the true residual meets the tolerance
    if info == 0 and check_residual:
        tol = tolerance(p, b)
        res = scaled_norm(b - sp.csr_array(Ad) @ x)
        assert res <= tol * (1 + SLACK), \
            f"info 0 but ||b - A x|| = {res:.3e} > tol = {tol:.3e} ({rep.iterations} it)"
    # 4. the sign of info is SciPy's where SciPy is not chaotic
    if p["scale"] == 1.0 and not_chaotic(p, b, Mherm,
                                         lambda f: scipy_info(p, A, b, x0, Ms, f)):
        s = scipy_info(p, A, b, x0, Ms)
        assert np.sign(info) == np.sign(s), f"info {info} (dpsolve) vs {s} (SciPy)"


# --------------------------------------------------------------------------- the tests
@settings(FUZZ, max_examples=1000)
@given(p=problems(1.0))
def test_host_solvers_against_scipy(p):
    """Every invariant on b of scale 1."""
    check(p)


@pytest.mark.parametrize("scale", [1e-300, 1e300], ids=["b-1e-300", "b-1e+300"])
@settings(FUZZ, max_examples=200)
@given(data=st.data())
def test_host_solvers_at_extreme_scales(scale, data):
    """Invariants 1 and 2 (no exception, inputs untouched) on b of scale 1e-300 and 1e+300;
    invariant 3 there is the next test's."""
    check(data.draw(problems(scale)), check_residual=False)


@pytest.mark.parametrize("scale", [1e-300, 1e300], ids=["b-1e-300", "b-1e+300"])
@settings(FUZZ, max_examples=150, phases=[Phase.explicit, Phase.generate])     # no shrinking
@given(data=st.data())
def test_extreme_scales_solve_as_scale_1_does(scale, data):
    """Invariant 3 at b of scale 1e-300 and 1e+300, and scale invariance: with atol = 0 (so that
    the tolerance scales with b) the sign of info at scale s is the one at scale 1 (x0 scaled
    too), where SciPy at scale 1 is not chaotic."""
    p = data.draw(problems(scale))
    check(p)
    if p["atol"] != 0 or p["rtol"] == 0:
        return
    p1 = {**p, "scale": 1.0}
    A1, _, b1, x01, pre1 = build(p1)
    if pre1 is None or not not_chaotic(p1, b1, pre1[2],
                                       lambda f: scipy_info(p1, A1, b1, x01, pre1[1], f)):
        return
    _, info1, _ = run_both(p1, A1, b1, x01, pre1)
    A, _, b, x0, pre = build(p)
    _, info, _ = run_both(p, A, b, x0, pre)
    assert np.sign(info) == np.sign(info1), \
        f"info {info} at b of scale {scale:g}, {info1} at scale 1"


@settings(FUZZ, max_examples=200, phases=[Phase.explicit, Phase.generate])     # no shrinking
@given(p=problems(1.0), k=st.sampled_from([-900, -400, 400, 900]))
def test_a_matrix_far_from_1_solves_as_scale_1_does(p, k):
    """A * 2^k far outside the window where A is solved as it is (``_system.scale_matrix``), b
    as at scale 1, dpsolve's own M (none, Jacobi): the info and iterations of scale 1, and
    x = x1 / 2^k to the bit wherever that is a normal float (the solve runs A / 2^f, exact).
    Not where an absolute test ends the run at scale 1: a breakdown (info < 0; SciPy's |rho| <
    eps^2, whose rho scales with M = D^-1, so with A), or rtol = atol = 0, where every run ends
    by exhausting the precision in such a test: BiCG with Jacobi on a Hermitian system of order
    46 took 109 iterations at A, 112 at A * 2^+-400 (both solved as A * 2^-8) and 202 at A * 2^-100
    (solved as it is), maxiter each time (found by 15x this file's examples, not derandomized)."""
    if p["precond"] not in ("none", "jacobi"):
        return                               # a user's M approximates the unscaled A^-1
    if p["rtol"] == 0 and p["atol"] == 0:
        return
    A1, Ad1, b, x0, pre = build(p)
    if pre is None:
        return
    s = np.ldexp(1.0, k)
    A = A1 * s
    x0 = None if x0 is None else x0 / s
    x1, info1, rep1 = run_both(p, A1, b, None if x0 is None else x0 * s, pre)
    if info1 < 0:
        return
    x, info, rep = run_both(p, A, b, x0, pre)
    assert (info, rep.iterations) == (info1, rep1.iterations)
    with np.errstate(over="ignore"):        # x1 / s past the largest float: not compared
        expect = x1 / s
    parts = np.abs(np.concatenate([expect.real, expect.imag]))
    if np.all(np.isfinite(x1)) and parts.max() < np.finfo(np.float64).max / 4 and \
            np.all((parts == 0) | (parts > np.finfo(np.float64).tiny)):
        np.testing.assert_array_equal(x, expect)


# --------------------------------------------------------------------------- issue 29, 1-5
def _oracle(A, x, b, info, rep, tol):
    """info 0 only when the true residual (float64, scaled) meets ``tol``; the report agrees.
    A zero ``tol`` (rtol = atol = 0, or rtol ||b|| below the smallest float64) asks for b - A x
    exactly 0 as the working precision computes it (README): x's dtype, on b as dpsolve solves
    it (b / 2^e where ||b||^2 leaves the safe range), a CSR product. A float32 x of a subnormal
    b has b - A x of 2^-151 in float64 and 0 in float32: the solve's success, by its rule."""
    assert rep.converged == (info == 0)
    if info == 0:
        Ad = sp.csr_array(A, dtype=np.complex128 if np.iscomplexobj(A) or np.iscomplexobj(b)
                          else np.float64)
        xs = np.asarray(x, dtype=Ad.dtype)
        m = 2.0 ** int(np.frexp(float(np.max(np.abs(xs))))[1])    # exact: a power of two
        res = scaled_norm(np.asarray(b, Ad.dtype) / m - Ad @ (xs / m)) * m
        if tol == 0 and res > 0:
            assert not _working_residual(A, x, b).any(), \
                f"info 0 at tol 0 but ||b - A x|| = {res:.3e}, not 0 in {np.asarray(x).dtype}"
            return
        assert res <= tol * (1 + 1e-6), f"info 0 but ||b - A x|| = {res:.3e} > tol {tol:.3e}"


def _working_residual(A, x, b):
    """b - A x as the solve computes it: in x's dtype, on b / 2^e and x / 2^e, e dpsolve's scale
    of b (``_system.scale_rhs``: 0 where ||b||^2 is in the safe range), a CSR product."""
    from dpsolve._system import abs_max, exponent_of, in_safe_range, sum_of_squares
    x = np.asarray(x)
    dt = x.dtype
    b = np.asarray(b, dt)
    e = 0 if in_safe_range(sum_of_squares(b), dt) else exponent_of(abs_max(b))
    scaled = [times_power_of_two(v, -e) for v in (b, x)]
    bs, xs = (v.astype(dt) if dt.kind == "c" else v.real.astype(dt) for v in scaled)
    return bs - sp.csr_array(A, dtype=dt) @ xs


@settings(FUZZ, max_examples=120)
@given(n=st.integers(2, 30), seed=st.integers(0, 2 ** 32 - 1),
       fmt=st.sampled_from(["csr", "csc", "coo"]), idx=st.sampled_from(["int64", "uint64"]),
       damage=st.sampled_from(["none", "past-int32", "negative", "float"]))
def test_class1_wide_indices_never_solve_another_matrix(n, seed, fmt, idx, damage):
    rng = np.random.default_rng(seed)
    off = rng.uniform(-1, 1, n - 1)                 # sparse (tridiagonal) SPD: an index wrapped
    Ad = np.diag(rng.uniform(2.5, 5, n)) + np.diag(off, 1) + np.diag(off, -1)   # by 2^32 lands
    A = getattr(sp.csr_array(Ad), f"to{fmt}")()     # on its own column, with no duplicate
    if fmt == "coo":
        arrays = [a.astype(idx) for a in A.coords]
    else:
        arrays = [A.indices.astype(idx), A.indptr.astype(idx)]
    k = int(rng.integers(arrays[0].size))
    if damage == "past-int32":
        arrays[0][k] += 2 ** 32
    elif damage == "negative" and idx == "int64":
        arrays[0][k] = -1 - arrays[0][k]
    elif damage == "float":
        arrays[0] = arrays[0].astype(np.float64)
    if fmt == "coo":
        A.coords = tuple(arrays)
    else:
        A.indices, A.indptr = arrays
    b = rng.standard_normal(n)
    damaged = damage in ("past-int32", "float") or (damage == "negative" and idx == "int64")
    if damaged:
        with pytest.raises(dpsolve.FormatError):
            dpsolve.cg(A, b, variant="host")
        return
    x, info, rep = dpsolve.cg(A, b, rtol=1e-8, variant="host", full_output=True)
    _oracle(Ad, x, b, info, rep, 1e-8 * scaled_norm(b))
    assert info == 0


@settings(FUZZ, max_examples=150)
@given(p=problems(1.0), dtype=st.sampled_from(["float32", "float64"]),
       exponent=st.integers(-1000, 1000))
@example(p=dict(method="bicgstab", kind="spd", n=1, seed=0, scale=1.0, dense=False,    # 11-30:
                consistent=False, x0=False, rtol=1e-300, atol=0.0, maxiter=2,         # -10 at
                precond="inv-diag"), dtype="float64", exponent=257)                   # 1/2, 0 at 1
def test_class2_every_scale_of_b(p, dtype, exponent):
    """b = 2^k b_1 for k across the whole range of the dtype (clipped so that b and its solution
    stay normal): info 0 only where the true residual meets the tolerance; where dpsolve scales
    b (outside the safe range), the sign of info is that of the system it solves, b_1 brought to
    max|b| in [1/2, 1) (b_1 / 2: max|b_1| = 1), the scaling being exact. (Not b_1's own: SciPy's
    breakdown tests are absolute -- |rho| < eps^2 -- so inside the range a scale can change a
    verdict: BiCG on a b of 1e-16 breaks down where it solves at 1, in SciPy as in dpsolve, and
    BiCGStab restarted from a residual of b's rounding breaks down at 1/2 where it solves at 1,
    found with 25 times the examples, 2026-11-30.)"""
    real = np.dtype(dtype)
    emax = np.finfo(real).maxexp - 12
    k = int(np.clip(exponent, -emax + 12, emax))
    if p["kind"] in ("hermitian",):
        return
    A, Ad, b1, x01, pre = build({**p, "x0": False})
    if pre is None or callable(pre[0]) and not isinstance(pre[0], str):
        return
    A = sp.csr_array(A, dtype=real)
    Md = pre[0] if not isinstance(pre[0], np.ndarray) else pre[0].astype(real)
    if isinstance(Md, LinearOperator):
        return
    b1 = b1.astype(real)
    b = (b1 * np.ldexp(real.type(1), k)).astype(real)
    kw = dict(rtol=max(p["rtol"], 1e-4 if real == np.float32 else 0.0), atol=0.0,
              maxiter=p["maxiter"], M=Md, variant="host", full_output=True)
    b_half = np.ldexp(b1, -int(np.frexp(np.abs(b1).max())[1])).astype(real)   # dpsolve's scale
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        x1, info1, _ = getattr(dpsolve, p["method"])(A, b_half, **kw)
        x, info, rep = getattr(dpsolve, p["method"])(A, b, **kw)
    _oracle(A, x, b, info, rep, tolerance({"atol": 0.0, "rtol": kw["rtol"]}, b))
    from dpsolve._system import in_safe_range, sum_of_squares
    if not in_safe_range(sum_of_squares(b), real):
        assert np.sign(info) == np.sign(info1), f"info {info} at 2^{k}, {info1} at 1/2"


@pytest.mark.parametrize("variant", ["host", pytest.param("cuda", marks=pytest.mark.gpu),
                                     pytest.param("graph", marks=pytest.mark.gpu)])
@settings(FUZZ, max_examples=60)
@given(p=problems(1.0), k=st.integers(-149, -127))
@example(p=dict(method="cg", kind="spd", n=1, seed=43, scale=1.0, dense=False, consistent=False,
                x0=False, rtol=0.0, atol=0.0, maxiter=2, precond="none"),
         k=-127)                        # 11-30: exactly 0 in float32, 2^-151 in float64
def test_class2_a_float32_b_below_the_normal_range(variant, p, k):
    """A float32 b whose every entry is a subnormal (max|b| = 2^k, k from -149 to -127): solved,
    never answered as b = 0 -- x = 0 with info 0, what every device path did while CuPy's
    -ftz=true kernels read the subnormals as 0 (dpsolve._system.flushes) -- and info 0 only
    where the true residual of the x returned, a subnormal of a few bits where k is low, meets
    the tolerance. On a GPU machine the cuda and graph variants too (CG, BiCG, BiCGStab; no M or
    Jacobi)."""
    if p["kind"] in ("hermitian",) or variant != "host" and (
            p["method"] not in ("cg", "bicg", "bicgstab") or p["precond"] not in ("none",
                                                                                  "jacobi")):
        return
    A, Ad, b1, _, pre = build({**p, "x0": False})
    if pre is None or isinstance(pre[0], LinearOperator):
        return
    A = sp.csr_array(A, dtype=np.float32)
    Md = pre[0] if not isinstance(pre[0], np.ndarray) else pre[0].astype(np.float32)
    b = np.ldexp(b1, k).astype(np.float32)           # b1: max|b1| = 1
    if not b.any():
        return
    assert np.abs(b).max() < np.finfo(np.float32).tiny
    kw = dict(rtol=p["rtol"], atol=0.0, maxiter=p["maxiter"], M=Md, variant=variant,
              full_output=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        x, info, rep = getattr(dpsolve, p["method"])(A, b, **kw)
    event("info 0" if info == 0 else "info > 0" if info > 0 else "breakdown")
    _oracle(A, x, b, info, rep, tolerance({"atol": 0.0, "rtol": p["rtol"]}, b))


@settings(FUZZ, max_examples=60)
@given(n=st.integers(2, 20), seed=st.integers(0, 2 ** 32 - 1),
       method=st.sampled_from(METHODS), into=st.sampled_from(["float32", "float64"]),
       where=st.sampled_from(["A", "M", "update"]))
def test_class3_no_cast_drops_an_imaginary_part(n, seed, method, into, where):
    rng = np.random.default_rng(seed)
    Ad = make_matrix("hermitian", n, rng)
    real = sp.csr_array(Ad.real + np.diag(np.abs(Ad).sum(axis=1)))
    with pytest.raises(TypeError, match="complex"):
        if where == "A":
            dpsolve.prepare(sp.csr_array(Ad), method, dtype=into, variant="host")
        elif where == "M":
            dpsolve.prepare(real, method, M=np.full(n, 0.1 + 0.1j), dtype=into, variant="host")
        else:
            P = dpsolve.prepare(real, method, dtype=into, variant="host")
            P.update(sp.csr_array(Ad))


@settings(FUZZ, max_examples=25)
@given(seed=st.integers(0, 2 ** 32 - 1), method=st.sampled_from(METHODS),
       threads=st.integers(2, 6))
def test_class4_threads_and_reentry(seed, method, threads):
    """One prepared system shared by threads: every solve meets its own b; a solve re-entered
    from its own callback is refused, and the system serves the next call."""
    import concurrent.futures
    rng = np.random.default_rng(seed)
    n = 30
    Ad = make_matrix("spd" if method == "cg" else "nonsym", n, rng)
    P = dpsolve.prepare(sp.csr_array(Ad), method, variant="host")
    bs = [rng.standard_normal(n) * 10.0 ** rng.integers(-5, 6) for _ in range(3 * threads)]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        outs = list(pool.map(lambda b: P.solve(b, rtol=1e-8, full_output=True), bs))
    for b, (x, info, rep) in zip(bs, outs):
        _oracle(Ad, x, b, info, rep, 1e-8 * scaled_norm(b))
    with pytest.raises(RuntimeError, match="re-entered"):
        P.solve(bs[0], callback=lambda xk: P.solve(bs[1]))
    x, info, rep = P.solve(bs[1], rtol=1e-8, full_output=True)
    _oracle(Ad, x, bs[1], info, rep, 1e-8 * scaled_norm(bs[1]))


@settings(FUZZ, max_examples=80)
@given(p=problems(1.0), lies=st.integers(1, 12), at_once=st.booleans())
def test_class5_forced_restarts(p, lies, at_once):
    """The reference solver lies ``lies`` times: it claims convergence after at most one step
    (``at_once``: after none). info 0 only where the true residual meets the tolerance."""
    A, Ad, b, x0, pre = build(p)
    if pre is None:
        return
    real = dpsolve.methods.get(p["method"]).reference_solver()
    calls = {"n": 0}

    def liar(matvec, b, x, *, atol, maxiter, **kw):
        calls["n"] += 1
        if calls["n"] <= lies:
            if at_once:
                return x, 0, 0
            kw.pop("callback", None)
            x, _, its = real(matvec, b, x, atol=atol, maxiter=1, **kw)
            return x, 0, its
        return real(matvec, b, x, atol=atol, maxiter=maxiter, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(dpsolve.methods.TABLE, (p["method"], "host"), liar)
        x, info, rep = run_both(p, A, b, x0, pre)
    _oracle(Ad, x, b, info, rep, tolerance(p, b))
    assert rep.converged == (rep.residual_norm <= rep.tolerance) or info != 0


@settings(FUZZ, max_examples=150, phases=[Phase.explicit, Phase.generate])     # no shrinking
@given(p=problems(1.0), ea=st.sampled_from([-600, 0, 600]), eb=st.sampled_from([-900, 0, 900]),
       ex=st.sampled_from([-1100, -600, 0, 600, 1100]))
@example(p=dict(method="gmres", kind="nonsym", n=10, seed=4096, scale=1.0, dense=False,
                consistent=True, x0=True, rtol=0.01, atol=0.01, maxiter=2, precond="jacobi"),
         ea=600, eb=900, ex=600)          # 11-30: the residual past the largest float raised
@example(p=dict(method="bicgstab", kind="singular", n=1, seed=586, scale=1.0, dense=False,
                consistent=False, x0=False, rtol=np.inf, atol=np.inf, maxiter=5,
                precond="operator"), ea=600, eb=-900, ex=1100)     # A = 0: x0 stays in range
def test_class6_an_x0_at_a_scale_apart(p, ea, eb, ex):
    """A * 2^ea, b * 2^eb (each far enough to be scaled, or not) and x0 2^ex times the
    solution's scale 2^(eb - ea): invariants 1 (no floating-point warning either) and 3; x
    finite, unless the solution itself is past the largest float (eb - ea = 1,500); and an x0
    that the solve's scaling carries past the largest float (ex = 1,100 where A or b is
    scaled: x0 * 2^(f - e) ~ 2^(ex + a few)) stops at once: info -10 (0 where the tolerance is
    infinite: any x meets it), 0 iterations, x = x0 bit for bit, a NaN residual
    (``_frontend.at_once``). Before that rule, NumPy warned and x came back infinite (found by
    an ad-hoc sweep, 2026-11-30)."""
    A1, Ad1, b1, x01, pre = build({**p, "x0": True})
    if pre is None:
        return
    solution = eb - ea
    if solution + ex + 8 > np.finfo(np.float64).maxexp:
        return                                  # this x0 cannot be written down at all
    A = A1 * np.ldexp(1.0, ea)
    Ad = Ad1 * np.ldexp(1.0, ea)
    b = b1 * np.ldexp(1.0, eb)
    x0 = x01 * np.ldexp(1.0, solution + ex)
    if p["precond"] not in ("none", "jacobi"):
        pre = make_preconditioner("none", Ad, np.random.default_rng(0))
    x, info, rep = run_both(p, A, b, x0, pre)
    if not np.any(b):
        event("b = 0")
        assert info == 0 and not np.any(x)
        return
    # x0 in the solve: x0 2^(f - e), f ~ ea where A is scaled (A = 0 is not: f = 0, and the x0
    # of ea = 600 stays 2^500 there), e ~ eb where b is
    if ex == 1100 and (ea or eb) and (np.any(Ad1) or ea <= 0):
        event("x0 past the range in the solve")
        want = 0 if tolerance(p, b) == np.inf else -10      # an infinite tolerance takes any x
        assert (info, rep.iterations) == (want, 0), (info, rep.iterations)
        np.testing.assert_array_equal(x, x0)
        assert np.isnan(rep.residual_norm)
        return
    if solution < 1000:
        assert np.all(np.isfinite(x)), f"info {info} with a non-finite x"
    event(f"info {'0' if info == 0 else '> 0' if info > 0 else '< 0'}")
    assert rep.converged == (info == 0)
    if info == 0:
        res = _residual_apart(Ad, x, b)
        tol = tolerance(p, b)
        assert res <= tol * (1 + 1e-6), f"info 0 but ||b - A x|| = {res:.3e} > tol {tol:.3e}"


def _residual_apart(Ad, x, b) -> float:
    """||b - A x|| in float64 where A, x and b may lie 2^1500 apart: A x as (A / 2^a)(x / 2^c),
    exact powers of two, brought to b's scale 2^e; a product past b's by the range reads inf."""
    def exp2(v):
        m = float(np.max(np.abs(v))) if np.size(v) else 0.0
        return int(np.frexp(m)[1]) if m else 0
    A = sp.csr_array(Ad, dtype=np.complex128 if np.iscomplexobj(Ad) or np.iscomplexobj(b)
                     else np.float64)
    a, c, e = exp2(A.data), exp2(x), exp2(b)
    y = (A * np.ldexp(1.0, -a)) @ (np.asarray(x, A.dtype) * np.ldexp(1.0, -c))

    def times(v, k):                            # v 2^k, exact, 0 staying 0 (not 0 * inf)
        return np.ldexp(v.real, k) + (1j * np.ldexp(v.imag, k) if np.iscomplexobj(v) else 0)
    with np.errstate(over="ignore", under="ignore"):
        r = times(np.asarray(b, A.dtype), -e) - times(y, a + c - e)
        return float(np.ldexp(scaled_norm(r), e))


@settings(FUZZ, max_examples=150)
@given(p=problems(1.0), name=st.sampled_from([None, "jacobi", "chebyshev", "amg"]),
       updated=st.booleans())
def test_a_prepared_system_solves_as_the_one_shot_call(p, name, updated):
    """``prepare(A, method, M=name, variant="host").solve(b, x0, ...)``, also after an
    ``update(A)`` from another matrix (A / 2 plus half its diagonal), gives the one-shot call's x
    bit for bit and its info, on every kind of system, tolerance and maxiter, with dpsolve's
    own M (GMRES: none or Jacobi), b and x0 untouched; or, where the one-shot call refuses A
    with M, the same error (b = 0 excepted: the one-shot call answers x = 0 before it binds M,
    as SciPy does)."""
    if p["method"] == "gmres" and name in ("chebyshev", "amg"):
        name = None
    A, Ad, b, x0, _ = build(p)
    A = sp.csr_array(Ad)
    kw = dict(rtol=p["rtol"], atol=p["atol"], maxiter=p["maxiter"])
    saved = (b.copy(), None if x0 is None else x0.copy())

    def outcome(call):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return call(), None
            except (ValueError, TypeError) as e:
                return None, e

    def prepared():
        P = dpsolve.prepare(A * 0.5 + sp.diags_array(Ad.diagonal() * 0.5) if updated else A,
                            p["method"], M=name, variant="host")
        if updated:
            P.update(A)
        return P.solve(b, x0, **kw)

    got, err = outcome(prepared)
    assert np.array_equal(b, saved[0]) and (x0 is None or np.array_equal(x0, saved[1]))
    want, werr = outcome(lambda: getattr(dpsolve, p["method"])(A, b, x0, M=name,
                                                              variant="host", **kw))
    if err is not None and werr is None and not np.any(b):
        return
    if err is not None or werr is not None:
        assert type(err) is type(werr) and (updated or str(err) == str(werr)), (err, werr)
        return
    assert got[1] == want[1], (got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])
