"""The batch's one-launch kernels (dpsolve/cuda/batch.cu through ``dpsolve.batch.device``'s
``solve_cg`` and ``solve_bicgstab``) against the host reference (``dpsolve.batch.cg`` /
``bicgstab``, which run ``reference.py`` with the true-residual restart): the same codes,
iterations within 2, every converged system within its own tolerance, x to rounding; skipped
systems kept; their own non-finite stop; vectors in shared and in global memory the same bits
(GPU machines only)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpsolve import batch
from dpsolve.matrices import convdiff_2d, laplace_2d, laplace_3d

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64, np.complex128]


def _batch(A, nb, dtype, rng):
    """nb systems A + s_i I (s_i uniform in [0, 1): mixed conditioning) with random b."""
    A = sp.csr_array(A)
    A.sort_indices()
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    diag = A.indices == rows
    values = np.tile(A.data, (nb, 1)).astype(dtype)
    values[:, diag] += rng.random((nb, 1))
    B = rng.standard_normal((nb, A.shape[0]))
    if np.dtype(dtype).kind == "c":
        B = B + 1j * rng.standard_normal(B.shape)
    return batch.csr(values, A.indices, A.indptr), B.astype(dtype)


def _device_inputs(Ab, B, rtol, M):
    """What dpsolve.batch's checks (``_checks``, on the device) give the kernel: the values and
    B in the working dtype, preset codes, tolerances, D^-1."""
    import cupy
    values, dB, info, _, dinv, (tol, _), _, _ = batch._checks(
        cupy, Ab, cupy.asarray(Ab.values), cupy.asarray(B), M, Ab.dtype, rtol, 0.0)
    return (values, cupy.asarray(Ab.indptr.astype(np.int32)),
            cupy.asarray(Ab.indices.astype(np.int32)), dB, cupy.zeros((Ab.nb, Ab.n), Ab.dtype),
            info.astype(cupy.int32), tol, dinv)


def _run(Ab, B, rtol, M=None, maxiter=None, method="cg", kernel="shared"):
    """One kernel on the batch: ``kernel="rows"`` batch_cg_rows (the checks in it), else
    batch_cg / batch_bicgstab after the checks."""
    from dpsolve.batch import device
    maxiter = 10 * Ab.n if maxiter is None else maxiter
    if kernel == "rows":
        import cupy
        config = device.rows_config(Ab.n, int(np.diff(Ab.indptr).max()))
        X = cupy.zeros((Ab.nb, Ab.n), Ab.dtype)
        info, its, res, tol, path = device.solve_cg_rows(
            cupy.asarray(Ab.values), cupy.asarray(Ab.indptr.astype(np.int32)),
            cupy.asarray(Ab.indices.astype(np.int32)), cupy.asarray(B), X, rtol, 0.0, maxiter,
            M == "jacobi", config)
        return X.get(), info.get(), its.get(), res.get(), tol.get(), path
    values, indptr, indices, dB, X, info, tol, dinv = _device_inputs(Ab, B, rtol, M)
    solve = getattr(device, f"solve_{method}")
    its, res, path = solve(values, indptr, indices, dB, X, info, tol, maxiter, dinv)
    return X.get(), info.get(), its.get(), res.get(), tol.get(), path


KERNELS = [("cg", "rows"), ("cg", "shared"), ("bicgstab", "shared")]


@pytest.mark.parametrize("method,kernel", KERNELS)
@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", ["2d-9x7", "3d-10"])
def test_batch_kernels_match_the_host_reference(pattern, dtype, M, method, kernel):
    rng = np.random.default_rng(7)
    A = laplace_2d(9, 7) if pattern == "2d-9x7" else laplace_3d(10)     # n = 63 / 1,000
    Ab, B = _batch(A, 37, dtype, rng)
    rtol = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-8
    X, info, its, res, tol, path = _run(Ab, B, rtol, M, method=method, kernel=kernel)
    Xr, info_r, rep = getattr(batch, method)(Ab, B, rtol=rtol, M=M, full_output=True,
                                             variant="host")
    single = np.dtype(dtype) == np.float32
    assert ("registers" if kernel == "rows" else "shared") in path
    assert (info == 0).all()
    np.testing.assert_array_equal(info, info_r)
    # other summation orders: CG's counts within 2, BiCGStab's (more sensitive) within 4
    assert np.abs(its - rep.iterations).max() <= (2 if method == "cg" else 4)
    assert (res <= tol).all()                            # each system within its own tolerance
    true = np.linalg.norm(B - _matvec(Ab, X), axis=1)   # the kernel's res is the true residual
    np.testing.assert_allclose(res, true, rtol=5e-2 if single else 1e-5)
    err = np.abs(X - Xr).max() / np.abs(Xr).max()
    assert err < (1e-3 if single else 1e-5)


def _matvec(Ab, X):
    from dpsolve.batch.reference import matvec
    return matvec(Ab.values, Ab.indptr, Ab.indices, X)


def test_skipped_systems_and_its_own_stops():
    """A preset code is kept (x and res untouched); a NaN it was not told of stops its system at
    once with -10 (the non-finite stop); a tight maxiter gives info = maxiter; the others
    converge."""
    from dpsolve.batch import device
    rng = np.random.default_rng(8)
    Ab, B = _batch(laplace_2d(8, 8), 6, np.float64, rng)
    Ab.values[2, 5] = np.nan                              # the kernel's own stop, below
    values, indptr, indices, dB, X, info, tol, dinv = _device_inputs(Ab, B, 1e-8, None)
    assert int(info[2]) == batch.BAD_INPUT                # the checks flag it; hide it from them
    info[2] = 0
    info[4] = batch.BAD_INPUT                             # as the host's checks would set it
    its, res, _ = device.solve_cg(values, indptr, indices, dB, X, info, tol, 200, dinv)
    info, its, res, X = info.get(), its.get(), res.get(), X.get()
    assert info[2] == -10 and its[2] == 0
    assert info[4] == batch.BAD_INPUT and np.isnan(res[4]) and not X[4].any()
    assert (info[[0, 1, 3, 5]] == 0).all()
    values, indptr, indices, dB, X, info, tol, dinv = _device_inputs(Ab, B, 1e-12, None)
    its, res, _ = device.solve_cg(values, indptr, indices, dB, X, info, tol, 3, dinv)
    assert (info.get()[[0, 1, 3, 4, 5]] == 3).all() and (its.get()[[0, 1, 3, 4, 5]] == 3).all()


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_global_vectors_give_the_shared_bits(monkeypatch, method):
    """Systems too large for shared memory keep their vectors in global scratch (here forced):
    the same arithmetic in the same order, so the same bits; fewer blocks than systems."""
    from dpsolve.batch import device
    rng = np.random.default_rng(9)
    Ab, B = _batch(laplace_3d(6), 700, np.float64, rng)
    X1, info1, its1, res1, _, path1 = _run(Ab, B, 1e-8, "jacobi", method=method)
    monkeypatch.setattr(device, "SHARED_MAX", 0)
    monkeypatch.setattr(device, "BLOCKS_PER_SM", 1)      # 132 blocks for 700 systems on an H100
    X2, info2, its2, res2, _, path2 = _run(Ab, B, 1e-8, "jacobi", method=method)
    assert "shared" in path1 and "global" in path2
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(its1, its2)
    np.testing.assert_array_equal(info1, info2)


def test_bicgstab_on_a_nonsymmetric_batch():
    """BiCGStab's kernel on convection-diffusion systems (nonsymmetric): the host reference's
    codes and every converged system within its tolerance."""
    rng = np.random.default_rng(11)
    Ab, B = _batch(convdiff_2d(12, 12, peclet=20.0), 25, np.float64, rng)
    X, info, its, res, tol, _ = _run(Ab, B, 1e-8, "jacobi", method="bicgstab")
    Xr, info_r, rep = batch.bicgstab(Ab, B, rtol=1e-8, M="jacobi", full_output=True)
    np.testing.assert_array_equal(info, info_r)
    assert (res[info == 0] <= tol[info == 0]).all()
    assert np.abs(its - rep.iterations).max() <= 4


def test_an_empty_batch():
    import cupy

    from dpsolve.batch import device
    z = cupy.zeros((0, 5))
    its, res, path = device.solve_cg(cupy.zeros((0, 3)), cupy.zeros(6, cupy.int32),
                                     cupy.zeros(3, cupy.int32), z, cupy.zeros((0, 5)),
                                     cupy.zeros(0, cupy.int32), cupy.zeros(0), 10)
    assert its.size == res.size == 0 and path == "none"


@pytest.mark.parametrize("n,w,config", [(1000, 3, (8, 1)), (1000, 3, (8, 2)), (1000, 3, (7, 4)),
                                        (1024, 2, (5, 4)), (1000, 1, (5, 4)), (500, 7, (16, 1)),
                                        (250, 15, (32, 1)), (1100, 1, (0, 4)),
                                        (3001, 2, (0, 4)), (4096, 20, (0, 4)), (4100, 1, None)])
def test_the_rows_kernel_takes_each_row_length(monkeypatch, n, w, config):
    """batch_cg_rows's sizes (rows of <= 5, 7, 8, 16 and 32 entries in registers, one, two or
    four rows a thread; rows of any length read through L1, 4 rows a thread), each on a banded SPD
    batch whose rows have 2 w + 1 entries, through dpsolve.batch.cg: picked where it fits, each
    system within its own tolerance, the host reference's codes and x; a system of more rows
    than a block takes batch_cg."""
    from dpsolve.batch import device
    if config is not None:
        monkeypatch.setattr(device, "ROWS_PER_THREAD" if config[0] else "ROWS_GLOBAL",
                            (config[1],))
    rng = np.random.default_rng(12)
    A = sp.diags([-np.ones(n - abs(o)) if o else np.full(n, 2.0 * w + 1) for o in range(-w, w + 1)],
                 list(range(-w, w + 1)), format="csr")
    assert device.rows_config(n, 2 * w + 1) == config
    Ab, B = _batch(A, 9, np.float64, rng)
    X, info, rep = batch.cg(Ab, B, rtol=1e-8, full_output=True, variant="device")
    Xr, info_r, rep_r = batch.cg(Ab, B, rtol=1e-8, full_output=True, variant="host")
    assert (("read through L1" if config[0] == 0 else f"<= {config[0]} entries in registers")
            in rep.path) if config else ("shared" in rep.path)
    np.testing.assert_array_equal(info, info_r)
    assert (rep.residual_norm <= rep.tolerance).all()
    assert np.abs(rep.iterations - rep_r.iterations).max() <= 2
    np.testing.assert_allclose(rep.tolerance, rep_r.tolerance, rtol=1e-12)
    np.testing.assert_allclose(X, Xr, rtol=0, atol=1e-6 * np.abs(Xr).max())


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_the_rows_kernel_checks_each_system(M, dtype):
    """The checks inside batch_cg_rows give each bad system the host's code, beside good ones:
    NaN in values, Inf in b, b = 0 (x = 0, info 0, residual 0), a zero diagonal entry (Jacobi
    only), with Jacobi one whose reciprocal is past the largest float, too small a maxiter."""
    rng = np.random.default_rng(13)
    Ab, B = _batch(laplace_2d(10, 9), 8, dtype, rng)
    rows = np.repeat(np.arange(Ab.n), np.diff(Ab.indptr))
    Ab.values[1, 3] = np.nan
    B[2, 7] = np.inf
    B[3] = 0
    Ab.values[4, np.flatnonzero(Ab.indices == rows)[5]] = 0          # a zero on the diagonal
    if M:                                       # 1 / a_66 past the largest float
        Ab.values[5, np.flatnonzero(Ab.indices == rows)[6]] = (
            1e-39 if np.finfo(dtype).bits == 32 else 1e-310)
    for maxiter in (None, 3):
        X, info, rep = batch.cg(Ab, B, rtol=1e-5, M=M, maxiter=maxiter, full_output=True,
                                variant="device")
        Xr, info_r, rep_r = batch.cg(Ab, B, rtol=1e-5, M=M, maxiter=maxiter, full_output=True,
                                     variant="host")
        assert "in registers" in rep.path
        np.testing.assert_array_equal(info, info_r)
        assert info[1] == info[2] == batch.BAD_INPUT and info[3] == 0
        assert info[4] == (batch.ZERO_DIAGONAL if M else (0 if maxiter is None else 3))
        assert not M or info[5] == batch.ZERO_DIAGONAL
        assert not X[[1, 2, 3]].any() and rep.residual_norm[3] == 0
        assert np.isnan(rep.residual_norm[[1, 2]]).all()
        np.testing.assert_array_equal(np.isnan(rep.residual_norm), np.isnan(rep_r.residual_norm))


PATTERNS = {"2d-32x31": lambda: laplace_2d(32, 31), "3d-10": lambda: laplace_3d(10),
            "2d-12x10": lambda: laplace_2d(12, 10),   # 120 rows: a block of 32, not the full one
            "tridiagonal": lambda: sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(700, 700))}


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_the_diagonal_form_gives_the_rows_forms_answers(monkeypatch, pattern, dtype, M):
    """batch_cg_rows's DIA form (a stencil's diagonals as kernel arguments, no columns in
    registers) sums each row in the same order as the rows' form -- the pattern's sorted
    columns, an empty slot adding 0 -- so, at the rows' form's block (FULL_BLOCK off), both give
    the same codes and iterations and x to rounding; the tridiagonal pattern has empty slots at
    NZ = 5; the host reference agrees."""
    from dpsolve.batch import device
    rng = np.random.default_rng(21)
    Ab, B = _batch(PATTERNS[pattern](), 23, dtype, rng)
    rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-8
    monkeypatch.setattr(device, "FULL_BLOCK", False)
    X, info, rep = batch.cg(Ab, B, rtol=rtol, M=M, full_output=True, variant="device")
    monkeypatch.setattr(device, "DIAGONALS", False)
    X2, info2, rep2 = batch.cg(Ab, B, rtol=rtol, M=M, full_output=True, variant="device")
    Xr, info_r, rep_r = batch.cg(Ab, B, rtol=rtol, M=M, full_output=True, variant="host")
    assert "as diagonals" in rep.path and "as diagonals" not in rep2.path
    assert "full block" not in rep.path
    assert (info == 0).all() and np.array_equal(info, info2) and np.array_equal(info, info_r)
    np.testing.assert_array_equal(rep.iterations, rep2.iterations)
    assert np.abs(rep.iterations - rep_r.iterations).max() <= 2
    assert (rep.residual_norm <= rep.tolerance).all()
    scale = np.abs(X2).max()
    np.testing.assert_allclose(X, X2, rtol=0, atol=(1e-5 if np.dtype(dtype) == np.float32
                                                      else 1e-13) * scale)


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_the_full_block_gives_the_same_answers(pattern, dtype, M):
    """The DIA form at the launch bound's block (a thread's rows a compile-time stride apart,
    the dead rows' places zeros) against the same form at the rows' own block: where both
    blocks are the same (3-D 10^3, 2-D 32 x 31) the same bits; else (the rows spread over other
    threads, so the block sums run in another order) the same codes, iterations within 2, every
    system within its tolerance. batch.cg takes the full block where it is over half of it."""
    import cupy
    from dpsolve.batch import device
    rng = np.random.default_rng(22)
    Ab, B = _batch(PATTERNS[pattern](), 23, dtype, rng)
    rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-8
    indptr, indices, row_max = Ab.device_pattern()
    config = device.rows_config(Ab.n, row_max, dtype)
    dia = Ab.device_diagonals(config)
    assert dia is not None
    values, dB = cupy.asarray(Ab.values), cupy.asarray(B)
    out = {}
    for full in (False, True):
        X = cupy.empty(B.shape, dtype=dtype)
        info, its, res, tol, path = device.solve_cg_rows(
            values, indptr, indices, dB, X, rtol, 0.0, 10 * Ab.n, M == "jacobi", config,
            dia=dia, full=full)
        assert ("full block" in path) == full
        out[full] = (X.get(), info.get(), its.get(), res.get(), tol.get())
    (X0, i0, k0, r0, t0), (X1, i1, k1, r1, t1) = out[False], out[True]
    assert (i0 == 0).all() and np.array_equal(i0, i1)
    assert (r0 <= t0).all() and (r1 <= t1).all()
    n, r = Ab.n, config[1]
    need = -(-n // r)
    if -(-need // 32) * 32 == device.BATCH_ROWS[config]:
        np.testing.assert_array_equal(k0, k1)
        np.testing.assert_array_equal(X0, X1)
    else:
        assert np.abs(k0 - k1).max() <= 2
    _, _, rep = batch.cg(Ab, B, rtol=rtol, M=M, full_output=True, variant="device")
    assert ("full block" in rep.path) == (2 * need > device.BATCH_ROWS[config])
    with pytest.raises(ValueError, match="full is the DIA form's"):
        device.solve_cg_rows(values, indptr, indices, dB, X, rtol, 0.0, 10, False, config,
                             full=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_a_checks_give_the_host_checks(dtype):
    """device.a_checks (batch_a_checks: one launch over the values) against the host: the codes
    of dpsolve.batch._checks (a NaN, an Inf, a zero diagonal entry, a row with no diagonal entry
    in a second pattern, a diagonal entry whose reciprocal is past the largest float), f of
    batch.matrix_shifts (systems scaled by 2^-+120 / 2^-+60 in float32, 2^-+1000 / 2^-+600 in
    float64; in float32 one whose every value is subnormal, which CuPy's -ftz=true would read as
    0), and D^-1 of A_i / 2^f_i (the reals to the bit; a real subnormal diagonal entry just above
    the reciprocal's edge taken, as the host takes it)."""
    import cupy

    from dpsolve.batch import device
    rng = np.random.default_rng(3)
    real = np.finfo(dtype).dtype
    big, mid = (120, 60) if real == np.float32 else (1000, 600)
    for drop_diagonal in (False, True):
        A = sp.csr_array(laplace_2d(6))
        if drop_diagonal:                       # row 7 has no diagonal entry in the pattern
            A = A.tolil()
            A[7, 7] = 0
            A = sp.csr_array(A)
            A.eliminate_zeros()
        Ab, _ = _batch(A, 16, dtype, rng)
        values = Ab.values.copy()
        k = np.array([0, 0, 0, 0, -big, big, -mid, mid] + [0] * 8)
        values *= np.ldexp(1.0, k)[:, None].astype(real)
        values[1, 3], values[2, 5] = np.nan, np.inf
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        values[3, np.flatnonzero(A.indices == rows)[4]] = 0         # a zero diagonal entry
        if real == np.float32:                  # every value below the normal range
            values[9] = (values[9] * np.float32(2.0 ** -135)).astype(dtype)
            assert np.abs(values[9]).max() < np.finfo(np.float32).tiny
        # a diagonal entry whose reciprocal is past the largest float, beside values near 1
        values[10, np.flatnonzero(A.indices == rows)[2]] = 1e-39 if real == np.float32 else 1e-310
        if np.dtype(dtype).kind == "f":         # the next float above that edge: taken, subnormal
            edge = np.ldexp(real.type(1), -128 if real == np.float32 else -1024)
            values[11, np.flatnonzero(A.indices == rows)[3]] = np.nextafter(edge, real.type(1))
        Ab = batch.csr(values, A.indices, A.indptr)
        B = np.ones((16, A.shape[0]), dtype)
        with np.errstate(invalid="ignore"):     # the host's order (_on_host): A_i / 2^f_i checked
            shifted = batch.times_power_of_two(np, values, -batch.matrix_shifts(values))
        _, _, info, _, _, _, _, _ = batch._checks(np, Ab, shifted, B, "jacobi", dtype, 1e-6, 0.0)
        code, f, dinv = device.a_checks(cupy.asarray(values), Ab.device_diagonal_positions())
        np.testing.assert_array_equal(code.get(), info)
        assert info[3] == info[10] == batch.ZERO_DIAGONAL
        assert drop_diagonal or info[9] == info[11] == 0
        good = np.isfinite(values).all(axis=1)
        good[10] = False                        # its D^-1 holds 1 / 1e-39: never used
        want = batch.matrix_shifts(values)
        np.testing.assert_array_equal(f.get()[good], want[good])
        assert (f.get()[~good] == 0).all() and (want[4:8] != 0).all()
        scaled = batch.times_power_of_two(np, values[good], -want[good])
        diag = np.zeros((int(good.sum()), A.shape[0]), dtype)
        on = A.indices == rows
        diag[:, rows[on]] = scaled[:, on]
        with np.errstate(divide="ignore", invalid="ignore"):
            host = np.where(diag != 0, 1 / np.where(diag != 0, diag, 1), 0).astype(dtype)
        got = dinv.get()[good]
        if np.dtype(dtype).kind == "c":
            np.testing.assert_allclose(got, host, rtol=4 * np.finfo(real).eps)
        else:
            np.testing.assert_array_equal(got, host)
        _, f0, d0 = device.a_checks(cupy.zeros((3, 0), dtype))
        assert (f0 == 0).all() and d0 is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_reciprocal_edge_is_the_hosts(dtype):
    """ZERO_DIAGONAL for a diagonal entry whose reciprocal is past the largest float, at the
    edge: batch.cu's no_reciprocal (one compare, |d| <= 2^-128 in float32, 2^-1024 in float64)
    in batch_cg_rows (CG with Jacobi) and batch_a_checks (BiCGStab) gives the host's codes
    (NumPy's 1 / d): the edge and minus it refused, the next float above it taken."""
    real = np.finfo(dtype)
    edge = np.ldexp(dtype(1), -128 if real.bits == 32 else -1024)
    A = sp.csr_array(laplace_2d(6))
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    values = np.tile(A.data.astype(dtype), (4, 1))
    d5 = np.flatnonzero(A.indices == rows)[5]
    values[1, d5], values[2, d5] = edge, -edge
    values[3, d5] = np.nextafter(edge, dtype(1))
    Ab = batch.csr(values, A.indices, A.indptr)
    B = np.ones((4, A.shape[0]), dtype)
    for method in ("cg", "bicgstab"):
        _, info, rep = getattr(batch, method)(Ab, B, M="jacobi", maxiter=5, variant="device",
                                              full_output=True)
        _, info_h = getattr(batch, method)(Ab, B, M="jacobi", maxiter=5, variant="host")
        assert method == "bicgstab" or "in registers" in rep.path
        assert info[1] == info[2] == info_h[1] == info_h[2] == batch.ZERO_DIAGONAL, (info, info_h)
        assert info[3] != batch.ZERO_DIAGONAL and info_h[3] != batch.ZERO_DIAGONAL


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.float64])
def test_the_rows_kernel_solves_an_a_far_from_1_again(dtype, M, monkeypatch):
    """batch_cg_rows takes A_i as it is; batch_cg_redo, the launch after it, solves again as
    A_i / 2^f_i each system it did not solve whose A_i is far from 1, as batch_cg does after
    batch_a_checks (ROWS off): A_i times 2^k (float32 2^-+120 and 2^-+60, float64 2^-+1000 and
    2^-+600), b_i with it or at 1, and in the reals a system whose every value is a float32
    subnormal (A_i times 2^-140) or a float64 one (2^-1060). Each system gets the host's code;
    one the first launch solved keeps its answer to the bit; one it did not (in float32 A_i of
    2^-120 with its b broke down, -10, and with Jacobi the subnormal A_i was refused, -21) gets
    batch_cg's code and iterations (within 1) and an x that meets its tolerance."""
    import cupy

    from dpsolve.batch import device
    A = sp.csr_array(laplace_2d(6, 5))
    A.sort_indices()
    real = np.finfo(dtype).dtype
    big, mid, low = (120, 60, -140) if real == np.float32 else (1000, 600, -1060)
    k = np.array([0, -big, big, -mid, mid, 0, -mid, mid, low])
    kb = np.array([0, -big, big, -mid, mid, 0, 0, 0, 0])
    rng = np.random.default_rng(7)
    nb, n = k.size, A.shape[0]
    V = np.empty((nb, A.nnz), dtype)
    for i in range(nb):
        shift = real.type(np.ldexp(1.0, int(k[i])))
        V[i] = (A.data * (1 + rng.random())).astype(dtype) * shift
    B = rng.standard_normal((nb, n)) + (1j * rng.standard_normal((nb, n)) if real != dtype
                                        else 0)
    B = (B * np.ldexp(1.0, kb)[:, None]).astype(dtype)
    assert V[-1].any() and np.abs(V[-1]).max() < np.finfo(dtype).tiny
    Ab = batch.csr(V, A.indices, A.indptr)
    rtol = 1e-5 if real == np.float32 else 1e-8
    kw = dict(rtol=rtol, M=M, full_output=True, variant="device")

    def run(rows, redo):
        monkeypatch.setattr(device, "ROWS", rows)
        monkeypatch.setattr(device, "REDO", redo)
        X, info, rep = batch.cg(Ab, B, **kw)
        return cupy.asnumpy(X), cupy.asnumpy(info), rep

    X, info, rep = run(True, True)
    X1, info1, rep1 = run(True, False)          # the first launch alone
    Xg, info_g, rep_g = run(False, True)        # batch_a_checks, then batch_cg
    _, info_h = batch.cg(Ab, B, rtol=rtol, M=M, variant="host")
    assert "a thread" in rep.path and "second launch" in rep.path, rep.path
    assert "second launch" not in rep1.path
    np.testing.assert_array_equal(info, info_h)
    np.testing.assert_array_equal(info, info_g)
    again = info1 != 0
    kept = ~again
    np.testing.assert_array_equal(X[kept], X1[kept])
    np.testing.assert_array_equal(rep.iterations[kept], rep1.iterations[kept])
    np.testing.assert_array_equal(rep.residual_norm[kept], rep1.residual_norm[kept])
    # batch_cg's iterations (its tolerance from ||b|| in float64, the rows kernel's from the
    # squares in the working precision: a last bit apart)
    assert (np.abs(rep.iterations[again] - rep_g.iterations[again]) <= 1).all()
    for i in np.flatnonzero(again & (info == 0)):
        assert rep.residual_norm[i] <= rep.tolerance[i], i
        np.testing.assert_allclose(X[i], Xg[i], rtol=0, atol=50 * rtol * np.abs(Xg[i]).max())
    np.testing.assert_array_equal(rep.tolerance, rep1.tolerance)
    if real == np.float32:                      # the cases the first launch fails (README)
        assert again.any() and (M is None or dtype != np.float32
                                or info1[-1] == batch.ZERO_DIAGONAL), info1
