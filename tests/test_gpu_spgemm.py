"""dpsolve's own sparse products on the GPU (dpsolve/cuda/spgemm.cu through
``dpsolve.precond.amg.device.spgemm``) against SciPy's: sorted rows without duplicates, the same
values (bit for bit for real dtypes: the same summation order), rows that overflow the shared
hash table, empty rows and products, and the same bits on every run (GPU machines only)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _random(m, k, density, dtype, rng):
    M = sp.random_array((m, k), density=density, format="csr", rng=rng, dtype=np.float64)
    if np.dtype(dtype).kind == "c":
        M = M + 1j * sp.random_array((m, k), density=density, format="csr", rng=rng)
    M = sp.csr_array(M.astype(dtype))
    M.sum_duplicates()
    M.sort_indices()
    return M


def _device(M):
    import cupy
    import cupyx.scipy.sparse as csp
    return csp.csr_matrix((cupy.asarray(M.data), cupy.asarray(M.indices.astype(np.int32)),
                           cupy.asarray(M.indptr.astype(np.int32))), shape=M.shape)


def _check(A, B, exact):
    from dpsolve.precond.amg import device
    C = device.spgemm(_device(A), _device(B))
    want = sp.csr_array(A @ B)
    want.sort_indices()
    got_ptr, got_idx, got_val = C.indptr.get(), C.indices.get(), C.data.get()
    assert C.shape == want.shape
    np.testing.assert_array_equal(got_ptr, want.indptr)
    np.testing.assert_array_equal(got_idx, want.indices)
    if exact:
        np.testing.assert_array_equal(got_val, want.data)
    else:
        tol = 1e-5 if np.dtype(A.dtype) in (np.float32, np.complex64) else 1e-13
        np.testing.assert_allclose(got_val, want.data, rtol=tol, atol=tol * abs(want.data).max())
    return C


@pytest.mark.parametrize("rows", ["8 lanes a row", "a warp a row"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 53, 29), (500, 300, 700), (2000, 2000, 31)])
def test_random_products_equal_scipys(shape, dtype, rows, monkeypatch):
    """Rows of ~48 products: spgemm.cu's small rows (8 lanes a row), or with those turned off
    a warp a row; beside them rows of a single product and the 1 x 1 case."""
    if rows == "a warp a row":
        from dpsolve.precond.amg import device
        monkeypatch.setattr(device, "SPGEMM_SMALL_SLOTS", 0)
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    A = _random(m, k, min(1.0, 8 / k), dtype, rng)
    B = _random(k, n, min(1.0, 6 / n), dtype, rng)
    _check(A, B, exact=np.dtype(dtype).kind == "f")


def _wide_rows(dtype, rng):
    """A (300 x 400) with rows that name many B rows, and B (400 x 3000): C's rows 7, 123 and
    200-207 have far more than the shared table's 512 columns."""
    A = _random(300, 400, 0.02, dtype, rng).tolil()
    A[7, :] = rng.random(400)                         # a dense row: every column of C
    A[123, ::3] = rng.random(134)
    for r in range(200, 208):                         # more wide rows than a block has warps
        A[r, r % 2::2] = rng.random(200)
    A = sp.csr_array(A)
    A.sort_indices()
    return A, _random(400, 3000, 0.01, dtype, rng)


