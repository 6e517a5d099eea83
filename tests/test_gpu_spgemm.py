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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 53, 29), (500, 300, 700), (2000, 2000, 31)])
def test_random_products_equal_scipys(shape, dtype):
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    A = _random(m, k, min(1.0, 8 / k), dtype, rng)
    B = _random(k, n, min(1.0, 6 / n), dtype, rng)
    _check(A, B, exact=np.dtype(dtype).kind == "f")


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_rows_beyond_the_shared_table(dtype):
    """Rows with thousands of distinct columns (the shared table holds 512) are made with global
    tables; short rows beside them stay in shared memory."""
    rng = np.random.default_rng(3)
    A = _random(300, 400, 0.02, dtype, rng).tolil()
    A[7, :] = rng.random(400)                         # a dense row: every column of C
    A[123, ::3] = rng.random(134)
    A = sp.csr_array(A)
    A.sort_indices()
    B = _random(400, 3000, 0.01, dtype, rng)
    C = _check(A, B, exact=np.dtype(dtype).kind == "f")
    assert int(C.indptr[8] - C.indptr[7]) > 512


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


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_a_product_over_a_known_pattern(dtype):
    """spgemm_pattern (a re-set-up's product): over the product's own pattern, the values of
    spgemm (bit for bit for real dtypes); over a pattern that lacks an entry, None."""
    from dpsolve.precond.amg import device
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
