"""Float32 subnormals on the device (GPU machines only).

CuPy compiles every kernel with -ftz=true (``dpsolve._system.flushes``): on the device any
float32 operation -- abs, astype, a product, a comparison, a sum -- reads a value below 2^-126 as
0 and writes a result below it as 0. Before, a b whose entries all lay there was answered x = 0
with info 0 ("converged") by every device path: the single solves, ``dpsolve.batch`` and the
blocks of right-hand sides; and where b's largest entry was just above 2^-126, its subnormal
entries were lost when b was scaled. Here each path is held to the host variant's answer on the
same b (NumPy reads subnormals as they are) and to the true residual.
"""
import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve import batch
from dpsolve.backends import VARIANT_NAMES, get_backend
from dpsolve.matrices import laplace_2d
from test_fuzz_host import scaled_norm, times_power_of_two

pytestmark = pytest.mark.gpu

GPU_VARIANTS = [v for v in VARIANT_NAMES[1:] if get_backend(v) is not None]
RTOL = 1e-4


def _b(kind, dtype, n, seed=0):
    """b in ``dtype``: "all" every entry below 2^-126 (about 2^-132); "some" its largest entry
    2^-118, every other entry a subnormal of about 2^-133 (lost, before, when b was scaled);
    "few bits" entries of 2^-146: a float32 x there has a few bits, so a tight tolerance cannot
    be met by the x the caller gets."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.5, 1.0, n) * rng.choice([-1.0, 1.0], n)
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.uniform(0.5, 1.0, n)
    k = np.where(np.arange(n) % 2 == 0, -118, -133) if kind == "some" else np.full(
        n, {"all": -132, "few bits": -146}[kind])
    w = times_power_of_two(v, k)
    b = (w if np.dtype(dtype).kind == "c" else w.real).astype(dtype)
    if kind != "some":
        assert np.abs(b).max() < np.finfo(np.float32).tiny and b.all()
    return b


def _residual(A, b, x):
    """||b - A x|| in complex128 with b and x times 2^-e first (exact): x may be subnormal."""
    e = int(np.frexp(max(np.abs(b).max(), np.abs(x).max()))[1])
    bs, xs = times_power_of_two(b, -e), times_power_of_two(x, -e)
    return float(np.ldexp(scaled_norm(bs - A.astype(np.complex128) @ xs), e))


def _check(A, b, x, info, host_x, host_info):
    """The device's answer is the host's: its code, x to rounding, and where info is 0 the true
    residual of the x returned meets the tolerance."""
    assert info == host_info, (info, host_info)
    assert np.asarray(x).any(), "b is not 0: x = 0 is the answer to b = 0"
    tol = RTOL * scaled_norm(b.astype(np.complex128))
    if info == 0:
        assert _residual(A, b, x) <= 1.05 * tol
        np.testing.assert_allclose(x, host_x, rtol=0, atol=1e-2 * np.abs(host_x).max())


def _tiny_matrix(A, dtype):
    """A 2^-135 in ``dtype``, exactly: every value a float32 subnormal (2-D Laplacians: 2^-133
    and -2^-135)."""
    A = sp.csr_array(A)
    w = times_power_of_two(A.data, -135)
    data = (w if np.dtype(dtype).kind == "c" else w.real).astype(dtype)
    assert np.abs(data).max() < np.finfo(np.float32).tiny and data.all()
    return sp.csr_array((data, A.indices, A.indptr), shape=A.shape)


def test_widened_and_narrowed_are_numpys_conversions():
    """The bit-level conversions give NumPy's bits: every float32 class (zeros, subnormals, the
    normal range's edges, Inf, NaN) widened; float64 values around and below 2^-126, halfway
    cases included, narrowed; complex64 by its parts."""
    import cupy

    from dpsolve._system import narrowed, widened
    bits = np.array([0, 1, 2, 3, 0x7FFFFF, 0x400000, 0x800000, 0x800001, 0x3F800000,
                     0x7F7FFFFF, 0x7F800000, 0x7FC00000], np.uint32)
    rng = np.random.default_rng(1)
    bits = np.concatenate([bits, rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(
        np.uint32), rng.integers(0, 0x800000, 2000).astype(np.uint32)])
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    f = bits.view(np.float32)
    def same(got, want):                       # bit for bit; a NaN's payload aside
        got, want = got.view(want.real.dtype), want.view(want.real.dtype)
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan].view(f"u{got.itemsize}"),
                                      want[~nan].view(f"u{want.itemsize}"))

    c = f[: f.size // 2 * 2].view(np.complex64)
    with np.errstate(invalid="ignore"):         # NumPy's cast of a signalling NaN flags it
        want_f, want_c = f.astype(np.float64), c.astype(np.complex128)
    same(widened(cupy.asarray(f)).get(), want_f)
    same(widened(cupy.asarray(c)).get(), want_c)
    m = rng.integers(0, 2 ** 24, 3000)
    d = np.concatenate([np.ldexp(m + 0.5, -150), np.ldexp(m + rng.random(3000), -150),
                        np.ldexp(rng.random(2000), -126 + rng.integers(-30, 10, 2000)),
                        [2.0 ** -126, 2.0 ** -126 * (1 - 2.0 ** -25), 2.0 ** -150, 2.0 ** -151,
                         3 * 2.0 ** -151, 0.0, 1.0, np.inf, 1e39]])
    d = np.concatenate([d, -d])
    with np.errstate(over="ignore"):
        want = d.astype(np.float32)
    same(narrowed(cupy.asarray(d), np.float32).get(), want)
    dc = d[: d.size // 2 * 2].view(np.complex128)
    with np.errstate(over="ignore"):
        want = dc.astype(np.complex64)
    same(narrowed(cupy.asarray(dc), np.complex64).get(), want)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("kind", ["all", "some"])
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_single_solves_read_a_subnormal_b(variant, kind, dtype):
    """dpsolve.cg on each variant, b NumPy and CuPy: the host variant's code and x."""
    import cupy
    import cupyx.scipy.sparse as csp
    A = sp.csr_array(laplace_2d(5)).astype(dtype)
    b = _b(kind, dtype, A.shape[0])
    host_x, host_info = dpsolve.cg(A, b, rtol=RTOL, variant="host")
    for bb, AA in ((b, A), (cupy.asarray(b), csp.csr_matrix(A))):
        x, info = dpsolve.cg(AA, bb, rtol=RTOL, variant=variant)
        _check(A, b, cupy.asnumpy(x), info, host_x, host_info)


