"""Seeded fuzz test (GPU): dpsolve.cg / bicg / bicgstab on every device variant against their
contract, one-shot and prepared (GPU machines only; marked ``gpu``, so it skips with the reason
elsewhere).

No hypothesis here: every case is drawn when the module is imported, from NumPy ``default_rng``
streams seeded by a fixed number, the CRC-32 of "test/method/variant" and the case number (never
Python's ``hash``, which differs between pytest-xdist's workers), so every run and every worker
sees the same cases; each case is its own test item (``-n 14`` spreads them; ``-k cg-graph-p3``
picks one).

The case space, per (method, variant), for the methods cg, bicg, bicgstab and every GPU variant
of the registry that runs the method (cublas, cuda, merge, dynamic, graph, persistent) and
"auto":

* dtype float32, float64, complex64, complex128 (every GPU variant runs all four);
* n in {1, 2, 3, 31, 33, 257, 1000, 4097}; systems: "laplace" (dpsolve.matrices' 2-D Laplacian
  on the most square grid of n points, 3-D for n = 1000; for primes a 1 x n grid), "rand-spd"
  (test_fuzz_host's dense SPD / Hermitian matrix with eigenvalues in [1, 1000] up to n = 257,
  a sparse diagonally dominant Hermitian one above), and for bicg / bicgstab "convdiff"
  (dpsolve.matrices.convdiff_2d, Peclet in [0, 20]) and "rand-nonsym" (diagonally dominant,
  dense-ish from test_fuzz_host up to n = 257 in the real dtypes, sparse otherwise); A as a
  SciPy CSR array or a cupyx CSR matrix;
* M cycling through None, "jacobi" and, for cg / bicgstab, the preconditioners of kernels:
  "amg" (real dtypes, n >= 257), "chebyshev" (every dtype and n) and "amg-cheb", AMG with
  Chebyshev smoothing (``dpsolve.precond.AMG(smoother="chebyshev")``, an object with options;
  real dtypes, n >= 257). On the variants that fuse only pointwise preconditioners (dynamic,
  persistent: their backends' ``takes_stream_M`` is False) and for BiCG (which needs M^H) one
  case per (method, variant) and test passes M="amg" (one-shot) or "chebyshev" (prepared) and
  asserts the documented refusal: a ValueError naming the variant and M (dpsolve/backends/
  _gpu.py, GpuBackend.why_not) or "bicg needs M^H" (dpsolve/precond/__init__.py, make), for
  b = 0 too (no iteration needed, refused all the same: ``_frontend.solve`` asks the variant
  before its zero answer);
* b of scale 1, 2^-600 / 2^+600 (2^-70 / 2^+70 in float32 and complex64: squares that under- or
  overflow, which dpsolve scales away) or b = 0; NumPy or CuPy; x0 None or random (at b's scale;
  for a tiny b, 3 in 10 of them 2^(maxexp + 6) times that, which the scaling of b carries past the
  largest float: such a solve stops at once with x = x0 bit for bit, no iteration, and info -10,
  or 0 where the tolerance is infinite, ``_frontend.at_once``); rtol and atol each in {0, 1e-300,
  1e-8 (1e-5 in single precision), 1e-2, inf}; maxiter in {1, 2, 7, None}, except that
  maxiter=None with a tolerance below what the precision reaches (max(rtol, atol / scale) < 1e-10,
  or 1e-4 in single precision) is kept to n <= 257 (it can run all 10 n iterations, and restarts,
  before it gives up); sync polling or blocking; ``full_output`` or not. Every one-shot cg case
  on "auto" or persistent with M=None is drawn as the default call's lane takes it (cupyx A,
  CuPy b, no x0; invariant 6).

Invariants, on every case:

1. No exception and no NumPy floating-point warning for valid input (the README: "No NumPy
   floating-point warning escapes a solve"); the refusals above are the only errors.
2. Nothing the caller passed in is modified: A's data, indices and indptr, b and x0 (NumPy or
   CuPy) compared with copies taken before the call, after every call.
3. ``info == 0`` only when the true residual, ||b - A x|| computed on the host in float64 (or
   complex128) with test_fuzz_host's ``scaled_norm`` (no over- or underflow), meets SciPy's
   tolerance max(atol, rtol ||b||) (test_fuzz_host's ``tolerance``), with the slack of the
   dtype: the relative slack of tests/test_gpu_cg.py for single precision (1.5 tol: the solver
   decides on a residual evaluated in float32) and of test_fuzz_host's oracle for double
   (1 + 1e-6), plus the rounding of the residual's own evaluation in the working dtype,
   eps sqrt(k + 2) || |b| + |A| |x| || (k: the longest row), which only a tolerance near or
   below the attainable accuracy (0, 1e-300) can notice. b = 0 gives x = 0 exactly and info 0.
4. ``info`` is 0, or ``maxiter`` (10 n when None: SciPy's value for non-convergence, README
   "Semantics" and ``_frontend.restarted``, so info > 0 is never more than the iterations
   asked), or one of the method's breakdown codes (``dpsolve.methods.get(method).info_codes``:
   -10 for cg, -10 / -11 for bicg and bicgstab); x is finite when info == 0, and on every other
   code too (the README: a solve that would go non-finite stops with -10 and the last finite
   iterate). With ``full_output`` the report agrees: its info, converged == (info == 0),
   iterations <= maxiter, and the variant asked for.
5. NumPy b in, NumPy x out; CuPy b in, CuPy x out; x of b's dtype and shape (n,).
6. The fast paths give the general path's answer. A prepared system on ``graph`` (cg, bicg,
   bicgstab: ``_fast.GRAPH_METHODS``) or on ``persistent`` (cg) has a one-launch path
   (``P._fast``, asserted present) for a CuPy b of its dtype without x0; tests/test_gpu_fast.py
   forces the general path with ``full_output=True``, and so does this test: each such solve
   must give the (x bits, info) of ``P.solve(b, ..., full_output=True)``, which must be the
   one-shot call's (``dpsolve.<method>(A, b, variant=P.variant, format=P.format, ...)``, the
   README: "bitwise the one-shot call's x on every variant"). Likewise the default call's lane
   (``_fast.Lane``: cg on "auto" / persistent with a cupyx A and a CuPy b, no x0 or M, taken
   from the third call with one matrix): three calls against ``full_output=True``'s. The only
   allowed difference is the fast path's own tolerance, made from ||b|| summed in another order
   (``_fast``'s docstring): where the bits differ, the general path's answer must itself change
   when its tolerance moves by that rounding (rtol and atol times 1 -+ 1e-4 in single precision,
   1 -+ 1e-11 in double), as test_fuzz_host's ``not_chaotic`` moves SciPy's; otherwise the test
   fails.

The tests: ``test_one_shot_call`` (8 cases per (method, variant): 168) and
``test_prepared_system`` (6 cases per (method, variant), each preparing once and solving three
right-hand sides, the first with the drawn array kind and x0, the next two CuPy without x0, on
the fast path where one exists: 126). Every case's id and description name what it drew.
"""
from __future__ import annotations

