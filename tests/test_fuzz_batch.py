"""Fuzz test (hypothesis): ``dpsolve.batch`` against its contract, on the host reference (CI)
and, on a GPU machine, on the device (the one-launch kernels, the checks inside them).

Batches of 1-5 systems of order 1-14 over one random pattern (the diagonal always in it): the
systems Hermitian positive definite (CG) or diagonally dominant (BiCGStab), in float32, float64 or
complex128; each system's b of its own scale (2^0, 2^+-k near the edges of the dtype's range,
every entry below the normal range -- float32 subnormals, which the device reads as 0 in any
float32 operation: dpsolve._system.flushes -- or b = 0); now and then a NaN or an Inf in one
system's values or b, and with Jacobi a zero on one system's diagonal; rtol, atol each in {0,
1e-300, 1e-5, 1e-2}; maxiter in {1, 2, 5, None}.

Invariants, on every example:

1. No exception, no NumPy floating-point warning.
2. Nothing the caller passed in is modified (values, indices, indptr, B).
3. Each system's code is its own: BAD_INPUT exactly where its values or b hold a NaN or Inf,
   ZERO_DIAGONAL exactly where Jacobi meets a zero on a good system's diagonal; there x = 0 and
   the residual is NaN. Otherwise info is 0, maxiter or a breakdown (< 0).
4. ``info == 0`` only where the true residual meets the system's tolerance max(rtol ||b||,
   atol): ||b - A x|| (computed scaled, in float64 or complex128) <= tol plus the rounding of the
   solver's own residual in its dtype (16 n eps (||b|| + |A| |x|)); the reported tolerance is
   that max to 1e-6, computed scaled; the reported residual is the true one to that rounding.
5. No system runs more than maxiter iterations; b = 0 gives x = 0, info 0, 0 iterations.
6. A system solves as it does alone: its x, info and iterations in a batch of one are those it
   gets among the others, bit for bit (the batch's arithmetic is row by row).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_fuzz_host import scaled_norm, times_power_of_two    # the oracle's, exact

from dpsolve import batch

FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                max_examples=1500, suppress_health_check=[HealthCheck.too_slow,
                                                         HealthCheck.data_too_large])
DTYPES = (np.float32, np.float64, np.complex128)
TOLS = (0.0, 1e-300, 1e-5, 1e-2)
MAXITERS = (1, 2, 5, None)


@st.composite
def batches(draw):
    dtype = draw(st.sampled_from(DTYPES))
    method = draw(st.sampled_from(("cg", "bicgstab")))
    nb, n = draw(st.integers(1, 5)), draw(st.integers(1, 14))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # one pattern, symmetric (CG), the diagonal in it
    mask = rng.random((n, n)) < draw(st.sampled_from((0.0, 0.2, 0.6)))
    mask = mask | mask.T | np.eye(n, dtype=bool)
    complex_ = np.dtype(dtype).kind == "c"
    values = []
    for _ in range(nb):
        off = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
        off = np.where(mask & ~np.eye(n, dtype=bool), off, 0)
        if method == "cg":
            off = (off + off.conj().T) / 2                    # Hermitian
        D = np.abs(off).sum(axis=1) + rng.uniform(0.1, 2.0, n)   # dominant: definite for CG
        values.append(off + np.diag(D))
    pattern = sp.csr_array(mask.astype(float))
    pattern.sort_indices()
    rows = np.repeat(np.arange(n), np.diff(pattern.indptr))
    V = np.array([Ai[rows, pattern.indices] for Ai in values]).astype(dtype)
    real = np.finfo(dtype).dtype
    big = 120 if real == np.float32 else 1000
    B = rng.standard_normal((nb, n)) + (1j * rng.standard_normal((nb, n)) if complex_ else 0)
    B = B.astype(dtype)
    for i in range(nb):                                        # each system its own scale
        k = draw(st.sampled_from((0, 0, 0, -big, big, -big // 2, big // 2, "sub", None)))
        if k is None:
            B[i] = 0
        else:
            kk = (np.finfo(dtype).minexp - 8 if k == "sub" else int(np.clip(k, -big - 5, big - 5)))
            B[i] = (np.ldexp(B[i].real, kk) + (1j * np.ldexp(B[i].imag, kk) if complex_ else 0)
                    ).astype(dtype)
    M = draw(st.sampled_from((None, "jacobi")))
    if draw(st.booleans()) and nb > 1:                         # one system made bad
        i = draw(st.integers(0, nb - 1))
        how = draw(st.sampled_from(("nan-values", "inf-b", "zero-diagonal")))
        if how == "nan-values":
            V[i, draw(st.integers(0, V.shape[1] - 1))] = np.nan
        elif how == "inf-b":
            B[i, draw(st.integers(0, n - 1))] = np.inf
        elif M == "jacobi":
            on = np.flatnonzero(pattern.indices == rows)
            V[i, on[draw(st.integers(0, n - 1))]] = 0
    rtol, atol = draw(st.sampled_from(TOLS)), draw(st.sampled_from(TOLS))
    return dict(method=method, V=V, indices=pattern.indices.copy(), indptr=pattern.indptr.copy(),
                B=B, M=M, rtol=rtol, atol=atol, maxiter=draw(st.sampled_from(MAXITERS)))


def _solve(case, V, B, variant):
    Ab = batch.csr(V, case["indices"], case["indptr"])
    return getattr(batch, case["method"])(Ab, B, rtol=case["rtol"], atol=case["atol"],
                                          maxiter=case["maxiter"], M=case["M"],
                                          full_output=True, variant=variant)


@pytest.mark.parametrize("variant", ["host", pytest.param("device", marks=pytest.mark.gpu)])
@FUZZ
@given(case=batches())
def test_batch_contract(variant, case):
    V, B, indices, indptr = case["V"], case["B"], case["indices"], case["indptr"]
    kept = [a.copy() for a in (V, B, indices, indptr)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")                         # invariant 1: no warning
        X, info, rep = _solve(case, V, B, variant)
    for a, b in zip((V, B, indices, indptr), kept):            # invariant 2
        np.testing.assert_array_equal(a, b)
    nb, n = B.shape
    maxiter = 10 * n if case["maxiter"] is None else case["maxiter"]
    eps = float(np.finfo(V.dtype).eps)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    for i in range(nb):
        A = np.zeros((n, n), dtype=np.complex128)
        A[rows, indices] = V[i]
        bad = not (np.isfinite(V[i]).all() and np.isfinite(B[i]).all())
        zero = (not bad and case["M"] == "jacobi"
                and (V[i][indices == rows] == 0).any())
        # invariant 3: each system its own code
        if bad or zero:
            event("a bad system" if bad else "a zero diagonal")
            assert info[i] == (batch.BAD_INPUT if bad else batch.ZERO_DIAGONAL), (i, info)
            assert not X[i].any() and np.isnan(rep.residual_norm[i])
            continue
        assert info[i] == 0 or info[i] == maxiter or info[i] < 0, (i, info[i])
        event(f"{case['method']} info " + ("0" if info[i] == 0 else "maxiter" if info[i] > 0
                                          else "breakdown"))
        assert 0 <= rep.iterations[i] <= maxiter                # invariant 5
        b = B[i].astype(np.complex128)
        bn = scaled_norm(b)
        with np.errstate(over="ignore", under="ignore"):
            sq = np.sum(np.abs(b) ** 2)
        event("b = 0" if bn == 0 else "b at scale 1" if 1e-3 < bn < 1e3 else
              "b below the normal range" if np.abs(b).max() < np.finfo(V.dtype).tiny else
              "b's squares outside the range" if not (np.finfo(V.dtype).tiny < sq
                                                     < np.finfo(V.dtype).max) else "b scaled")
        tol = max(case["rtol"] * bn, case["atol"])
        assert np.isclose(rep.tolerance[i], tol, rtol=1e-6, atol=0), (rep.tolerance[i], tol)
        if bn == 0:
            assert info[i] == 0 and rep.iterations[i] == 0 and not X[i].any()
        if info[i] != 0:
            continue
        # invariant 4: the true residual against the tolerance and its rounding, computed with
        # b and x times 2^-e, e the exponent of their largest entry (exact: a subnormal x too)
        x = X[i].astype(np.complex128)
        assert np.isfinite(x).all()
        e = int(np.frexp(max(np.abs(b).max(), np.abs(x).max()))[1])
        bs, xs = times_power_of_two(b, -e), times_power_of_two(x, -e)
        r = float(np.ldexp(scaled_norm(bs - A @ xs), e))
        s = float(np.ldexp(max(scaled_norm(bs), scaled_norm(np.abs(A) @ np.abs(xs))), e))
        rounding = 16 * n * eps * s
        assert r <= tol * (1 + 1e-10) + rounding, (i, r, tol, rounding)
        assert abs(rep.residual_norm[i] - r) <= rounding + 1e-6 * r, (rep.residual_norm[i], r)
    # invariant 6: a system alone as among the others
    for i in range(nb):
        Xi, info_i, rep_i = _solve(case, V[i:i + 1], B[i:i + 1], variant)
        assert info_i[0] == info[i] and rep_i.iterations[0] == rep.iterations[i], i
        np.testing.assert_array_equal(Xi[0], X[i])


@pytest.mark.parametrize("variant,rows", [("host", False),
                                          pytest.param("device", False, marks=pytest.mark.gpu),
                                          pytest.param("device", True, marks=pytest.mark.gpu)])
@settings(FUZZ, max_examples=300)
@given(case=batches(), data=st.data())
def test_a_system_far_from_1_gets_its_single_solves_verdict(variant, rows, case, data):
    """Each good system's A_i times 2^k_i (k_i 0, +-edge or +-edge / 2, 0 three times in seven;
    edge 120 in float32, 1000 in float64), b_i at its own scale as ``batches`` draws it: the
    batch's verdict -- converged, not converged, broken down: the sign of info -- is that of the
    system's single solve (dpsolve.cg / bicgstab, variant "host", the same M and rtol, at least
    1e-5, no atol, maxiter at its default). Before
    0baa914 the batch took A_i as it was: BiCGStab broke down (-10) on A_i of 2^107 in float32
    or 2^724 in float64, CG on 2^-98, where the single solves, which scale A into range,
    converged (34 of 778 systems of a differential run). On the device, batch_cg and
    batch_bicgstab (A's checks by batch_a_checks; ``rows`` False), and CG's kernel for small
    systems, batch_cg_rows, which takes A_i as it is, then batch_cg_redo, which solves again as
    A_i / 2^f_i a system it did not solve (``rows``; before it, batch_cg_rows broke down or
    refused such systems).
    Not where the solution lies below the normal range: there the two x round apart, each judged
    by its own residual (a float32 b of 1e-40, rtol 1e-5: the batch's x 2.05e-45 from b, the
    single's 1.45e-45, the tolerance 1.71e-45; found with 25 times the examples, 2026-11-30)."""
    import dpsolve
    from dpsolve.batch import device
    V, B = case["V"].copy(), case["B"]
    nb, real = V.shape[0], np.finfo(V.dtype).dtype
    edge = 120 if real == np.float32 else 1000
    for i in range(nb):
        k = data.draw(st.sampled_from((0, 0, 0, edge, -edge, edge // 2, -edge // 2)))
        V[i] = (V[i] * np.ldexp(real.type(1), k)).astype(V.dtype)
    indices, indptr, n = case["indices"], case["indptr"], B.shape[1]
    kw = dict(rtol=max(case["rtol"], 1e-5), M=case["M"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows, device.ROWS = device.ROWS, rows
        try:
            _, info = getattr(batch, case["method"])(batch.csr(V, indices, indptr), B,
                                                     variant=variant, **kw)
        finally:
            device.ROWS = rows
        for i in range(nb):
            if not (np.isfinite(V[i]).all() and np.isfinite(B[i]).all()) or info[i] <= -20:
                continue                                   # a bad system: its own code
            A = sp.csr_array((V[i], indices, indptr), shape=(n, n))
            xs, single = getattr(dpsolve, case["method"])(A, B[i], variant="host", **kw)
            if np.abs(xs).max(initial=0) < np.finfo(real).tiny and np.any(xs):
                # an x below the normal range cannot carry rtol's digits: the batch's and the
                # single solve's x round apart, and each is judged by its own residual (README;
                # test_batch_contract's oracle holds each to it)
                event("x below the normal range")
                continue
            event(f"verdict {np.sign(single)}")
            assert np.sign(info[i]) == np.sign(single), (i, info[i], single)
