"""The GPU set-up (dpsolve/_setup.py, check.cu): one-pass matrix checks, staged uploads, norms.

The first tests run everywhere (the Python mirror of check.cu's bits; the pinned result blocks'
recycling over host memory standing in for pinned memory); the rest need a GPU."""

import types

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


class _HostBlock:
    """Host memory standing in for a pinned block (``PinnedResults._pin``), counted."""
    made = 0

    def __init__(self, nbytes):
        self.buf = np.empty(nbytes, np.uint8)
        self.ptr = self.buf.ctypes.data
        _HostBlock.made += 1


@pytest.fixture
def results(monkeypatch):
    """A PinnedResults of a 3 MiB limit over host memory (no GPU needed)."""
    monkeypatch.setattr(_setup.PinnedResults, "_pin", lambda self, nbytes: _HostBlock(nbytes))
    _HostBlock.made = 0
    return _setup.PinnedResults(limit=3 << 20)


def test_pinned_results_pin_a_size_from_its_second_ask_and_recycle(results):
    import gc
    mb = 1 << 17                                          # float64 values in 1 MiB
    assert results.array((mb,), np.float64) is None       # a size's first ask: the staged path
    a = results.array((mb,), np.float64)
    b = results.array((mb // 4, 4), np.float64)
    assert results.owns(a) and results.owns(b) and _HostBlock.made == 2
    assert a.flags.writeable and a.flags.c_contiguous and b.shape == (mb // 4, 4)
    a[:] = 1.0
    b[:] = 7.0
    view = b[3:9, 1]                                      # the caller keeps a view of b only
    del b
    gc.collect()
    assert results.array((mb,), np.float64) is None       # two of the size out: staged
    del a
    gc.collect()
    c = results.array((mb,), np.float64)                  # a's block back; b's still in use
    c[:] = 2.0
    assert _HostBlock.made == 2 and results.held == 2 << 20
    np.testing.assert_array_equal(view, 7.0)
    assert results.owns(view)
    assert results.array((2 * mb,), np.float64) is None   # a new size's first ask
    assert results.array((2 * mb,), np.float64) is None   # no room: 2 MiB held, none free
    del view
    gc.collect()
    e = results.array((mb // 2,), np.complex128)          # b's block back, for any dtype
    assert _HostBlock.made == 2 and results.owns(e)
    np.testing.assert_array_equal(c, 2.0)                 # c's block untouched throughout
    del c, e
    gc.collect()
    assert results.held == 2 << 20 and sum(map(len, results.free.values())) == 2
    f = results.array((2 * mb,), np.float64)              # free blocks of 1 MiB released for it
    assert results.owns(f) and results.held == 2 << 20 and not results.free
    assert _HostBlock.made == 3
    assert results.array((4 * mb,), np.float64) is None   # over the limit: always staged
    assert results.array((4 * mb,), np.float64) is None


def test_pinned_results_threads_never_share_a_block(results):
    """Threads taking, filling and dropping blocks at once: each sees only its own values."""
    import threading
    mb = 1 << 16
    results.array((mb,), np.float64)
    errors = []

    def work(k):
        for i in range(200):
            a = results.array((mb,), np.float64)
            if a is None:
                continue
            a[:] = k * 1000 + i
            if not (a == k * 1000 + i).all():
                errors.append((k, i))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results.held <= results.limit


class _HostBuffer(np.ndarray):
    """Host memory standing in for a pinned staging buffer (a ``ptr`` and the buffer protocol)."""


class _HostDevice:
    """A host array standing in for a CuPy one (``data.ptr``, ``get``, ``nbytes``, ...)."""

    def __init__(self, a):
        self.a, self.shape, self.dtype, self.size = a, a.shape, a.dtype, a.size
        self.nbytes, self.flags = a.nbytes, a.flags
        self.data = types.SimpleNamespace(ptr=a.ctypes.data)

    def get(self, stream=None):
        return self.a.copy()


@pytest.fixture
def host_cupy(monkeypatch):
    """A stand-in ``cupy`` whose copies are host memmoves, and Resources with host staging
    buffers: ``download`` and ``queue_download``'s logic without a GPU. Returns (stream, res)."""
    import ctypes
    import sys
    event = types.SimpleNamespace(record=lambda stream: None, synchronize=lambda: None)
    stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
    runtime = types.SimpleNamespace(memcpyAsync=lambda dst, src, n, kind, s: ctypes.memmove(
        dst, src, n), memcpyDeviceToHost=2, memcpyHostToDevice=1)
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=runtime, get_current_stream=lambda: stream)
    monkeypatch.setitem(sys.modules, "cupy", fake)

    def staging(nbytes):
        if res._stage_size < nbytes:
            res._stage = []
            for _ in range(2):
                b = np.zeros(max(nbytes, 1 << 20), np.uint8).view(_HostBuffer)
                b.ptr = b.ctypes.data
                res._stage.append(b)
            res._stage_size = max(nbytes, 1 << 20)
        return res._stage
    res = types.SimpleNamespace(staging=staging, _stage=None, _stage_size=0,
                                stage_done=[event, event])
    return stream, res


def test_download_and_queue_download_ask_for_a_pinned_block_once(host_cupy, results,
                                                                monkeypatch):
    """download: staged for a size's first result, a pinned block from its second; the same
    values either way. queue_download: one ask a result (where it has no block, the staged copy
    after the wait, not download, which would ask again); a small result a copy of its own."""
    stream, res = host_cupy
    results = _setup.PinnedResults(limit=64 << 20)       # host blocks (the fixture's _pin)
    monkeypatch.setattr(_setup, "pinned_results", results)
    asks = []
    array = results.array
    monkeypatch.setattr(results, "array", lambda *a: asks.append(a) or array(*a))
    rng = np.random.default_rng(3)
    h = rng.standard_normal(_setup.PACK_MAX // 8 + 3 * 1000)  # over PACK_MAX
    v = _HostDevice(h)
    first = _setup.download(v, stream, res)
    second = _setup.download(v, stream, res)
    assert not results.owns(first) and results.owns(second) and len(asks) == 2
    np.testing.assert_array_equal(first, h)
    np.testing.assert_array_equal(second, h)
    g = _HostDevice(rng.standard_normal(h.size + 8))     # a new size: no block
    finish = _setup.queue_download(g, stream, res)
    got = finish()
    assert len(asks) == 3 and not results.owns(got)
    np.testing.assert_array_equal(got, g.a)
    got = _setup.queue_download(g, stream, res)()        # its second: a block
    assert len(asks) == 4 and results.owns(got)
    np.testing.assert_array_equal(got, g.a)
    small = _HostDevice(rng.standard_normal(1000))
    got = _setup.queue_download(small, stream, res)()
    np.testing.assert_array_equal(got, small.a)
    assert len(asks) == 4 and got.flags.owndata
    res._stage[1][:] = 0                                  # the staging buffer's next user
    np.testing.assert_array_equal(got, small.a)


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
def test_downloads_small_direct_and_large_chunked(monkeypatch):
    """download: a small array, a non-contiguous one (both by get), arrays of one piece, of
    three pieces with a short last one, 2-D and complex, each after work queued on the stream
    (the stream's order, not a finished device), the same bits; the staging buffers shared with
    upload (an upload between two downloads). No pinned result blocks: the staged path alone."""
    import cupy
    monkeypatch.setattr(_setup, "pinned_results", _setup.PinnedResults(limit=0))
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
def test_large_results_by_one_dma_into_recycled_pinned_blocks(monkeypatch):
    """download and a prepared solve's NumPy x: a size's first result staged, later ones in
    pinned blocks, each the same bits; a block the caller still holds (through a view) is never
    written by a later result; a dropped one is reused."""
    import gc

    import cupy
    pinned = _setup.PinnedResults()
    monkeypatch.setattr(_setup, "pinned_results", pinned)
    rng = np.random.default_rng(2)
    h = rng.standard_normal((_setup.PACK_MAX // 8 + 1000, 2))
    d = cupy.asarray(h)
    got = [_setup.download(d * k) for k in range(1, 4)]
    assert [pinned.owns(g) for g in got] == [False, True, True]
    for k, g in enumerate(got, 1):
        np.testing.assert_array_equal(g, h * k)
    kept = got[1][10:20]
    del got[1:], g
    gc.collect()
    again = [_setup.download(d * k) for k in (4, 5)]      # one block free: reused; then staged
    assert [pinned.owns(g) for g in again] == [True, False]
    np.testing.assert_array_equal(kept, h[10:20] * 2)
    for k, g in zip((4, 5), again):
        np.testing.assert_array_equal(g, h * k)
    assert pinned.held == 2 * h.nbytes

    A = laplace_2d(760)                                   # x of 4.4 MB: over PACK_MAX
    b = A @ np.ones(A.shape[0])
    P = dpsolve.prepare(A, "cg", variant="graph")
    xs = [P.solve(b, maxiter=30)[0] for _ in range(4)]
    assert [pinned.owns(x) for x in xs] == [False, True, True, False]
    for x in xs[1:]:
        np.testing.assert_array_equal(x, xs[0])
    ref = xs[1].copy()
    del xs[2:], x
    gc.collect()
    x5 = P.solve(b + 1, maxiter=30)[0]
    np.testing.assert_array_equal(xs[1], ref)             # held: untouched by x5's block
    assert pinned.owns(x5) and not np.array_equal(x5, ref)


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