import contextlib
import math
import warnings
import zlib

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve import methods as method_table
from dpsolve._fast import GRAPH_METHODS
from dpsolve.backends import VARIANT_NAMES, get_backend
from dpsolve.matrices import convdiff_2d, laplace_2d, laplace_3d
from test_fuzz_host import make_matrix, scaled_norm, tolerance

pytestmark = pytest.mark.gpu

SEED = 20261130
METHODS = ("cg", "bicg", "bicgstab")
VARIANTS = {m: [v for v in VARIANT_NAMES[1:] if get_backend(v) is not None
                and m in get_backend(v).methods] + ["auto"] for m in METHODS}
# variants that run a preconditioner of kernels (AMG's V-cycle); the others refuse it by name
STREAM_M = {v for v in VARIANT_NAMES[1:] if getattr(get_backend(v), "takes_stream_M", False)}
STREAM_PRECONDS = ("amg", "chebyshev", "amg-cheb")     # the case's M: see precond()
DTYPES = ("float32", "float64", "complex64", "complex128")
SIZES = (1, 2, 3, 31, 33, 257, 1000, 4097)
AMG_SIZES = (257, 1000, 4097)
DENSE_MAX = 257                    # test_fuzz_host's dense matrices up to here, sparse above
KINDS = {"cg": ("laplace", "rand-spd"),
         "bicg": ("laplace", "rand-spd", "convdiff", "rand-nonsym"),
         "bicgstab": ("laplace", "rand-spd", "convdiff", "rand-nonsym")}
