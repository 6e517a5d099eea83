"""dpsolve.batch: many small systems of one pattern (issue 31, part 2; the host reference).

Each system is solved as its single solve would be (its own tolerance, iteration count and code),
a bad system gets its own code and never disturbs the others, the pattern is checked."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve import batch
from dpsolve.matrices import laplace_2d, laplace_3d

N = 36
# every test runs the host reference, and on a GPU machine the one-launch kernels too
VARIANTS = ["host", pytest.param("device", marks=pytest.mark.gpu)]


def _systems(nb=12, dtype=np.float64, seed=0, nonsym=False):
    A = sp.csr_array(laplace_2d(6)).astype(dtype)
    rng = np.random.default_rng(seed)
    mats = []
    for i in range(nb):
        M = A + (10.0 ** rng.uniform(-3, 1)) * sp.eye_array(N, format="csr", dtype=dtype)
        if nonsym:
            M = M + 0.3 * sp.eye_array(N, k=1, format="csr", dtype=dtype)
        mats.append(sp.csr_array(M))
    B = rng.random((nb, N))
    if np.dtype(dtype).kind == "c":
        B = B + 1j * rng.random((nb, N))
    return mats, B.astype(dtype)


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_system_as_its_single_solve(variant, method, dtype, M):
    mats, B = _systems(dtype=dtype, nonsym=method == "bicgstab")
    Ab = batch.from_matrices(mats)
    rtol = 1e-5 if dtype == np.float32 else 1e-8
    X, info, rep = getattr(batch, method)(Ab, B, rtol=rtol, M=M, full_output=True,
                                          variant=variant)
    assert ("host" in rep.path) == (variant == "host")
    assert X.shape == B.shape and X.dtype == dtype and info.shape == (len(mats),)
    for i, A in enumerate(mats):
        x, i_single, r = getattr(dpsolve, method)(A, B[i], rtol=rtol, M=M, variant="host",
                                                  full_output=True)
        assert info[i] == i_single == 0
        assert abs(int(rep.iterations[i]) - r.iterations) <= 2
        assert np.linalg.norm(B[i] - A @ X[i]) <= 1.01 * rtol * np.linalg.norm(B[i])
        assert rep.residual_norm[i] <= rep.tolerance[i]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_bad_system_keeps_its_own_code(variant):
    mats, B = _systems(8)
    mats[3] = sp.csr_array(mats[3].copy())
    mats[3].data[0] = np.nan                                    # NaN in system 3's values
    B[5, 2] = np.inf                                            # Inf in system 5's b
    B[6] = 0                                                    # a zero b: x = 0, info 0
    d7 = np.ones(N)
    d7[::2] = -1                                                # system 7: indefinite
    mats[7] = sp.csr_array(sp.diags_array(d7) @ mats[7])
    Ab = batch.from_matrices(mats)
    X, info, rep = batch.cg(Ab, B, rtol=1e-8, maxiter=200, variant=variant, full_output=True)
    assert np.isnan(rep.residual_norm[[3, 5]]).all() and rep.residual_norm[6] == 0
    assert info[3] == info[5] == batch.BAD_INPUT and not X[3].any() and not X[5].any()
    assert info[6] == 0 and not X[6].any()
    x7, info7 = dpsolve.cg(mats[7], B[7], rtol=1e-8, maxiter=200, variant="host")
    assert info[7] == info7 != 0                                # its own code, as alone
    for i in (0, 1, 2, 4):
        assert info[i] == 0 and np.linalg.norm(B[i] - mats[i] @ X[i]) <= 1e-8 * np.linalg.norm(
            B[i]) * 1.01
    # a zero diagonal entry with Jacobi: that system's own code
    z = mats[0].copy()
    z.data[z.indptr[4] + np.flatnonzero(z.indices[z.indptr[4]:z.indptr[5]] == 4)] = 0
    Ab = batch.from_matrices([mats[0], z])                      # an explicit zero: one pattern
    X, info = batch.cg(Ab, B[:2], M="jacobi", variant=variant)
    assert info.tolist() == [0, batch.ZERO_DIAGONAL]
    # one whose reciprocal is past the largest float64: Jacobi cannot be formed, the same code
    # (before: D^-1 held Inf, x came back NaN with -10, and NumPy's overflow warning escaped)
    t = z.copy()
    t.data[t.data == 0] = 1e-310
    Ab = batch.from_matrices([mats[0], t])
    for method in ("cg", "bicgstab"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            X, info = getattr(batch, method)(Ab, B[:2], M="jacobi", variant=variant)
        assert np.asarray(info).tolist() == [0, batch.ZERO_DIAGONAL] and not X[1].any()


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_b_outside_the_range_solves_as_at_scale_1(variant, method, dtype, M):
    """Systems whose b lies at the edges of the range (squares that under- or overflow: 2^-+900
    in float64, 2^-+100 in float32) beside ordinary ones: each solved as at scale 1, x = x1 2^k
    to the bit, the same codes and iterations, tolerance and residual times 2^k (b_i / 2^e_i,
    exactly: dpsolve.batch.row_exponents; on the device batch_cg_rows does it in its check
    pass). Before, a float64 b of 2^-900 had ||b|| = 0 and was answered x = 0 with info 0, and
    2^+900 stopped at once with -10."""
    mats, B1 = _systems(8, dtype=dtype, nonsym=method == "bicgstab")
    Ab = batch.from_matrices(mats)
    real = np.finfo(dtype).dtype
    big = 100 if real == np.float32 else 900
    ks = np.array([0, -big, big, 0, -big, big, -big // 2, big // 2])
    scale = np.ldexp(np.ones(len(ks)), ks).astype(real)[:, None]
    B = (B1 * scale).astype(dtype)
    assert np.all(B1 * scale == B)                              # exact, no subnormal
    rtol = 1e-5 if real == np.float32 else 1e-8
    kw = dict(rtol=rtol, M=M, full_output=True, variant=variant)
    X1, info1, rep1 = getattr(batch, method)(Ab, B1, **kw)
    X, info, rep = getattr(batch, method)(Ab, B, **kw)
    info1, info = np.asarray(info1), np.asarray(info)
    assert (info1 == 0).all() and (info == info1).all()
    np.testing.assert_array_equal(rep.iterations, rep1.iterations)
    X, X1 = (a.get() if hasattr(a, "get") else a for a in (X, X1))
    np.testing.assert_array_equal(X, (X1 * scale).astype(dtype))
    np.testing.assert_array_equal(rep.tolerance, np.ldexp(rep1.tolerance, ks))
    np.testing.assert_array_equal(rep.residual_norm, np.ldexp(rep1.residual_norm, ks))


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_an_a_far_from_1_solves_as_at_scale_1(variant, method, dtype, M, monkeypatch):
    """Systems whose A_i is far from 1 (2^-+120 and 2^-+60 in float32, 2^-+1000 and 2^-+600 in
    float64; every value normal), b_i with it or at 1, beside ordinary ones: each solved as at
    scale 1, x = x1 2^(kb - k) to the bit, the same codes and iterations, tolerance and residual
    times 2^kb (A_i / 2^f_i, exactly: dpsolve.batch.matrix_shifts, the single solves' rule).
    Before, a float32 A_i of 2^-120 with its b broke down (info -10) where its single solve
    converged. On the device CG goes to batch_cg (A's checks by batch_a_checks), not
    batch_cg_rows, which takes A_i as it is (README)."""
    from dpsolve.batch import device
    monkeypatch.setattr(device, "ROWS", False)
    mats, B1 = _systems(8, dtype=dtype, nonsym=method == "bicgstab")
    real = np.finfo(dtype).dtype
    big, mid = (120, 60) if real == np.float32 else (1000, 600)
    k = np.array([0, -big, big, -mid, mid, 0, -mid, mid])
    kb = np.array([0, -big, big, -mid, mid, 0, 0, 0])
    mats = [sp.csr_array(m * real.type(np.ldexp(1.0, int(ki)))) for m, ki in zip(mats, k)]
    B = (B1 * np.ldexp(np.ones(8), kb).astype(real)[:, None]).astype(dtype)
    rtol = 1e-5 if real == np.float32 else 1e-8
    kw = dict(rtol=rtol, M=M, full_output=True, variant=variant)
    X1, info1, rep1 = getattr(batch, method)(batch.from_matrices(_systems(
        8, dtype=dtype, nonsym=method == "bicgstab")[0]), B1, **kw)
    X, info, rep = getattr(batch, method)(batch.from_matrices(mats), B, **kw)
    info1, info = np.asarray(info1), np.asarray(info)
    assert (info1 == 0).all() and (info == info1).all(), (info, info1)
    X, X1 = (a.get() if hasattr(a, "get") else a for a in (X, X1))
    np.testing.assert_array_equal(rep.iterations, rep1.iterations)
    np.testing.assert_array_equal(X, (X1 * np.ldexp(1.0, kb - k)[:, None]).astype(dtype))
    np.testing.assert_array_equal(rep.tolerance, np.ldexp(rep1.tolerance, kb))
    np.testing.assert_array_equal(rep.residual_norm, np.ldexp(rep1.residual_norm, kb))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_matrix_shifts_is_the_single_solves_rule_row_by_row(dtype):
    """batch.matrix_shifts (the rule vectorised over the systems) gives each row what the single
    solves' ``_system.exponent_shift`` gives it from ``value_exponents``: rows whose largest and
    smallest exponents sweep the dtype's range on both sides of the window, spread or not, with
    zeros, a NaN or an Inf among them, and a row of zeros."""
    from dpsolve._system import exponent_shift, value_exponents
    real = np.finfo(dtype)
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(400):
        hi = int(rng.integers(real.minexp + 30, real.maxexp))
        lo = int(rng.integers(max(real.minexp + 25, hi - 3 * real.maxexp // 4), hi + 1))
        v = np.ldexp(rng.uniform(0.5, 1.0, 9), rng.integers(lo, hi + 1, 9)).astype(real.dtype)
        v[rng.random(9) < 0.2] = 0
        rows.append((v * rng.choice([-1, 1], 9)).astype(real.dtype))
    rows.append(np.zeros(9, real.dtype))
    V = np.array(rows)
    if np.dtype(dtype).kind == "c":
        V = (V + 1j * V[::-1]).astype(dtype)
    want = [exponent_shift(value_exponents(r), dtype) for r in V]
    V[3, 2], V[4, 5] = np.nan, np.inf                      # passed over: that system is refused
    f = batch.matrix_shifts(V)
    assert f.dtype == np.int32
    keep = np.ones(len(V), bool)
    keep[[3, 4]] = False
    np.testing.assert_array_equal(f[keep], np.array(want)[keep])
    assert (f != 0).sum() > 100 and (f == 0).sum() > 20


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_solution_past_the_largest_float_is_not_converged(variant):
    """A tiny (values 2^-600) with b huge (2^+600): x ~ 2^1200 cannot be returned. Solved
    scaled, its x multiplied back is infinite: info maxiter, a NaN residual, never info 0; the
    ordinary system beside it is untouched."""
    mats, B = _systems(2)
    k = 600
    mats[1] = sp.csr_array(mats[1] * np.ldexp(1.0, -k))
    B[1] = np.ldexp(B[1], k)
    X, info, rep = batch.cg(batch.from_matrices(mats), B, rtol=1e-8, maxiter=100,
                            full_output=True, variant=variant)
    info = np.asarray(info)
    X = X.get() if hasattr(X, "get") else X
    assert info[0] == 0 and np.isfinite(X[0]).all()
    assert info[1] == 100 and np.isnan(rep.residual_norm[1]) and not np.isfinite(X[1]).all()



@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_an_x_rounded_below_the_normal_range_meets_its_tolerance_or_is_not_converged(
        variant, method):
    """float32 b below the normal range (subnormals; the device reads them through their bits:
    dpsolve._system.flushes): the scaled systems converge, and x multiplied back is a
    subnormal. At 2^-132 it keeps about 17 bits: rtol 1e-4 is met (info 0, the true residual
    within the tolerance), 1e-6 is not; at 2^-146 it has a few bits and meets neither: info
    maxiter, the residual reported that x's (dpsolve.batch.scaled_back; the kernels'
    batch::scale_back). Before, x was returned with the scaled system's info 0."""
    mats, B1 = _systems(4, dtype=np.float32, nonsym=method == "bicgstab")
    ks = np.array([-132, -146, 0, -132])
    B = np.ldexp(B1 + 0.5, ks[:, None]).astype(np.float32)
    assert (np.abs(B[[0, 1, 3]]) < np.finfo(np.float32).tiny).all() and B.all()
    Ab = batch.from_matrices(mats)
    for rtol, want in ((1e-4, [0, 1, 0, 0]), (1e-6, [1, 1, 0, 1])):
        X, info, rep = getattr(batch, method)(Ab, B, rtol=rtol, full_output=True,
                                              variant=variant)
        X, info = (a.get() if hasattr(a, "get") else a for a in (X, info))
        for i, M in enumerate(mats):
            r = np.linalg.norm(np.ldexp(B[i].astype(np.float64), -ks[i])
                               - M @ np.ldexp(X[i].astype(np.float64), -ks[i])) * 2.0 ** ks[i]
            bn = np.linalg.norm(B[i].astype(np.float64))   # the residual's float32 rounding
            assert X[i].any() and np.isclose(rep.residual_norm[i], r, rtol=1e-3, atol=1e-5 * bn)
            if want[i]:
                assert info[i] == 10 * N and r > rep.tolerance[i], (i, info, r)
            else:
                assert info[i] == 0 and r <= 1.01 * rep.tolerance[i], (i, info, r)

@pytest.mark.parametrize("maxiter", [1, 2, 3, 4])
@pytest.mark.parametrize("variant", VARIANTS)
def test_not_converged_is_maxiter_and_no_system_runs_past_it(variant, maxiter):
    """A 1 x 1 float32 system asked for a residual of 1e-300 (rtol 0): its recurrence claims
    convergence before its true residual does, and it restarts. Not converged is info maxiter
    (the caller's, not the iterations a restart had left: the host reference gave 2 for
    maxiter 3), and it never runs past maxiter; in a batch beside a system that needs more
    iterations, the same (the host ran every restarted system to the largest budget left). As
    SciPy's, the iterate of the last iteration is not tested: maxiter with a residual of 0 can
    happen."""
    V = np.array([[1.9548631], [1.0]], dtype=np.float32)
    B = np.array([[0.65914774], [0.3]], dtype=np.float32)
    for nb in (1, 2):
        Ab = batch.csr(V[:nb], np.array([0]), np.array([0, 1]))
        X, info, rep = batch.cg(Ab, B[:nb], rtol=0.0, atol=1e-300, maxiter=maxiter,
                                full_output=True, variant=variant)
        info = np.asarray(info)
        assert set(info.tolist()) <= {0, maxiter}, info
        assert (rep.iterations <= maxiter).all(), rep.iterations


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_tolerance_reported_is_the_callers(variant, dtype):
    """report.tolerance is max(rtol ||b||, atol) as the caller means it: at b's range edges an
    atol of 1e-300 stays 1e-300 (its 2^-e for the scaled solve underflowed to 0, and 0 was
    reported), and rtol 1e-300 of a float32 b of 0.1 is 1e-301 (the product was taken in
    float32: 0)."""
    mats, B1 = _systems(4, dtype=dtype)
    Ab = batch.from_matrices(mats)
    big = 100 if dtype == np.float32 else 900
    B = (B1 * np.ldexp(1.0, np.array([0, big, -big, 0]))[:, None]).astype(dtype)
    _, _, rep = batch.cg(Ab, B, rtol=0.0, atol=1e-300, maxiter=3, full_output=True,
                         variant=variant)
    np.testing.assert_array_equal(rep.tolerance, 1e-300)
    _, _, rep = batch.cg(Ab, B1, rtol=1e-300, atol=0.0, maxiter=3, full_output=True,
                         variant=variant)
    want = 1e-300 * np.linalg.norm(B1.astype(np.float64), axis=1)
    np.testing.assert_allclose(rep.tolerance, want, rtol=1e-6)


@pytest.mark.parametrize("variant", VARIANTS)
def test_patterns_and_shapes_are_checked(variant):
    mats, B = _systems(3)
    other = sp.csr_array(mats[1] + sp.eye_array(N, k=5, format="csr"))
    with pytest.raises(ValueError, match="matrix 1 has a sparsity pattern other than matrix 0's"):
        batch.from_matrices([mats[0], other, mats[2]])
    Ab = batch.from_matrices(mats)
    with pytest.raises(ValueError, match=r"B must have shape \(nb, n\) = \(3, 36\), got \(36, 3\)"):
        batch.cg(Ab, B.T)
    with pytest.raises(ValueError, match="column index lies outside"):
        batch.csr(Ab.values, Ab.indices + 100, Ab.indptr)
    with pytest.raises(ValueError, match="sorted and unique"):
        batch.csr(Ab.values, Ab.indices[::-1].copy(), Ab.indptr)
    with pytest.raises(TypeError, match="dpsolve.batch.csr or from_matrices"):
        batch.cg(mats[0], B)
    with pytest.raises(ValueError, match="M=None or 'jacobi'"):
        batch.cg(Ab, B, M="amg")
    with pytest.raises(ValueError, match="variant must be one of auto, device, host"):
        batch.cg(Ab, B, variant="merge")
    empty = batch.csr(np.zeros((0, Ab.nnz)), Ab.indices, Ab.indptr)
    X, info = batch.cg(empty, np.zeros((0, N)), variant=variant)
    assert X.shape == (0, N) and info.shape == (0,)
    Bc, Vc = B.copy(), Ab.values.copy()
    batch.cg(Ab, B, variant=variant)
    assert np.array_equal(B, Bc) and np.array_equal(Ab.values, Vc)   # the caller's untouched


@pytest.mark.parametrize("kw, error, message", [
    (dict(maxiter=2.5), TypeError, "maxiter must be an integer or None, got 2.5"),
    (dict(maxiter="3"), TypeError, "maxiter must be an integer or None, got '3'"),
    (dict(maxiter=True), TypeError, "maxiter must be an integer or None, got True"),
    (dict(maxiter=0), ValueError, "maxiter must be a positive integer"),
    (dict(rtol="1e-5"), ValueError, "rtol must be a finite real number >= 0, got '1e-5'"),
    (dict(rtol=np.array([1e-5, 1e-5])), ValueError, "rtol must be a finite real number"),
    (dict(atol=1e-5 + 0j), ValueError, "atol must be a finite real number"),
    (dict(atol=-1.0), ValueError, "atol must be a finite real number >= 0, got -1.0"),
    (dict(rtol=np.inf), ValueError, "rtol must be a finite real number"),
    (dict(M=np.ones(N)), ValueError, "M=None or 'jacobi', got ndarray"),
])
def test_options_are_checked_by_name(kw, error, message):
    """A bad option is refused with its name, as the single solves refuse it (maxiter of 2.5
    or "3" ran 2 and 3 iterations; rtol "1e-5", an array or a complex number, and M an array,
    failed inside NumPy with messages that named nothing)."""
    mats, B = _systems(2)
    with pytest.raises(error, match=re.escape(message)):
        batch.cg(batch.from_matrices(mats), B, **kw)
    X, info = batch.cg(batch.from_matrices(mats), B, maxiter=np.int64(3), rtol=np.float32(1e-3))
    assert info.shape == (2,)


def test_device_without_a_gpu_is_an_error(monkeypatch):
    from dpsolve import _device
    mats, B = _systems(2)
    monkeypatch.setattr(_device, "status", lambda: _device.DeviceStatus(False, "none here"))
    with pytest.raises(RuntimeError, match=r"variant='device': no usable CUDA device \(none here"):
        batch.cg(batch.from_matrices(mats), B, variant="device")
    X, info = batch.cg(batch.from_matrices(mats), B)            # auto: the host reference
    assert (info == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["host", "device"])
def test_cupy_in_cupy_out(variant):
    import cupy
    import cupyx.scipy.sparse
    mats, B = _systems(4)
    X, info = batch.cg(batch.from_matrices(mats), cupy.asarray(B), rtol=1e-8, variant=variant)
    assert isinstance(X, cupy.ndarray) and isinstance(info, cupy.ndarray) and (info == 0).all()
    Ab = batch.from_matrices([cupyx.scipy.sparse.csr_matrix(sp.csr_matrix(M)) for M in mats])
    assert isinstance(Ab.values, cupy.ndarray)                  # CuPy values stay on the GPU
    X2, info2 = batch.cg(Ab, B, rtol=1e-8, variant=variant)
    assert isinstance(X2, np.ndarray) and (info2 == 0).all()


def test_rows_config_picks_the_smallest_fit():
    """Rows in registers where a block holds the system so; else the entries read through L1
    (NZ = 0), up to 4,096 rows a block; beyond, none (batch_cg)."""
    from dpsolve.batch import device
    assert device.rows_config(1000, 7) == (7, 4) and device.rows_config(1025, 7) == (0, 4)
    assert device.rows_config(1024, 5) == (5, 4) and device.rows_config(1000, 6) == (7, 4)
    assert device.rows_config(1000, 8) == (8, 4) and device.rows_config(3, 1) == (5, 4)
    assert device.rows_config(512, 9) == (16, 1) and device.rows_config(513, 9) == (0, 4)
    assert device.rows_config(256, 32) == (32, 1) and device.rows_config(256, 33) == (0, 4)
    assert device.rows_config(4096, 5) == (0, 4) and device.rows_config(4097, 5) is None
    assert device.rows_config(1025, 7, np.complex128) is None      # real dtypes only


def _slots_hold_the_pattern(A, offsets, slot_pos):
    """Every entry in exactly one slot, each slot's entry on its diagonal."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    held = slot_pos[slot_pos >= 0]
    assert np.array_equal(np.sort(held), np.arange(A.nnz))
    for k, off in enumerate(offsets):
        pos = slot_pos[k]
        live = pos >= 0
        assert (A.indices[pos[live]] == np.flatnonzero(live) + off).all()
        assert (rows[pos[live]] == np.flatnonzero(live)).all()


def test_diagonals_finds_the_stencils():
    """batch_cg_rows's DIA form (device.diagonals): a 3-D 7-point and a 2-D 5-point stencil fill
    their NZ slots, ascending, 0 in the middle; a tridiagonal pattern at NZ = 5 gets empty slots
    (offset 0, no entry) outside its own; too many diagonals on one side, or an NZ with no DIA
    form, give None."""
    from dpsolve.batch import device
    A = sp.csr_array(laplace_3d(10))
    offsets, slot_pos = device.diagonals(A.indptr, A.indices, A.shape[0], (7, 4))
    assert list(offsets) == [-100, -10, -1, 0, 1, 10, 100] and slot_pos.dtype == np.int32
    _slots_hold_the_pattern(A, offsets, slot_pos)
    A = sp.csr_array(laplace_2d(9, 7))
    offsets, slot_pos = device.diagonals(A.indptr, A.indices, A.shape[0], (5, 4))
    assert list(offsets) == [-9, -1, 0, 1, 9]
    _slots_hold_the_pattern(A, offsets, slot_pos)
    T = sp.csr_array(sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(6, 6)))
    offsets, slot_pos = device.diagonals(T.indptr, T.indices, 6, (5, 4))
    assert list(offsets) == [0, -1, 0, 1, 0] and (slot_pos[[0, 4]] == -1).all()
    _slots_hold_the_pattern(T, offsets, slot_pos)
    L = sp.csr_array(sp.diags([1.0] * 5, [-4, -3, -2, -1, 0], shape=(9, 9)))
    assert device.diagonals(L.indptr, L.indices, 9, (7, 4)) is None     # 4 below: NZ // 2 = 3
    assert device.diagonals(T.indptr, T.indices, 6, (8, 4)) is None     # no DIA form at NZ = 8
    U = sp.csr_array(sp.diags([1.0, 1.0], [1, 2], shape=(5, 5)))        # no main diagonal
    offsets, slot_pos = device.diagonals(U.indptr, U.indices, 5, (5, 4))
    assert list(offsets) == [0, 0, 0, 1, 2] and (slot_pos[2] == -1).all()


def test_the_kernels_codes_are_the_modules():
    """batch.cu's BAD_INPUT and ZERO_DIAGONAL (the checks inside batch_cg_rows) are
    dpsolve.batch's."""
    import re
    from pathlib import Path
    text = (Path(batch.__file__).parents[1] / "cuda" / "batch.cu").read_text()
    m = re.search(r"constexpr int BAD_INPUT = (-?\d+), ZERO_DIAGONAL = (-?\d+);", text)
    assert m and (int(m[1]), int(m[2])) == (batch.BAD_INPUT, batch.ZERO_DIAGONAL)