@pytest.mark.parametrize("mode", ["dense", "dense, shared, one warp a block", "dense, global",
                                  "dense, global, one block", "hash"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_rows_beyond_the_shared_table(dtype, mode, monkeypatch):
    """Rows with thousands of distinct columns (the shared table holds 512) are made as dense
    rows of C (C narrow enough: in shared memory where a row fits, 4 warps a block or one, or in
    global scratch; with scratch for one block, its 4 warps take the 10 such rows in turn) or
    with global hash tables (a wider C); short rows beside them stay in shared memory."""
    from dpsolve.precond.amg import device
    row_bytes = 3000 * (4 + np.dtype(dtype).itemsize)            # C has 3,000 columns
    if mode == "hash":
        monkeypatch.setattr(device, "SPGEMM_DENSE_MAX_COLS", 100)
    if mode.startswith("dense, global"):
        monkeypatch.setattr(device, "SPGEMM_SHARED_DENSE_BYTES", 0)
    if mode == "dense, global, one block":
        monkeypatch.setattr(device, "SPGEMM_DENSE_SLOTS", 3000)       # one block's warps
    if mode == "dense, shared, one warp a block":
        if row_bytes > 48 << 10:
            pytest.skip("a complex128 row of 3,000 columns is beyond a block's 48 KB")
        monkeypatch.setattr(device, "SPGEMM_SHARED_DENSE_BYTES", row_bytes)
    if mode == "dense":              # the defaults: in shared memory unless a row is too large
        assert (row_bytes <= device.SPGEMM_SHARED_DENSE_BYTES) == (dtype != np.complex128)
    A, B = _wide_rows(dtype, np.random.default_rng(3))
    C = _check(A, B, exact=np.dtype(dtype).kind == "f")
    assert int(C.indptr[8] - C.indptr[7]) > 512


@pytest.mark.parametrize("ncols", [4_000, 20_000])
def test_rows_that_overflow_their_shared_table(ncols):
    """Row 3 (bound 750: a table of 2,048 slots, smaller than a row of C, so tried in shared
    memory first) overflows with ~740 distinct columns and is made as a dense row (C of 4,000
    columns, within SPGEMM_DENSE_MAX_COLS) or with a global hash table (20,000 columns)."""
    from dpsolve.precond.amg import device
    assert (ncols <= device.SPGEMM_DENSE_MAX_COLS) == (ncols == 4_000)
    rng = np.random.default_rng(ncols)
    A = _random(50, 200, 0.02, np.float64, rng).tolil()
    A[3, :] = 0
    A[3, 10:40] = rng.random(30)
    A = sp.csr_array(A)
    A.eliminate_zeros()
    A.sort_indices()
    B = _random(200, ncols, 25 / ncols, np.float64, rng)
    C = _check(A, B, exact=True)
    assert int(C.indptr[4] - C.indptr[3]) > 512


@pytest.mark.parametrize("wide", [False, True])
def test_a_product_with_kept_counts_equals_a_new_one(wide):
    """spgemm_counted with the counts of an earlier product of the same patterns (a re-set-up's
    A P: no symbolic pass) gives the new product's bits, dense rows included (their scratch
    stamps of the earlier product must not leak into the new one)."""
    from dpsolve.precond.amg import device
    rng = np.random.default_rng(8)
    if wide:
        A, B = _wide_rows(np.float64, rng)
    else:
        A, B = _random(500, 300, 0.02, np.float64, rng), _random(300, 700, 0.01, np.float64, rng)
    dA, dB = _device(A), _device(B)
    C1, counts = device.spgemm_counted(dA, dB)
    assert bool(counts.big.size) == wide
    dB2 = dB.copy()
    dB2.data *= -1.5                                     # new numbers, the same pattern
    dA2 = dA.copy()
    dA2.data += 0.25
    got, again = device.spgemm_counted(dA2, dB2, counts)
    assert again is counts
    want = sp.csr_array((A + 0.25 * (A != 0)) @ (-1.5 * B))
    want.sort_indices()
    np.testing.assert_array_equal(got.indptr.get(), want.indptr)
    np.testing.assert_array_equal(got.indices.get(), want.indices)
    fresh = device.spgemm(dA2, dB2)
    np.testing.assert_array_equal(got.data.get(), fresh.data.get())
    np.testing.assert_allclose(got.data.get(), want.data, rtol=1e-13,
                               atol=1e-13 * abs(want.data).max())


@pytest.mark.parametrize("rows", ["8 lanes a row", "a warp a row"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_that_meet_on_one_column_in_one_window(dtype, rows, monkeypatch):
    """Every B row holds columns 0 and 1 beside a few random ones, so most products of a window
    of walk_flat meet on those two columns (up to 32 on one): each sum must still take its
    products in A's column order (SciPy's bits), over a fresh pattern and over a known one."""
    from dpsolve.precond.amg import device
    if rows == "a warp a row":
        monkeypatch.setattr(device, "SPGEMM_SMALL_SLOTS", 0)
    rng = np.random.default_rng(11)
    k, n = 400, 60
    B = _random(k, n, 3 / n, np.float64, rng).tolil()
    B[:, 0] = rng.standard_normal((k, 1))
    B[:, 1] = rng.standard_normal((k, 1)) * 1e-3
    B = sp.csr_array(B).astype(dtype)
    B.sort_indices()
    A = _random(300, k, 12 / k if rows == "8 lanes a row" else 40 / k, dtype, rng)
    A.data = (rng.standard_normal(A.nnz) * 10.0 ** rng.integers(-3, 4, A.nnz)).astype(dtype)
    C = _check(A, B, exact=True)
    for dense_bytes in (device.SPGEMM_SHARED_DENSE_BYTES, 0):    # dense rows, then searched
        monkeypatch.setattr(device, "SPGEMM_SHARED_DENSE_BYTES", dense_bytes)
        got = device.spgemm_pattern(_device(A), _device(B), C)
        assert got is not None and bool((got.data == C.data).all())


def test_empty_rows_columns_and_products():
    rng = np.random.default_rng(4)
    A = _random(50, 40, 0.1, np.float64, rng).tolil()
    A[10:20, :] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    B = _random(40, 30, 0.1, np.float64, rng)
    _check(A, B, exact=True)
    _check(sp.csr_array((50, 40)), B, exact=True)                 # A without entries
    _check(A, sp.csr_array((40, 30)), exact=True)                 # B without entries
    _check(sp.csr_array((0, 40)), B, exact=True)                  # no rows


def test_the_same_bits_every_run_and_refused_shapes():
    from dpsolve.precond.amg import device
    rng = np.random.default_rng(5)
    A = _device(_random(3000, 3000, 0.003, np.float64, rng))
    B = _device(_random(3000, 500, 0.02, np.float64, rng))
    first = device.spgemm(A, B)
    for _ in range(3):
        again = device.spgemm(A, B)
        assert bool((again.data == first.data).all()) and bool(
            (again.indices == first.indices).all())
    with pytest.raises(ValueError, match="do not multiply"):
        device.spgemm(B, B)
    with pytest.raises(TypeError, match="dtypes"):
        device.spgemm(A, B.astype(np.float32))


@pytest.mark.parametrize("rows", ["dense in shared memory", "searched, 8 lanes a row",
                                  "searched, a warp a row"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_a_product_over_a_known_pattern(dtype, rows, monkeypatch):
    """spgemm_pattern (a re-set-up's product): over the product's own pattern, the values of
    spgemm (bit for bit for real dtypes); over a pattern that lacks an entry, None. C's 200
    columns fit a dense row in shared memory; with that turned off, each product's place is
    searched in C's row, 8 lanes a row (~36 products a row) or a warp a row."""
    from dpsolve.precond.amg import device
    if rows.startswith("searched"):
        monkeypatch.setattr(device, "SPGEMM_SHARED_DENSE_BYTES", 0)
    if rows == "searched, a warp a row":
        monkeypatch.setattr(device, "SPGEMM_SMALL_SLOTS", 0)
    rng = np.random.default_rng(6)
    A = _device(_random(400, 300, 0.02, dtype, rng))
    B = _device(_random(300, 200, 0.03, dtype, rng))
    C = device.spgemm(A, B)
    B2 = B.copy()
    B2.data *= 3                                         # new numbers, the same pattern
    want = device.spgemm(A, B2)
    got = device.spgemm_pattern(A, B2, C)
    assert got is not None and bool((got.indices == want.indices).all())
    if np.dtype(dtype).kind == "f":
        assert bool((got.data == want.data).all())
    else:
        assert float(abs(got.data - want.data).max()) <= 1e-12 * float(abs(want.data).max())
    Ch = sp.csr_array((C.data.get(), C.indices.get(), C.indptr.get()), shape=C.shape).tolil()
    row = int(np.flatnonzero(np.diff(C.indptr.get()))[0])
    Ch[row, Ch.rows[row][0]] = 0                          # drop one entry of the pattern
    Ch = sp.csr_array(Ch)
    Ch.eliminate_zeros()
    assert device.spgemm_pattern(A, B2, _device(Ch)) is None