MAXITERS = (1, 2, 7, None)
SCALES = ("1", "tiny", "huge", "zero")
SCALE_P = (0.5, 0.2, 0.2, 0.1)
TOL_P = (0.2, 0.2, 0.25, 0.25, 0.1)          # 0, 1e-300, 1e-8 (1e-5), 1e-2, inf
N_ONE_SHOT, N_PREPARED = 8, 6


def _single(dtype) -> bool:
    return np.finfo(np.dtype(dtype)).eps > 1e-10


def _tols(dtype):
    return (0.0, 1e-300, 1e-5 if _single(dtype) else 1e-8, 1e-2, math.inf)


def _scale(name, dtype) -> float:
    e = 70 if _single(dtype) else 600
    return {"1": 1.0, "tiny": 2.0 ** -e, "huge": 2.0 ** e, "zero": 0.0}[name]


def _real(dtype) -> str:
    return {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)


def refusal(method, variant, M):
    """The documented error (a regular expression) for M on this method and variant, or None
    where it runs."""
    if M not in STREAM_PRECONDS:
        return None
    kind = "amg" if M.startswith("amg") else M
    if method_table.get(method).adjoint:            # BiCG needs M^H: precond.make
        return rf"{method} needs M\^H.*M='{kind}'"
    if variant != "auto" and variant not in STREAM_M:   # GpuBackend.why_not
        return rf"variant '{variant}' fuses pointwise.*M='{kind}'"
    return None


def precond(M):
    """The case's M as the solvers take it: a name, or "amg-cheb" as an AMG object."""
    return dpsolve.precond.AMG(smoother="chebyshev") if M == "amg-cheb" else M


def has_fast_path(variant, method) -> bool:
    """A prepared system's one-launch path (dpsolve/_fast.py, bind)."""
    return ((variant == "graph" and method in GRAPH_METHODS)
            or (variant == "persistent" and method == "cg"))


# --------------------------------------------------------------------------- drawing the cases
def _pick(rng, seq, p=None):
    return seq[int(rng.choice(len(seq), p=p))]


def _draw_solve(rng, dtype, n, first=True):
    """One solve's right-hand side and arguments (later solves of a prepared system: CuPy b,
    no x0, so that a fast path takes them)."""
    scale = _pick(rng, SCALES, SCALE_P)
    tols = _tols(dtype)
    rtol, atol = _pick(rng, tols, TOL_P), _pick(rng, tols, TOL_P)
    maxiter = _pick(rng, MAXITERS)
    x0 = bool(rng.random() < 0.5)
    b_kind = _pick(rng, ("numpy", "cupy"))
    seed = int(rng.integers(2 ** 32))
    tight = scale != "zero" and max(rtol, atol / _scale(scale, dtype)) < (
        1e-4 if _single(dtype) else 1e-10)
    if maxiter is None and tight and n > DENSE_MAX:
        maxiter = _pick(rng, MAXITERS[:-1])
    apart = bool(rng.random() < 0.3)
    if not first:
        x0, b_kind = False, "cupy"
    return dict(scale=scale, rtol=rtol, atol=atol, maxiter=maxiter, x0=x0, b_kind=b_kind,
                seed=seed, x0_apart=x0 and scale == "tiny" and apart)


def _draw(method, variant, i, count, what):
    rng = np.random.default_rng([SEED, zlib.crc32(f"{what}/{method}/{variant}".encode()), i])
    stream_runs = refusal(method, variant, "amg") is None
    Ms = (None, "jacobi") + (STREAM_PRECONDS if stream_runs else ())
    M = Ms[i % len(Ms)]
    if not stream_runs and i == count - 1:           # one refusal per (method, variant, test)
        M = "amg" if what == "one-shot" else "chebyshev"
    dtype = _pick(rng, DTYPES, (0.3, 0.3, 0.2, 0.2))
    amg = M is not None and M.startswith("amg")
    if amg:
        dtype = _real(dtype)
    n = int(_pick(rng, AMG_SIZES if amg else SIZES))
    kind = _pick(rng, KINDS[method])
    a_kind = _pick(rng, ("scipy", "cupyx"))
    sync = _pick(rng, ("polling", "blocking"), (0.7, 0.3))
    seed = int(rng.integers(2 ** 32))
    solves = [_draw_solve(rng, dtype, n, first=k == 0)
              for k in range(1 if what == "one-shot" else 3)]
    full_output = bool(rng.random() < 0.5)
    if (what == "one-shot" and method == "cg" and variant in ("auto", "persistent")
            and M is None):                      # the default call's lane (invariant 6)
        a_kind, full_output = "cupyx", False
        solves[0].update(b_kind="cupy", x0=False)
    tag = "o" if what == "one-shot" else "p"
    return dict(id=f"{method}-{variant}-{tag}{i}", method=method, variant=variant, M=M,
                dtype=dtype, n=n, kind=kind, a_kind=a_kind, sync=sync, seed=seed,
                solves=solves, full_output=full_output)