@pytest.mark.parametrize("variant", ["cuda", "graph"])
def test_an_x_that_rounds_away_its_tolerance_is_not_converged(variant):
    """b of 2^-146: the solve converges on the scaled system, but the x the caller gets, a
    float32 subnormal of a few bits, misses the tolerance: info maxiter, as on the host, and the
    residual reported is that x's."""
    A = sp.csr_array(laplace_2d(4)).astype(np.float32)
    b = _b("few bits", np.float32, A.shape[0])
    host_x, host_info, host_rep = dpsolve.cg(A, b, rtol=1e-6, variant="host", full_output=True)
    x, info, rep = dpsolve.cg(A, b, rtol=1e-6, variant=variant, full_output=True)
    assert info > 0 and host_info > 0 and x.any()
    r = _residual(A, b, x)
    assert np.isclose(rep.residual_norm, r, rtol=1e-3) and r > rep.tolerance


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("rows", [True, False])
def test_the_batch_reads_a_subnormal_b(rows, dtype, method, monkeypatch):
    """dpsolve.batch on the device (CG's batch_cg_rows, or the checks in CuPy then batch_cg /
    batch_bicgstab): each system's code and x are the host reference's; "few bits" systems
    are not converged, on both."""
    from dpsolve.batch import device
    monkeypatch.setattr(device, "ROWS", rows)
    A = sp.csr_array(laplace_2d(4)).astype(dtype)
    A.sort_indices()
    n = A.shape[0]
    kinds = ["all", "some", "few bits", "all"]
    B = np.array([_b(k, dtype, n, seed=i) for i, k in enumerate(kinds)])
    V = np.tile(A.data, (len(kinds), 1))
    Ab = batch.csr(V, A.indices, A.indptr)
    solve = getattr(batch, method)
    hX, hinfo, hrep = solve(Ab, B, rtol=RTOL, full_output=True, variant="host")
    X, info, rep = solve(Ab, B, rtol=RTOL, full_output=True, variant="device")
    assert ("a thread" in rep.path) == (rows and method == "cg"), rep.path
    for i, k in enumerate(kinds):
        _check(A, B[i], X[i], info[i], hX[i], hinfo[i])
        np.testing.assert_allclose(rep.tolerance[i], hrep.tolerance[i], rtol=1e-6)
        if k == "few bits":
            assert info[i] > 0


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_side", [6, 121])
def test_a_block_of_right_hand_sides_with_tiny_columns(n_side, dtype, method):
    """A block (n, 4): a normal column, one below the normal range (float32 subnormals of about
    2^-128, float64's 2^-1040), one whose squares underflow (2^-600 in float64, 2^-80 in
    float32) and a zero column; 6^2 rows take the batch path, 121^2 the fused block. Each
    column's code and x are its single solve's; the zero column's x is 0."""
    A = sp.csr_array(laplace_2d(n_side)).astype(dtype)
    n = A.shape[0]
    rng = np.random.default_rng(3)
    B = rng.standard_normal((n, 4))
    tiny = -1040 if dtype == np.float64 else -128     # x keeps bits enough for RTOL
    under = -600 if dtype == np.float64 else -80
    B[:, 1] = np.ldexp(B[:, 1], tiny)
    B[:, 2] = np.ldexp(B[:, 2], under)
    B[:, 3] = 0
    B = B.astype(dtype)
    assert B[:, 1].any() and B[:, 2].any()
    solver = getattr(dpsolve, method)
    X, info = solver(A, B, rtol=RTOL)
    for j in range(4):
        xj, ij = solver(A, B[:, j], rtol=RTOL, variant="host")
        assert info[j] == ij, (j, info, ij)
        if j == 3:
            assert not X[:, j].any()
            continue
        assert X[:, j].any()
        if ij == 0:
            assert _residual(A, B[:, j], X[:, j]) <= 1.05 * RTOL * scaled_norm(B[:, j])


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("kind", ["all", "some"])
def test_the_devices_value_exponents_read_subnormals(kind, dtype):
    """csr_check's exponent words and largest_exponent's max_abs kernel give the host's exponents
    (value_exponents) where the values lie below 2^-126 ("all"; "some": the largest 2^-118, the
    others subnormal). Before, -ftz=true read them as 0: a float32 CuPy A all below 2^-126 had
    "no nonzero value", and was not scaled into range."""
    import cupy

    from dpsolve._setup import csr_check_queue
    from dpsolve._system import largest_exponent, value_exponents
    from dpsolve.cuda import abi
    A = sp.csr_array(laplace_2d(6))
    data = _b(kind, dtype, A.nnz, seed=4)
    out = cupy.zeros(4, cupy.int32)
    csr_check_queue(cupy.asarray(A.indptr), cupy.asarray(A.indices), cupy.asarray(data),
                    A.shape[0], out)(cupy.cuda.get_current_stream())
    flags, _, hi, lo = (int(w) for w in out.get())
    want = value_exponents(data)
    assert flags == 0 and want[0] < -117
    assert (hi - abi.DPS_EXP_BIAS, abi.DPS_EXP_BIAS - lo) == want
    assert largest_exponent(cupy.asarray(data)) == want[0]


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_a_matrix_below_the_normal_range_is_scaled_into_it(variant, dtype):
    """A float32 CuPy A whose every value lies below 2^-126 (2-D 5^2 times 2^-135, exactly) with
    a b of subnormals: each variant gives the host variant's code and x on the NumPy A (read as
    it is), where before the device read A as 0."""
    import cupy
    import cupyx.scipy.sparse as csp
    A = _tiny_matrix(laplace_2d(5), dtype)
    b = _b("all", dtype, A.shape[0])
    host_x, host_info = dpsolve.cg(A, b, rtol=RTOL, variant="host")
    assert host_info == 0
    for bb in (b, cupy.asarray(b)):
        x, info = dpsolve.cg(csp.csr_matrix(A), bb, rtol=RTOL, variant=variant)
        _check(A, b, cupy.asnumpy(x), info, host_x, host_info)


