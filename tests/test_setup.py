"""The GPU set-up (dpsolve/_setup.py, check.cu): one-pass matrix checks, staged uploads, norms.

The first test runs everywhere (the Python mirror of check.cu's bits); the rest need a GPU."""

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve import _setup
from dpsolve.cuda import abi
from dpsolve.matrices import laplace_2d


def test_check_bits_mirror_check_cu():
    defines = {name[len("DPS_CHECK_"):]: value                            # check.cu's bits
               for name, value in abi.parse(abi.HEADER.read_text()).items()
               if name.startswith("DPS_CHECK_")}
    ours = {name[len("CHECK_"):]: getattr(_setup, name) for name in dir(_setup)
            if name.startswith("CHECK_")}
    assert defines == ours and len(ours) == 5


gpu = pytest.mark.gpu


def _csp():
    import cupyx.scipy.sparse as csp
    return csp


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_unsorted_duplicates_are_summed_in_a_copy(dtype):
    """A cupyx CSR with unsorted rows and duplicate entries solves as its canonical form, and
    the caller's arrays stay as they were."""
    import cupy
    A = sp.csr_array(laplace_2d(6), dtype=dtype)
    ip, ix, d = A.indptr.copy(), A.indices.copy(), A.data.copy()
    # reverse each row's entries and split each diagonal entry into two duplicates
    rows_ix, rows_d, ptr = [], [], [0]
    for i in range(A.shape[0]):
        cols, vals = list(ix[ip[i]:ip[i + 1]][::-1]), list(d[ip[i]:ip[i + 1]][::-1])
        k = cols.index(i)
        vals[k] = vals[k] / 2
        cols.append(i)
        vals.append(vals[k])
        rows_ix += cols
        rows_d += vals
        ptr.append(len(rows_ix))
    dA = _csp().csr_matrix((cupy.asarray(np.array(rows_d, dtype=dtype)),
                            cupy.asarray(np.array(rows_ix, dtype=np.int32)),
                            cupy.asarray(np.array(ptr, dtype=np.int32))), shape=A.shape)
    saved = [a.copy() for a in (dA.data, dA.indices, dA.indptr)]
    b = np.ones(A.shape[0], dtype=dtype)
    rtol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9
    x, info = dpsolve.cg(dA, b, rtol=rtol, variant="persistent")
    x_ref, info_ref = dpsolve.cg(A, b, rtol=rtol, variant="persistent")
    assert info == info_ref == 0
    np.testing.assert_allclose(x, x_ref, rtol=10 * rtol)
    for a, s in zip((dA.data, dA.indices, dA.indptr), saved):
        assert bool((a == s).all()), "the caller's matrix must not change"


@gpu
def test_bad_matrices_name_the_problem():
    import cupy
    csp = _csp()
    n = 4
    b = np.ones(n)
    good = sp.csr_array(laplace_2d(2))
    data, ix, ip = good.data.copy(), good.indices.copy(), good.indptr.copy()

    def dev(d, i, p):
        return csp.csr_matrix((cupy.asarray(d), cupy.asarray(i), cupy.asarray(p)), shape=(n, n))

    bad_col = ix.copy()
    bad_col[3] = 7
    with pytest.raises(dpsolve.FormatError, match=r"column index out of range \[0, 4\)"):
        dpsolve.cg(dev(data, bad_col, ip), b, variant="persistent")
    bad_ptr = ip.copy()
    bad_ptr[2] = bad_ptr[3] + 1
    with pytest.raises(dpsolve.FormatError, match="indptr"):
        dpsolve.cg(dev(data, ix, bad_ptr), b, variant="persistent")
    nan = data.copy()
    nan[5] = np.inf
    with pytest.raises(ValueError, match="A contains NaN or Inf"):
        dpsolve.cg(dev(nan, ix, ip), b, variant="persistent")
    with pytest.raises(ValueError, match="A contains NaN or Inf"):    # checked after the copy
        dpsolve.cg(sp.csr_array((nan, ix, ip), shape=(n, n)), b, variant="persistent")
    # an int64 column index past 2^32 must not wrap into range
    wide = ix.astype(np.int64)
    wide[0] = 2**32 + int(ix[0])
    A64 = sp.csr_array((data, wide, ip.astype(np.int64)), shape=(n, n))
    with pytest.raises(dpsolve.FormatError, match="column index out of range"):
        dpsolve.cg(A64, b, variant="persistent")


@gpu
def test_int64_and_narrow_inputs_are_converted_on_the_device():
    A = sp.csr_array(laplace_2d(8))
    A64 = sp.csr_array((A.data.astype(np.float32), A.indices.astype(np.int64),
                        A.indptr.astype(np.int64)), shape=A.shape)
    b = np.ones(A.shape[0])
    x, info, rep = dpsolve.cg(A64, b, rtol=1e-10, variant="persistent", full_output=True)
    assert info == 0 and rep.dtype == "float64"        # SciPy's coercion: float32 A, float64 b
    assert np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)


