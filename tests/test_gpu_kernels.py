"""The SpMV and DOT kernels against SciPy and NumPy, in float32 and float64, at awkward sizes.

GPU only: skipped with a reason where there is no usable CUDA device.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from dpsolve.formats import to_csr

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64]
RTOL = {np.float32: 2e-5, np.float64: 1e-13}
SIZES = [1, 2, 31, 97, 1000, 4097]


def _cp():
    import cupy
    return cupy


def _random_matrix(n, density, rng, dtype, empty_rows=True):
    A = sp.random_array((n, n), density=density, rng=rng, dtype=np.float64, format="csr")
    A = A + sp.eye_array(n)                      # at least one entry per row...
    A = sp.csr_array(A)
    if empty_rows and n > 3:
        A = sp.lil_array(A)
        A[1, :] = 0                              # ... except some rows with none at all
        A[n - 1, :] = 0
        A = sp.csr_array(A)
        A.eliminate_zeros()
    return A.astype(dtype)


def _matrices(dtype):
    rng = np.random.default_rng(7)
    cases = {f"rand{n}": _random_matrix(n, min(1.0, 8.0 / n), rng, dtype) for n in SIZES}
    long_row = sp.lil_array((300, 300))
    long_row.setdiag(1.0)
    long_row[5, :] = rng.standard_normal(300)    # one long row among short ones
    cases["longrow"] = sp.csr_array(long_row).astype(dtype)
    from dpsolve.matrices import laplace_3d
    cases["lap3d-17"] = laplace_3d(17).astype(dtype)
    return cases


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("fmt", ["csr-scalar", "csr-vector", "ell"])
def test_spmv_matches_scipy(fmt, dtype):
    cp = _cp()
    from dpsolve.cuda import ops
    rng = np.random.default_rng(11)
    for name, A in _matrices(dtype).items():
        dA = ops.DeviceMatrix.build(to_csr(A, dtype), fmt, max_fill=1e9)
        x = rng.standard_normal(A.shape[0]).astype(dtype)
        y = cp.full(A.shape[0], cp.nan, dtype=dtype)             # poisoned output
        ops.spmv(dA, cp.asarray(x), y)
        ref = (A.astype(np.float64) @ x.astype(np.float64))
        got = y.get()
        assert np.isfinite(got).all(), f"{name}/{fmt}: unwritten output rows"
        scale = np.abs(A.astype(np.float64)) @ np.abs(x.astype(np.float64)) + 1e-300
        err = np.max(np.abs(got - ref) / scale)
        assert err < RTOL[dtype] * 10, f"{name}/{fmt}/{np.dtype(dtype)}: max rel err {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES + [np.complex64, np.complex128],
                         ids=["float32", "float64", "complex64", "complex128"])
def test_ell_layout_on_the_device_is_the_hosts(dtype):
    """ELL.from_csr of a CSR on the device (spmv.cu's ell_fill) writes the host's scatter
    layout bit for bit: entries in row order, column-major, padding 0 and -1; an all-empty
    matrix has width 0."""
    cp = _cp()
    from dpsolve.formats.ell import ELL
    cases = dict(_matrices(dtype))
    cases["empty"] = sp.csr_array((5, 5), dtype=dtype)
    for name, A in cases.items():
        if np.dtype(dtype).kind == "c":
            A = (A + 1j * A.multiply(A)).astype(dtype)     # distinct imaginary parts
        host = ELL.from_csr(to_csr(A, dtype), max_fill=np.inf)
        dev = ELL.from_csr(to_csr(A, dtype).to_device(), max_fill=np.inf)
        assert (dev.n, dev.width, dev.nnz) == (host.n, host.width, host.nnz), name
        assert dev.indices.dtype == np.int32 and dev.data.dtype == dtype, name
        np.testing.assert_array_equal(dev.indices.get(), host.indices, err_msg=name)
        np.testing.assert_array_equal(dev.data.get().view(np.uint8),
                                      host.data.view(np.uint8), err_msg=name)
    assert isinstance(dev.data, cp.ndarray)


@pytest.mark.parametrize("width_mean", [1, 3, 7, 20, 60])
def test_csr_vector_every_group_width(width_mean):
    cp = _cp()
    from dpsolve.cuda import ops
    rng = np.random.default_rng(width_mean)
    n = 513
    A = sp.random_array((n, n), density=min(1.0, width_mean / n), rng=rng, format="csr")
    dA = ops.DeviceMatrix.build(to_csr(A, np.float64), "csr-vector")
    assert dA.width == ops.vector_width(A.nnz / n)
    x = rng.standard_normal(n)
    y = cp.full(n, cp.nan)
    ops.spmv(dA, cp.asarray(x), y)
    np.testing.assert_allclose(y.get(), A @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("n", SIZES + [1_000_003])
def test_two_stage_dot_matches_numpy(n, dtype):
    cp = _cp()
    from dpsolve.cuda import ops
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    out = cp.full(1, cp.nan, dtype=dtype)
    partials = cp.full(ops.DOT_MAX_PARTIALS, cp.nan, dtype=dtype)
    ops.dot(cp.asarray(x), cp.asarray(y), out, partials)
    ref = np.dot(x.astype(np.float64), y.astype(np.float64))
    bound = np.dot(np.abs(x).astype(np.float64), np.abs(y).astype(np.float64))
    eps = np.finfo(dtype).eps
    assert abs(float(out.get()[0]) - ref) <= 4 * eps * np.sqrt(n) * bound + 1e-30


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("n", [1, 2, 31, 97, 513, 100_001])
def test_axpy_xpay(n, dtype):
    cp = _cp()
    from dpsolve.cuda import ops
    rng = np.random.default_rng(n + 1)
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    alpha = np.array([0.37], dtype=dtype)
    dy = cp.asarray(y)
    ops.axpy(cp.asarray(alpha), cp.asarray(x), dy, sign=-1.0)
    np.testing.assert_allclose(dy.get(), y - alpha[0] * x, rtol=RTOL[dtype] * 10, atol=1e-6)
    dy = cp.asarray(y)
    ops.xpay(cp.asarray(x), cp.asarray(alpha), dy)
    np.testing.assert_allclose(dy.get(), x + alpha[0] * y, rtol=RTOL[dtype] * 10, atol=1e-6)


def test_nvrtc_compile_error_names_file_and_line(broken_kernel):
    from dpsolve import KernelCompileError
    from dpsolve.cuda import _loader
    with pytest.raises(KernelCompileError, match=r"broken\.cu\(3\)"):
        _loader.get_kernel("broken", "k<{T}>", np.float64)


@pytest.mark.parametrize("source,expr,unregistered", [
    ("cg_persistent_cta", "cg_persistent_cta<{T}, 5, 2, false>",
     "cg_persistent_cta<{T}, 5, 3, false>"),
    ("batch", "batch_cg_rows<{T}, 7, 4, true, true>", "batch_cg_rows<{T}, 7, 3, true>")])
def test_a_lazy_source_compiles_the_kernel_asked_for_alone(source, expr, unregistered):
    """A lazy source (the persistent, dynamic and batch solvers') is one module a kernel: its
    first use compiles that instantiation only; an expression it does not register is refused by
    name."""
    import cupy

    from dpsolve.cuda import _loader
    assert _loader.SOURCES[source].lazy
    _loader.get_kernel(source, expr, np.float64)
    mod = _loader._module(cupy.cuda.runtime.getDevice(), source,
                          np.dtype(np.float64).str, False, (), expr.format(T="double"))
    assert list(mod.name_expressions) == [expr.format(T="double")]
    with pytest.raises(ValueError, match="registered"):
        _loader.get_kernel(source, unregistered, np.float64)


def test_device_csr_conversion_from_cupy_inputs():
    """CuPy inputs are converted on the device; results match the host conversion."""
    cp = _cp()
    import cupyx.scipy.sparse as csp
    rng = np.random.default_rng(3)
    A = sp.random_array((50, 50), density=0.1, rng=rng, format="coo")
    dense = cp.asarray(A.toarray())
    for src in (csp.csr_matrix(sp.csr_matrix(A)), csp.coo_matrix(sp.coo_matrix(A)), dense):
        c = to_csr(src, np.float64)
        assert c.on_device
        h = c.to_host()
        ref = to_csr(A, np.float64)
        np.testing.assert_array_equal(h.indptr, ref.indptr)
        np.testing.assert_array_equal(h.indices, ref.indices)
        np.testing.assert_allclose(h.data, ref.data)


@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("n", [1, 37, 5000])
def test_csr_adaptive_spmv_matches_scipy(n, dtype, group):
    """Every mapping of the load-balanced SpMV: short rows by `group` lanes each, warp- and
    block-mapped rows (the heavy rows are longer than t_warp = 1024 where n allows, and 9000 > two
    chunks), at awkward sizes, output NaN-poisoned."""
    import cupy
    from dpsolve.cuda import ops
    from dpsolve.formats import RowBins
    from dpsolve.matrices import power_law
    A = power_law(n, mean=6.0, heavy=(min(n, 3000), min(n, 1200), min(n, 200), min(n, 9000)),
                  seed=n)
    A = sp.csr_array(A, dtype=dtype)
    if np.dtype(dtype).kind == "c":
        A.data = A.data * (1 + 0.5j)
    dA = ops.DeviceMatrix.build(to_csr(A, dtype), "csr-adaptive")
    dA.bins = RowBins.from_csr(dA.csr, group=group)
    ns, nm, nl = dA.bins.counts()
    assert ns + nm + nl == n and (n < 1100 or nl >= 2)
    x = np.random.default_rng(1).standard_normal(n).astype(dtype)
    y = cupy.full(n, np.nan, dtype)
    ops.spmv(dA, cupy.asarray(x), y)
    ref = A.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64) @ x
    eps = np.finfo(dtype).eps
    scale = (abs(A) @ abs(x)).max()
    np.testing.assert_allclose(y.get(), ref, rtol=0, atol=64 * eps * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_max_column_on_the_device_matches_the_host(dtype):
    """A^H's longest row (BiCG's "auto" format) counted on the device by a scatter of ones equals
    the host's bincount and the transpose's longest row: one long column among short ones, an
    empty matrix, rows and columns with no entry, and the last column the longest."""
    from dpsolve.matrices import power_law
    rng = np.random.default_rng(5)
    long_col = sp.lil_array((300, 300))
    long_col.setdiag(1.0)
    long_col[:, 7] = rng.standard_normal((300, 1))
    last = sp.lil_array((40, 40))
    last[:, 39] = 1.0
    cases = [sp.csr_array(long_col), sp.csr_array((5, 5)), sp.csr_array(last),
             _random_matrix(4097, 8.0 / 4097, rng, np.float64),
             sp.csr_array(power_law(20_000, heavy=(3000, 500), seed=2)).T.tocsr()]
    for A in cases:
        h = to_csr(sp.csr_array(A, dtype=dtype), dtype)
        d = h.to_device()
        want = int(np.diff(sp.csr_array(A).T.tocsr().indptr).max()) if A.nnz else 0
        assert h.max_column() == d.max_column() == want


def test_row_bins_statistics_on_the_device_match_the_host():
    """RowBins computed from a device CSR (as DeviceMatrix.build does) equal the host's: the same
    bins, the same lanes per short row (its column-spread statistic takes another path there)."""
    from dpsolve.formats import RowBins
    from dpsolve.formats.adaptive import short_stats
    from dpsolve.matrices import laplace_3d, power_law
    for A in (power_law(30_000, heavy=(5000, 800), seed=4), laplace_3d(12)):
        h = to_csr(A, np.float64)
        d = h.to_device()
        bh, bd = RowBins.from_csr(h), RowBins.from_csr(d)
        assert (bh.t_thread, bh.group, bh.nchunks) == (bd.t_thread, bd.group, bd.nchunks)
        for a, b in ((bh.short, bd.short), (bh.medium, bd.medium), (bh.long, bd.long)):
            np.testing.assert_array_equal(a, b.get())
        L = np.diff(h.indptr)
        np.testing.assert_allclose(short_stats(d, L, bh.t_thread), short_stats(h, L, bh.t_thread),
                                   rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("n", [3, 257, 100_003])
def test_dot_accurate_survives_cancellation(n, dtype):
    """blas1's dot_accurate (dps::dot_accurate, the confirmation of a rho breakdown): terms of
    +-big and small ones cancel so that a plain sum in any order loses the small ones; the
    accurate sum is exact here (the answer is an integer far below 2^24)."""
    cp = _cp()
    from dpsolve.cuda import ops
    big = 1e8 if np.dtype(dtype).char in "fF" else 1e17
    x = np.ones(n)
    m = 3 * (n // 3)
    x[0:m:3] = big
    x[2:m:3] = -big                 # big, 1, -big, ..., 1: the bigs cancel in exact arithmetic
    y = np.ones(n)
    exact = float(np.count_nonzero(x == 1.0))
    if np.iscomplexobj(np.zeros(1, dtype)):
        xs = (x + 1j * x).astype(dtype)
        ys = (y + 2j * y).astype(dtype)
        expected = np.conj(1 + 1j) * (1 + 2j) * exact        # conj(x) y, term by term
    else:
        xs, ys, expected = x.astype(dtype), y.astype(dtype), exact
    out = cp.full(1, cp.nan, dtype=dtype)
    ops.dot_accurate(cp.asarray(xs), cp.asarray(ys), out)
    assert complex(out.get()[0]) == pytest.approx(complex(expected), rel=1e-6), \
        f"plain sum gives {np.vdot(xs, ys)}"