def test_the_lane_leaves_a_matrix_set_below_the_normal_range(monkeypatch):
    """The default call's lane (test_gpu_lane) adopted on A, then A's values set in place to
    A 2^-135 (subnormals, copied in as bits) and b to b 2^-20 (||b|| in the range the lane
    takes): its guard reads csr_check's exponent words, now A's, so the general path answers
    (A scaled into range), as the host does on the same A. Before, the guard read "every value
    zero" (inside the window) and the lane ran the kernel on A read as 0."""
    import cupy
    from test_gpu_lane import Spy, _system, cg

    from dpsolve import _fast
    dpsolve.clear_cache()
    monkeypatch.setattr(_fast, "ADOPT_AFTER", 1)
    spy = Spy(monkeypatch)
    try:
        A, dA, db = _system(laplace_2d(12), np.float32)
        assert cg(dA, db, rtol=RTOL)[1] == 0 and len(_fast._lanes) == 1
        At = _tiny_matrix(A, np.float32)
        dA.data[...] = cupy.asarray(At.data)               # a copy of bits: no float operation
        b = np.ldexp(db.get(), -20).astype(np.float32)      # exact
        x, info = cg(dA, cupy.asarray(b), rtol=RTOL)
        assert spy.answered == 0
        host_x, host_info = dpsolve.cg(At, b, rtol=RTOL, variant="host")
        assert host_info == 0
        _check(At, b, x.get(), info, host_x, host_info)
    finally:
        dpsolve.clear_cache()                               # no lane kept past the test