@gpu
def test_vector_checks_on_the_device():
    A = laplace_2d(6)
    n = A.shape[0]
    big = np.full(n, 1e200)                # squares overflow: not a NaN, and ||b|| is right
    import scipy.linalg
    x, info, rep = dpsolve.cg(A, big, rtol=1e-8, maxiter=1, variant="persistent",
                              full_output=True)
    assert rep.tolerance == pytest.approx(1e-8 * scipy.linalg.norm(big), rel=1e-12)
    P = dpsolve.prepare(A, "cg", variant="persistent")
    x, info, rep = P.solve(big, rtol=1e-8, maxiter=1, full_output=True)
    assert rep.tolerance == pytest.approx(1e-8 * scipy.linalg.norm(big), rel=1e-12)
    with pytest.raises(ValueError, match="b contains NaN or Inf"):
        dpsolve.cg(A, np.r_[np.inf, np.ones(n - 1)], variant="persistent")
    with pytest.raises(ValueError, match="x0 contains NaN or Inf"):
        dpsolve.cg(A, np.ones(n), x0=np.r_[np.nan, np.ones(n - 1)], variant="persistent")


@gpu
def test_uploads_small_packed_and_large_chunked():
    import cupy
    res = _setup.resources()
    rng = np.random.default_rng(0)
    small = [rng.standard_normal(1000), np.arange(17, dtype=np.int32), None,
             rng.standard_normal(3).astype(np.complex64)]
    large = rng.standard_normal((_setup.CHUNK // 8) * 2 + 123)     # three chunks, the last short
    out = _setup.upload(small + [large], res.stream, res)
    res.stream.synchronize()
    for h, d in zip(small + [large], out):
        if h is None:
            assert d is None
        else:
            assert isinstance(d, cupy.ndarray) and d.dtype == h.dtype
            np.testing.assert_array_equal(d.get(), h)


@gpu
def test_downloads_small_direct_and_large_chunked():
    """download: a small array, a non-contiguous one (both by get), arrays of one piece, of
    three pieces with a short last one, 2-D and complex, each after work queued on the stream
    (the stream's order, not a finished device), the same bits; the staging buffers shared with
    upload (an upload between two downloads)."""
    import cupy
    res = _setup.resources()
    rng = np.random.default_rng(1)
    piece = _setup.CHUNK // 8
    hosts = [rng.standard_normal(1000), rng.standard_normal(_setup.PACK_MAX // 8 + 5),
             rng.standard_normal(piece * 2 + 123),
             rng.standard_normal((piece // 16 + 1, 40)),
             (rng.standard_normal(piece + 7) + 1j * rng.standard_normal(piece + 7)).astype(
                 np.complex64)]
    for h in hosts:
        with res.stream:
            d = cupy.asarray(h) * 2                       # queued on the stream, then read back
        got = _setup.download(d, res.stream, res)
        assert isinstance(got, np.ndarray) and got.dtype == h.dtype and got.shape == h.shape
        np.testing.assert_array_equal(got, h * 2)
        _setup.upload([h], res.stream, res)               # the buffers' other user in between
    strided = cupy.arange(_setup.PACK_MAX // 2, dtype=np.float64)[::3]
    np.testing.assert_array_equal(_setup.download(strided), strided.get())


@gpu
def test_one_host_wait_per_prepared_device_driven_solve():
    """A prepared persistent solve waits for the host twice: ||b|| and the solve with its true
    residual; the run itself reports one."""
    A = laplace_2d(16)
    P = dpsolve.prepare(A, "cg", variant="persistent")
    x, info, rep = P.solve(np.ones(A.shape[0]), rtol=1e-8, full_output=True)
    assert info == 0 and rep.host_syncs == 1 and rep.host_launches <= 6


@gpu
def test_graph_cache_follows_a_device_matrix_changed_in_place():
    """The one-shot graph variant caches its build by a hash of the matrix, taken on the device:
    changing a cupyx matrix in place must give a new build, never the old system's answer."""
    import cupy
    A = sp.csr_array(laplace_2d(12))
    dA = _csp().csr_matrix(A)
    b = np.ones(A.shape[0])
    x1, info, r1 = dpsolve.cg(dA, b, rtol=1e-10, variant="graph", full_output=True)
    x2, info, r2 = dpsolve.cg(dA, b, rtol=1e-10, variant="graph", full_output=True)
    assert r2.build_time == 0.0, "the same matrix: the cached graph"
    dA.data *= cupy.asarray(2.0)
    x3, info, r3 = dpsolve.cg(dA, b, rtol=1e-10, variant="graph", full_output=True)
    assert info == 0 and r3.build_time > 0, "a changed matrix: a new build"
    np.testing.assert_allclose(x3, x1 / 2, rtol=1e-7)