def _cases(what, count):
    return [_draw(m, v, i, count, what) for m in METHODS for v in VARIANTS[m]
            for i in range(count)]


ONE_SHOT = _cases("one-shot", N_ONE_SHOT)
PREPARED = _cases("prepared", N_PREPARED)


def describe(case, s=None) -> str:
    out = (f"{case['id']}: {case['method']} variant={case['variant']} {case['dtype']} "
           f"n={case['n']} {case['kind']} M={case['M']} A:{case['a_kind']} sync={case['sync']}")
    if s is not None:
        out += (f" | b x {s['scale']} ({s['b_kind']}) x0={s['x0']} rtol={s['rtol']:g} "
                f"atol={s['atol']:g} maxiter={s['maxiter']}")
    return out


# --------------------------------------------------------------------------- the systems
def _grid(n, three_d=True):
    c = round(n ** (1 / 3))
    if three_d and c > 1 and c ** 3 == n:
        return (c, c, c)
    a = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return (a, n // a)


def _random_sparse(n, rng, hermitian, complex_):
    """Diagonally dominant with a positive diagonal (Hermitian: positive definite), about 3
    off-diagonal entries a row (6 when Hermitian)."""
    k = min(n - 1, 3)
    rows = np.repeat(np.arange(n), k)
    cols = rng.integers(0, n, n * k)
    keep = rows != cols
    vals = rng.standard_normal(int(keep.sum()))
    if complex_:
        vals = vals + 1j * rng.standard_normal(vals.size)
    S = sp.csr_array((vals, (rows[keep], cols[keep])), shape=(n, n))
    if hermitian:
        S = S + S.conj().T
    d = np.asarray(abs(S).sum(axis=1)).ravel() + rng.uniform(1.0, 10.0, n)
    return S + sp.diags_array(d)


def build_matrix(case) -> sp.csr_array:
    """The case's A as a canonical SciPy CSR array in its dtype."""
    rng = np.random.default_rng(case["seed"])
    n, kind, dtype = case["n"], case["kind"], case["dtype"]
    cplx = np.dtype(dtype).kind == "c"
    if kind == "laplace":
        dims = _grid(n)
        A = laplace_3d(*dims) if len(dims) == 3 else laplace_2d(*dims)
    elif kind == "convdiff":
        A = convdiff_2d(*_grid(n, three_d=False), peclet=rng.uniform(0, 20),
                        angle=rng.uniform(0, 2 * np.pi))
    elif n <= DENSE_MAX and (kind == "rand-spd" or not cplx):
        A = make_matrix({"rand-spd": "hermitian" if cplx else "spd",
                         "rand-nonsym": "nonsym"}[kind], n, rng)
    else:
        A = _random_sparse(n, rng, hermitian=kind == "rand-spd", complex_=cplx)
    A = sp.csr_array(A).astype(dtype)
    A.sum_duplicates()
    A.eliminate_zeros()
    A.sort_indices()
    return A


def build_rhs(s, n, dtype):
    """b (max |b| = its scale; 0 for "zero") and x0 (at b's scale, or 1) as NumPy arrays."""
    rng = np.random.default_rng(s["seed"])
    cplx = np.dtype(dtype).kind == "c"

    def unit():
        v = rng.standard_normal(n)
        if cplx:
            v = v + 1j * rng.standard_normal(n)
        return v / np.max(np.abs(v))
    scale = _scale(s["scale"], dtype)
    b = (unit() * scale).astype(dtype)
    x0 = unit() * (scale or 1.0)
    if s.get("x0_apart"):                       # past the largest float once b is scaled
        k = np.finfo(dtype).maxexp + 6
        x0 = np.ldexp(x0.real, k) + (1j * np.ldexp(x0.imag, k) if cplx else 0)
    return b, (x0.astype(dtype) if s["x0"] else None)


def _cupy():
    import cupy
    return cupy


def on_kind(v, kind):
    """v (NumPy, or SciPy CSR) as the case passes it: CuPy / cupyx or as it is."""
    if v is None or kind in ("numpy", "scipy"):
        return v
    if kind == "cupyx":
        import cupyx.scipy.sparse as csp
        return csp.csr_matrix(v)
    return _cupy().asarray(v)


def host(v):
    """A host NumPy copy of an array (NumPy or CuPy)."""
    if hasattr(v, "__cuda_array_interface__"):
        return v.get()
    return np.array(v, copy=True)


# --------------------------------------------------------------------------- the invariants
def snapshot(v):
    """Host copies of what the caller passed: a CSR matrix's arrays, or an array."""
    if v is None:
        return None
    if hasattr(v, "indptr"):
        return (tuple(v.shape), host(v.data), host(v.indices), host(v.indptr))
    return host(v)


def _equal(a, b) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def assert_untouched(what, **given):
    """Invariant 2: ``name=(object, snapshot)`` pairs."""
    for name, (v, saved) in given.items():
        if v is None:
            continue
        now = snapshot(v)
        if isinstance(saved, tuple):
            same = now[0] == saved[0] and all(_equal(a, b) for a, b in zip(now[1:], saved[1:]))
        else:
            same = _equal(now, saved)
        assert same, f"{what}: {name} was modified"


@contextlib.contextmanager
def no_fp_warnings():
    """Invariant 1's second half: a NumPy floating-point warning from the solve is an error."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "error", r"(overflow|invalid value|divide by zero|underflow) encountered",
            RuntimeWarning)
        yield


def true_residual(A, b, x):
    """(||b - A x||, rounding bound of its evaluation in A's dtype), on the host in float64 /
    complex128, scaled by a power of two and with scaled norms (no over- or underflow)."""
    wide = np.complex128 if np.dtype(A.dtype).kind == "c" else np.float64
    A64 = sp.csr_array(A, dtype=wide)
    bs, xs = b.astype(wide), x.astype(wide)
    top = max(float(np.max(np.abs(bs))), float(np.max(np.abs(xs))))
    m = 2.0 ** int(np.frexp(top)[1]) if top > 0 else 1.0          # exact: a power of two
    bs, xs = bs / m, xs / m
    res = scaled_norm(bs - A64 @ xs) * m
    k = int(np.diff(A64.indptr).max())
    mag = scaled_norm(np.abs(bs) + abs(A64) @ np.abs(xs)) * m
    return res, float(np.finfo(A.dtype).eps) * math.sqrt(k + 2) * mag


def check_result(what, case, s, A, b, x, info, rep=None, variant=None):
    """Invariants 3, 4 and 5 on one solve's (x, info[, report])."""
    method, dtype, n = case["method"], np.dtype(case["dtype"]), case["n"]
    # 5. the array kind follows b; b's dtype and shape
    if s["b_kind"] == "cupy":
        assert isinstance(x, _cupy().ndarray), f"{what}: CuPy b gave {type(x).__name__}"
    else:
        assert type(x) is np.ndarray, f"{what}: NumPy b gave {type(x).__name__}"
    assert x.dtype == dtype and x.shape == (n,), f"{what}: x {x.dtype} {x.shape}"
    xh = host(x)
    # 4. SciPy's codes; a finite x
    maxiter = 10 * n if s["maxiter"] is None else s["maxiter"]
    codes = method_table.get(method).info_codes
    assert isinstance(info, int) and not isinstance(info, bool), \
        f"{what}: info {info!r} is a {type(info).__name__}"
    assert info in (0, maxiter) or info in codes, \
        f"{what}: info {info}, expected 0, maxiter = {maxiter} or one of {sorted(codes)}"
    assert np.isfinite(xh).all(), f"{what}: info {info} with a non-finite x"
    if rep is not None:
        assert rep.info == info and rep.converged == (info == 0), \
            f"{what}: report info {rep.info} converged {rep.converged}, returned {info}"
        assert 0 <= rep.iterations <= maxiter, f"{what}: {rep.iterations} iterations"
        if variant not in (None, "auto"):
            assert rep.variant == variant, f"{what}: ran {rep.variant}"
    # 3. info 0 only where the true residual meets the tolerance
    if not b.any():
        assert info == 0 and not xh.any(), f"{what}: b = 0 gave info {info}, max|x| " \
                                           f"{np.max(np.abs(xh)):.3e}"
        return
    if s.get("x0_apart"):                       # _frontend.at_once: x = x0, no iteration
        wide = np.complex128 if dtype.kind == "c" else np.float64
        inf = tolerance({"rtol": s["rtol"], "atol": s["atol"]}, b.astype(wide)) == math.inf
        assert info == (0 if inf else -10), f"{what}: x0 apart gave info {info}"
        _, x0 = build_rhs(s, n, case["dtype"])
        assert np.array_equal(xh, x0), f"{what}: x0 apart, x is not x0"
        if rep is not None:
            assert rep.iterations == 0, f"{what}: x0 apart, {rep.iterations} iterations"
        return
    if info == 0:
        wide = np.complex128 if dtype.kind == "c" else np.float64
        tol = tolerance({"rtol": s["rtol"], "atol": s["atol"]}, b.astype(wide))
        res, floor = true_residual(A, b, xh)
        slack = 1.5 if _single(dtype) else 1 + 1e-6
        assert res <= tol * slack + floor, (
            f"{what}: info 0 but ||b - A x|| = {res:.4e} > tol {tol:.4e} (slack {slack}, "
            f"evaluation bound {floor:.2e})"
            + (f"; {rep.iterations} iterations, reported residual {rep.residual_norm}"
               if rep is not None else ""))


def _bits(out):
    x, info = out[0], out[1]
    xh = host(x)
    return info, xh.dtype.str, xh.shape, xh.tobytes()


def first_difference(a, b) -> str:
    """Where two (x, info) answers differ: info, or the first entry whose bits differ."""
    if a[1] != b[1]:
        return f"info {a[1]} vs {b[1]}"
    xa, xb = host(a[0]), host(b[0])
    if xa.dtype != xb.dtype or xa.shape != xb.shape:
        return f"x {xa.dtype} {xa.shape} vs {xb.dtype} {xb.shape}"
    va, vb = xa.view(f"u{xa.itemsize}"), xb.view(f"u{xb.itemsize}")
    bad = np.flatnonzero(va != vb)
    i = int(bad[0])
    return (f"{bad.size} of {xa.size} entries, first x[{i}] = {xa[i]!r} ({int(va[i]):#x}) vs "
            f"{xb[i]!r} ({int(vb[i]):#x})")


def assert_general_answer(what, got, general, dtype):
    """Invariant 6: ``got`` (x, info) is ``general(1.0)``'s bit for bit, unless the general
    path's own answer moves when its tolerance does by the fast path's rounding of ||b||."""
    want = general(1.0)
    if _bits(got) == _bits(want):
        return
    delta = 1e-4 if _single(dtype) else 1e-11
    near_tie = any(_bits(general(f)) != _bits(want) for f in (1 - delta, 1 + delta))
    assert near_tie, (
        f"{what}: the fast path's answer is not the general path's ({first_difference(got, want)}),"
        f" and the general path's does not change within the tolerance's rounding")


# --------------------------------------------------------------------------- the tests
def _solve_args(s):
    return dict(rtol=s["rtol"], atol=s["atol"], maxiter=s["maxiter"])


@pytest.mark.parametrize("case", ONE_SHOT, ids=[c["id"] for c in ONE_SHOT])
def test_one_shot_call(case):
    """``dpsolve.<method>(A, b, x0, ...)``: invariants 1-5; the default call's lane (cg, auto /
    persistent, cupyx A and CuPy b) three times against the general path (invariant 6)."""
    method, variant, M = case["method"], case["variant"], case["M"]
    s = case["solves"][0]
    what = describe(case, s)
    A = build_matrix(case)
    b, x0 = build_rhs(s, case["n"], case["dtype"])
    A_in, b_in, x0_in = on_kind(A, case["a_kind"]), on_kind(b, s["b_kind"]), \
        on_kind(x0, s["b_kind"])
    saved = dict(A=(A_in, snapshot(A_in)), b=(b_in, snapshot(b_in)), x0=(x0_in, snapshot(x0_in)))
    fn = getattr(dpsolve, method)
    kw = dict(_solve_args(s), M=precond(M), variant=variant, sync=case["sync"])
    refused = refusal(method, variant, M)
    if refused:
        with pytest.raises(ValueError, match=refused):
            fn(A_in, b_in, x0_in, **kw)
        assert_untouched(what, **saved)
        return
    with no_fp_warnings():
        out = fn(A_in, b_in, x0_in, full_output=case["full_output"], **kw)
    assert_untouched(what, **saved)
    check_result(what, case, s, A, b, out[0], out[1],
                 out[2] if case["full_output"] else None, variant)
    lane = (method == "cg" and variant in ("auto", "persistent") and M is None
            and x0 is None and case["a_kind"] == "cupyx" and s["b_kind"] == "cupy")
    if not lane:
        return
    args = _solve_args(s)

    def general(f):
        with no_fp_warnings():
            return fn(A_in, b_in, rtol=args["rtol"] * f, atol=args["atol"] * f,
                      maxiter=args["maxiter"], variant=variant, sync=case["sync"],
                      full_output=True)[:2]
    for call in range(3):               # the lane is made after two general-path calls
        with no_fp_warnings():
            got = fn(A_in, b_in, variant=variant, sync=case["sync"], **args)
        here = f"{what} (default call {call + 1})"
        assert_untouched(here, **saved)
        check_result(here, case, s, A, b, *got)
        assert_general_answer(here, got, general, case["dtype"])
    assert_untouched(what, **saved)


@pytest.mark.parametrize("case", PREPARED, ids=[c["id"] for c in PREPARED])
def test_prepared_system(case):
    """``P = dpsolve.prepare(A, method, M=..., variant=...)``, then three ``P.solve``: invariants
    1-5 on each; on graph / persistent the fast path's answers against the general path's and
    the one-shot call's (invariant 6)."""
    method, variant, M, dtype = case["method"], case["variant"], case["M"], case["dtype"]
    what = describe(case)
    A = build_matrix(case)
    A_in = on_kind(A, case["a_kind"])
    A_saved = (A_in, snapshot(A_in))
    refused = refusal(method, variant, M)
    if refused:
        with pytest.raises(ValueError, match=refused):
            dpsolve.prepare(A_in, method, M=precond(M), variant=variant, sync=case["sync"])
        assert_untouched(what, A=A_saved)
        return
    with no_fp_warnings():
        P = dpsolve.prepare(A_in, method, M=precond(M), variant=variant, sync=case["sync"])
    assert_untouched(what, A=A_saved)
    assert P.method == method and P.n == case["n"] and P.dtype == np.dtype(dtype), \
        f"{what}: prepared {P!r}"
    assert variant == "auto" or P.variant == variant, f"{what}: prepared {P!r}"
    fast = has_fast_path(P.variant, method)
    if fast:
        assert P._fast is not None, f"{what}: {P!r} has no fast path"
    fn = getattr(dpsolve, method)
    for k, s in enumerate(case["solves"]):
        here = f"{describe(case, s)} (solve {k + 1} on {P.variant}/{P.format})"
        b, x0 = build_rhs(s, case["n"], dtype)
        b_in, x0_in = on_kind(b, s["b_kind"]), on_kind(x0, s["b_kind"])
        saved = dict(A=A_saved, b=(b_in, snapshot(b_in)), x0=(x0_in, snapshot(x0_in)))
        args = _solve_args(s)
        with no_fp_warnings():
            got = P.solve(b_in, x0_in, **args)
        assert_untouched(here, **saved)
        check_result(here, case, s, A, b, *got)
        if not (fast and x0 is None and s["b_kind"] == "cupy"):
            continue

        def general(f, b_in=b_in, args=args):
            with no_fp_warnings():
                return P.solve(b_in, rtol=args["rtol"] * f, atol=args["atol"] * f,
                               maxiter=args["maxiter"], full_output=True)[:2]
        assert_general_answer(here, got, general, dtype)
        with no_fp_warnings():
            one = fn(A_in, b_in, M=precond(M), variant=P.variant, format=P.format or "auto",
                     sync=case["sync"], full_output=True, **args)
        want = general(1.0)
        assert _bits(one) == _bits(want), \
            f"{here}: the one-shot call's (x, info) is not the prepared general path's " \
            f"({first_difference(one, want)})"
        assert_untouched(here, **saved)
