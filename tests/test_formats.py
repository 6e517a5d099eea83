"""The host-side sparse formats: CSR construction and checking, ELL layout and refusal, the
reference SpMVs (``CSR.matvec``, ``ELL.matvec``) against SciPy, and the format choice."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsolve.formats import (CSR, DEFAULT_MAX_FILL, ELL, FORMATS, FormatError, choose_format,
                             row_stats, to_csr)

DTYPES = [np.float32, np.float64, np.complex128]
DTYPE_IDS = ["float32", "float64", "complex128"]


def random_sparse(n, density, dtype, seed, empty_rows=0):
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, n), density=density, format="csr", dtype=np.float64, rng=rng)
    if np.dtype(dtype).kind == "c":
        A = A + 1j * sp.random_array((n, n), density=density, format="csr", rng=rng)
    A = sp.lil_array(A.astype(dtype))
    for i in rng.choice(n, size=min(empty_rows, n), replace=False):
        A[int(i), :] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    return A


def rtol_for(dtype):
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12


def rand_x(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(n)
    return x.astype(dtype)


def assert_spmv_close(y, A, x):
    """y == A @ x up to the rounding of a k-term sum on both sides (k: longest row), judged row
    by row against |A| |x| so that float32 is held to float32's standard and no looser."""
    A = sp.csr_array(A)
    ref = A @ x
    assert y.shape == ref.shape
    assert y.dtype == np.result_type(A.dtype, x.dtype)
    k = int(np.diff(A.indptr).max(initial=0))
    scale = abs(A) @ abs(x)
    err = np.abs(y - ref)
    bound = (2 * k + 2) * np.finfo(y.dtype).eps * scale
    assert (err <= bound).all(), f"max error {err.max()} > bound"


# --------------------------------------------------------------------------- CSR construction
def _dup_unsorted_csr():
    """A CSR with duplicate and unsorted column indices in its rows, as SciPy allows."""
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    indices = np.array([2, 0, 2, 1, 1, 0, 2])           # row 0: 2,0,2   row 1: 1,1   row 2: 0,2
    indptr = np.array([0, 3, 5, 7])
    A = sp.csr_array((data, indices, indptr), shape=(3, 3))
    assert not A.has_canonical_format
    return A


def _dense_of_dup_unsorted():
    return np.array([[2.0, 0.0, 4.0], [0.0, 9.0, 0.0], [6.0, 0.0, 7.0]])


INPUTS = {
    **{f"{fmt}_{kind}": (lambda fmt=fmt, kind=kind: getattr(sp, f"{fmt}_{kind}")(
        _dense_of_dup_unsorted()))
       for fmt in ("csr", "csc", "coo", "dia", "lil", "bsr", "dok")
       for kind in ("matrix", "array")},
    "dense-ndarray": _dense_of_dup_unsorted,
    "dense-fortran": lambda: np.asfortranarray(_dense_of_dup_unsorted()),
    "csr-duplicates-unsorted": _dup_unsorted_csr,
    "csc-duplicates-unsorted": lambda: sp.csc_array(
        (np.array([1.0, 5.0, 4.0, 2.0, 3.0, 7.0]), np.array([2, 0, 1, 0, 2, 2]),
         np.array([0, 2, 3, 6])), shape=(3, 3)),
    "coo-duplicates": lambda: sp.coo_array(
        (np.array([1.0, 1.0, 4.0, 9.0, 6.0, 7.0, 1.0]),
         (np.array([0, 0, 0, 1, 2, 2, 0]), np.array([0, 0, 2, 1, 0, 2, 2]))), shape=(3, 3)),
}


def _expected_dense(name):
    if name == "csc-duplicates-unsorted":
        return np.array([[5.0, 0.0, 2.0], [0.0, 4.0, 0.0], [1.0, 0.0, 10.0]])
    if name == "coo-duplicates":
        return np.array([[2.0, 0.0, 5.0], [0.0, 9.0, 0.0], [6.0, 0.0, 7.0]])
    return _dense_of_dup_unsorted()


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_to_csr_canonical(name, dtype):
    A = INPUTS[name]()
    csr = to_csr(A, np.dtype(dtype))
    assert isinstance(csr, CSR)
    csr.validate()
    assert csr.indptr.dtype == np.int32 and csr.indices.dtype == np.int32
    assert csr.data.dtype == dtype
    assert csr.n == 3
    for i in range(3):
        row = csr.indices[csr.indptr[i]:csr.indptr[i + 1]]
        assert (np.diff(row) > 0).all(), f"row {i} not sorted and unique: {row}"
    expected = _expected_dense(name)
    np.testing.assert_array_equal(csr.to_scipy().toarray(), expected.astype(dtype))
    assert csr.nnz == np.count_nonzero(expected)


def test_to_csr_keeps_explicit_zeros_and_does_not_touch_input():
    A = _dup_unsorted_csr()
    saved = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    csr = to_csr(A, np.dtype(np.float64))
    np.testing.assert_array_equal(A.data, saved[0])
    np.testing.assert_array_equal(A.indices, saved[1])
    np.testing.assert_array_equal(A.indptr, saved[2])
    assert not A.has_canonical_format
    assert csr.nnz == 5

    Z = sp.csr_array((np.array([0.0, 1.0]), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    assert to_csr(Z, np.dtype(np.float64)).nnz == 2     # a stored zero is a stored entry


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_to_csr_without_copy_gives_the_same_matrix(name, dtype):
    """copy=False: the same checked matrix as a copy, the input untouched."""
    A = INPUTS[name]()
    saved = sp.csr_array(A, copy=True).toarray()
    got = to_csr(A, np.dtype(dtype), copy=False)
    want = to_csr(A, np.dtype(dtype))
    for a, b in zip((got.indptr, got.indices, got.data), (want.indptr, want.indices, want.data)):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    np.testing.assert_array_equal(sp.csr_array(A).toarray(), saved)


def test_to_csr_without_copy_reads_a_canonical_csr_in_place_read_only():
    """A canonical CSR of the dtype: its own arrays, read-only (a write raises, never reaching
    the caller's matrix); one needing a change (unsorted, another dtype): new arrays."""
    A = sp.csr_array(_dense_of_dup_unsorted())
    csr = to_csr(A, np.dtype(np.float64), copy=False)
    assert np.shares_memory(csr.data, A.data) and np.shares_memory(csr.indices, A.indices)
    for arr in (csr.indptr, csr.indices, csr.data):
        assert not arr.flags.writeable
    with pytest.raises(ValueError):
        csr.data[0] = 42.0
    assert A.data.flags.writeable and A.data[0] != 42.0
    assert not np.shares_memory(to_csr(A, np.dtype(np.float32), copy=False).data, A.data)
    B = _dup_unsorted_csr()
    kept = B.indices.copy()
    csr = to_csr(B, np.dtype(np.float64), copy=False)
    assert not np.shares_memory(csr.indices, B.indices) and csr.indices.flags.writeable
    np.testing.assert_array_equal(B.indices, kept)
    assert not np.shares_memory(to_csr(A, np.dtype(np.float64)).data, A.data)   # copy=True


@pytest.mark.parametrize("copy", [True, False])
def test_to_csr_sorts_a_csr_whose_cached_flag_is_stale(copy):
    """SciPy caches has_canonical_format; indices permuted in place after it was computed are
    still sorted (the flag is not trusted), and the caller's arrays stay as they are."""
    A = sp.csr_array(_dense_of_dup_unsorted())
    assert A.has_canonical_format                    # computed and cached
    row0 = slice(int(A.indptr[0]), int(A.indptr[1]))
    A.indices[row0] = A.indices[row0][::-1].copy()   # row 0 unsorted; the flag says sorted
    A.data[row0] = A.data[row0][::-1].copy()
    kept = A.indices.copy()
    csr = to_csr(A, np.dtype(np.float64), copy=copy)
    csr.validate()
    np.testing.assert_array_equal(csr.to_scipy().toarray(), _dense_of_dup_unsorted())
    np.testing.assert_array_equal(A.indices, kept)


@pytest.mark.parametrize("name", ["index-negative", "index-too-large"])
def test_validate_canonical_still_checks_the_range(name):
    change, message = CORRUPT[name]
    with pytest.raises(FormatError, match=message):
        CSR(**{**_good(), **change}).validate(canonical=True)


def test_to_csr_empty_rows_and_zero_matrix():
    A = sp.csr_array((4, 4))
    csr = to_csr(A, np.dtype(np.float64))
    csr.validate()
    assert csr.nnz == 0 and list(csr.indptr) == [0, 0, 0, 0, 0]
    D = np.zeros((3, 3))
    D[1, 2] = 5.0
    csr = to_csr(D, np.dtype(np.float32))
    assert list(csr.indptr) == [0, 0, 1, 1] and list(csr.indices) == [2]


def test_to_csr_rejects_non_2d():
    with pytest.raises(ValueError, match="2-D"):
        to_csr(np.ones(3), np.dtype(np.float64))


# --------------------------------------------------------------------------- CSR.validate
def _good():
    return dict(indptr=np.array([0, 2, 3, 5], np.int32),
                indices=np.array([0, 2, 1, 0, 2], np.int32), data=np.arange(1.0, 6.0), n=3)


CORRUPT = {
    "indptr-too-short": (dict(indptr=np.array([0, 2, 5], np.int32)), "indptr has shape"),
    "indptr-too-long": (dict(indptr=np.array([0, 2, 3, 5, 5], np.int32)), "indptr has shape"),
    "indptr-not-from-0": (dict(indptr=np.array([1, 2, 3, 5], np.int32)), "from 0 to nnz"),
    "indptr-not-to-nnz": (dict(indptr=np.array([0, 2, 3, 4], np.int32)), "from 0 to nnz"),
    "indptr-decreasing": (dict(indptr=np.array([0, 3, 2, 5], np.int32)), "non-decreasing"),
    "index-negative": (dict(indices=np.array([0, 2, -1, 0, 2], np.int32)), "out of range"),
    "index-too-large": (dict(indices=np.array([0, 2, 1, 0, 3], np.int32)), "out of range"),
    "unsorted-row": (dict(indices=np.array([2, 0, 1, 0, 2], np.int32)), "not sorted and unique"),
    "duplicate-in-row": (dict(indices=np.array([0, 2, 1, 2, 2], np.int32)),
                         "not sorted and unique"),
    "unsorted-last-row": (dict(indices=np.array([0, 2, 1, 2, 0], np.int32)),
                          "not sorted and unique"),
}


def test_validate_accepts_good():
    CSR(**_good()).validate()
    # a row boundary may go "down" in column index: that is not unsorted
    CSR(indptr=np.array([0, 1, 2], np.int32), indices=np.array([1, 0], np.int32),
        data=np.ones(2), n=2).validate()
    # empty rows in between
    CSR(indptr=np.array([0, 1, 1, 1, 2], np.int32), indices=np.array([3, 0], np.int32),
        data=np.ones(2), n=4).validate()


@pytest.mark.parametrize("name", list(CORRUPT))
def test_validate_rejects(name):
    change, message = CORRUPT[name]
    with pytest.raises(FormatError, match=message):
        CSR(**{**_good(), **change}).validate()


# --------------------------------------------------------------------------- SpMV
AWKWARD = [1, 2, 31, 97, 1000]


@pytest.mark.parametrize("n", AWKWARD)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_csr_and_ell_matvec_random(n, dtype):
    A = random_sparse(n, density=min(1.0, 5.0 / n), dtype=dtype, seed=n, empty_rows=n // 10)
    if n == 1:                                                          # 1x1: not empty
        A = sp.csr_array(np.array([[2.5]], dtype=dtype))
    x = rand_x(n, dtype, seed=n)
    csr = to_csr(A, np.dtype(dtype))
    assert_spmv_close(csr.matvec(x), A, x)
    ell = ELL.from_csr(csr, max_fill=np.inf)
    assert_spmv_close(ell.matvec(x), A, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_matvec_one_by_one(dtype):
    A = sp.csr_array(np.array([[3.0]], dtype=dtype))
    x = np.array([-2.0], dtype=dtype)
    csr = to_csr(A, np.dtype(dtype))
    np.testing.assert_array_equal(csr.matvec(x), [-6.0])
    np.testing.assert_array_equal(ELL.from_csr(csr).matvec(x), [-6.0])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_matvec_empty_rows_and_empty_matrix(dtype):
    dense = np.zeros((5, 5), dtype=dtype)
    dense[0, 4] = 2
    dense[3, 1] = -1
    dense[3, 3] = 5
    x = rand_x(5, dtype)
    csr = to_csr(dense, np.dtype(dtype))
    y = csr.matvec(x)
    np.testing.assert_allclose(y, dense @ x, rtol=rtol_for(dtype))
    assert y[1] == y[2] == y[4] == 0
    ell = ELL.from_csr(csr, max_fill=np.inf)
    np.testing.assert_allclose(ell.matvec(x), dense @ x, rtol=rtol_for(dtype))

    zero = to_csr(sp.csr_array((4, 4), dtype=dtype), np.dtype(dtype))
    np.testing.assert_array_equal(zero.matvec(rand_x(4, dtype)), np.zeros(4))
    ell0 = ELL.from_csr(zero)
    assert ell0.width == 0
    np.testing.assert_array_equal(ell0.matvec(rand_x(4, dtype)), np.zeros(4))


def test_matvec_float32_matrix_float64_vector_promotes():
    A = random_sparse(31, 0.2, np.float32, seed=3)
    x = rand_x(31, np.float64)
    csr = to_csr(A, np.dtype(np.float32))
    assert csr.matvec(x).dtype == np.float64
    assert ELL.from_csr(csr, max_fill=np.inf).matvec(x).dtype == np.float64


@st.composite
def sparse_matrices(draw, max_n=40):
    n = draw(st.integers(1, max_n))
    nnz = draw(st.integers(0, min(n * n, 4 * n)))
    rows = draw(st.lists(st.integers(0, n - 1), min_size=nnz, max_size=nnz))
    cols = draw(st.lists(st.integers(0, n - 1), min_size=nnz, max_size=nnz))
    vals = draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
                         min_size=nnz, max_size=nnz))
    # a COO with possible duplicates, as a user might pass
    return sp.coo_array((np.array(vals, dtype=np.float64), (np.array(rows, dtype=np.int64),
                                                           np.array(cols, dtype=np.int64))),
                        shape=(n, n))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=sparse_matrices(), dtype=st.sampled_from([np.float32, np.float64, np.complex128]),
       seed=st.integers(0, 2 ** 16))
def test_spmv_property(A, dtype, seed):
    x = rand_x(A.shape[0], dtype, seed)
    A_t = A.astype(dtype)
    csr = to_csr(A_t, np.dtype(dtype))
    csr.validate()
    ref = sp.csr_array(A_t)
    ref.sum_duplicates()
    assert csr.nnz == ref.nnz
    np.testing.assert_array_equal(csr.indptr, ref.indptr)
    np.testing.assert_array_equal(csr.indices, ref.indices)
    assert_spmv_close(csr.matvec(x), ref, x)
    ell = ELL.from_csr(csr, max_fill=np.inf)
    assert ell.nnz == csr.nnz
    assert_spmv_close(ell.matvec(x), ref, x)


# --------------------------------------------------------------------------- ELL layout and refusal
def test_ell_column_major_layout():
    dense = np.array([[1.0, 0.0, 2.0, 0.0],
                      [0.0, 0.0, 0.0, 0.0],
                      [3.0, 4.0, 5.0, 0.0],
                      [0.0, 0.0, 0.0, 6.0]])
    csr = to_csr(dense, np.dtype(np.float64))
    ell = ELL.from_csr(csr, max_fill=np.inf)
    n, w = 4, 3
    assert (ell.n, ell.width, ell.nnz) == (n, w, 6)
    assert ell.data.shape == ell.indices.shape == (n * w,)
    assert ell.indices.dtype == np.int32
    for i in range(n):
        cols = np.flatnonzero(dense[i])
        for k in range(w):
            if k < len(cols):
                assert ell.indices[k * n + i] == cols[k]
                assert ell.data[k * n + i] == dense[i, cols[k]]
            else:
                assert ell.indices[k * n + i] == -1
                assert ell.data[k * n + i] == 0
    assert ell.fill() == pytest.approx(n * w / 6)


def test_ell_layout_random_matches_csr():
    A = random_sparse(97, 0.05, np.float64, seed=11, empty_rows=5)
    csr = to_csr(A, np.dtype(np.float64))
    ell = ELL.from_csr(csr, max_fill=np.inf)
    n = csr.n
    for i in range(n):
        lo, hi = csr.indptr[i], csr.indptr[i + 1]
        k = np.arange(hi - lo)
        np.testing.assert_array_equal(ell.indices[k * n + i], csr.indices[lo:hi])
        np.testing.assert_array_equal(ell.data[k * n + i], csr.data[lo:hi])
        pad = np.arange(hi - lo, ell.width)
        assert (ell.indices[pad * n + i] == -1).all() and (ell.data[pad * n + i] == 0).all()


def _long_row(n):
    """A diagonal plus one full first row: nnz = 2n - 1, ELL stores n * n."""
    A = sp.lil_array((n, n))
    A.setdiag(1.0)
    A[0, :] = 1.0
    return to_csr(sp.csr_array(A), np.dtype(np.float64))


def test_ell_refuses_padding_over_twice_nnz():
    csr = _long_row(20)
    assert csr.n * 20 > DEFAULT_MAX_FILL * csr.nnz
    with pytest.raises(FormatError, match=r"ELL would store 400 entries for 39 nonzeros"):
        ELL.from_csr(csr)
    ell = ELL.from_csr(csr, max_fill=400 / 39 + 1e-9)      # the override accepts it
    assert ell.width == 20
    x = rand_x(20, np.float64)
    assert_spmv_close(ell.matvec(x), csr.to_scipy(), x)
    with pytest.raises(FormatError):
        ELL.from_csr(csr, max_fill=400 / 39 - 1e-9)


def test_ell_boundary_exactly_twice_is_accepted():
    # 2x2: row 0 full, row 1 empty -> stores 4 for 2 nonzeros: exactly 2x, allowed
    csr = to_csr(np.array([[1.0, 1.0], [0.0, 0.0]]), np.dtype(np.float64))
    ell = ELL.from_csr(csr)
    assert ell.fill() == 2.0
    # 3x3: row 0 full, others empty -> 9 for 3 nonzeros: refused
    with pytest.raises(FormatError):
        ELL.from_csr(to_csr(np.array([[1.0, 1.0, 1.0], [0, 0, 0], [0, 0, 0]]),
                            np.dtype(np.float64)))


# --------------------------------------------------------------------------- choose_format
def _ell_refuses(csr):
    try:
        ELL.from_csr(csr)
    except FormatError:
        return True
    return False


@st.composite
def row_length_matrices(draw, max_n=60):
    """Matrices drawn by their row lengths (regular rows plus outliers), so that the ELL fill
    n * max_len / nnz lands all over the range around the 1.25x and 2x thresholds."""
    n = draw(st.integers(1, max_n))
    base = draw(st.integers(0, min(n, 40)))
    lens = [min(n, max(0, base + d)) for d in
            draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n))]
    for i in draw(st.lists(st.integers(0, n - 1), max_size=3)):       # a few long rows
        lens[i] = draw(st.integers(lens[i], n))
    rows = np.repeat(np.arange(n), lens)
    cols = np.concatenate([(i + np.arange(k)) % n for i, k in enumerate(lens)] + [np.zeros(0, int)])
    return sp.csr_array((np.ones(len(rows)), (rows, cols.astype(np.int64))), shape=(n, n))


@settings(max_examples=200, deadline=None)
@given(A=st.one_of(sparse_matrices(max_n=60), row_length_matrices()))
def test_auto_never_picks_refused_ell(A):
    csr = to_csr(A, np.dtype(np.float64))
    choice = choose_format(csr, "auto")
    assert choice in FORMATS
    if _ell_refuses(csr):
        assert choice != "ell"


@settings(max_examples=100, deadline=None)
@given(A=st.one_of(sparse_matrices(max_n=60), row_length_matrices()))
def test_auto_for_an_adjoint_method_suits_A_and_its_transpose(A):
    """BiCG builds A^H in A's format: with ``adjoint`` the choice is never an ELL that A^H
    would refuse (nor A), and the longest row counted is A^H's where that is longer."""
    csr = to_csr(A, np.dtype(np.float64))
    csr_h = to_csr(sp.csr_array(A).conj().T, np.dtype(np.float64))
    assert csr.max_column() == row_stats(csr_h)["max"]
    assert row_stats(csr, adjoint=True)["max"] == max(row_stats(csr)["max"],
                                                      row_stats(csr_h)["max"])
    choice = choose_format(csr, "auto", adjoint=True)
    assert choice in FORMATS
    if _ell_refuses(csr) or _ell_refuses(csr_h):
        assert choice != "ell"


def test_auto_for_an_adjoint_method_on_a_long_column():
    """Regular rows (ELL for A alone), one long column: A^H's long row takes ELL away."""
    A = _long_row(200).to_scipy().T.tocsr()
    csr = to_csr(A, np.dtype(np.float64))
    assert not _ell_refuses(csr) and choose_format(csr, "auto") == "ell"
    assert choose_format(csr, "auto", adjoint=True) != "ell"


@pytest.mark.parametrize("n", [5, 20, 200])
def test_auto_on_long_row_avoids_ell(n):
    csr = _long_row(n)
    assert _ell_refuses(csr)
    assert choose_format(csr, "auto") != "ell"


def test_auto_choices_follow_row_stats():
    lap = to_csr(sp.diags_array([-np.ones(99), 2 * np.ones(100), -np.ones(99)], offsets=[-1, 0, 1]),
                 np.dtype(np.float64))
    assert row_stats(lap)["max"] == 3 and choose_format(lap, "auto") == "ell"
    dense_rows = to_csr(np.ones((40, 40)), np.dtype(np.float64))      # 40 per row, regular
    assert choose_format(dense_rows, "auto") == "csr-vector"
    irregular = _long_row(200)
    assert choose_format(irregular, "auto") == "csr-scalar"


@pytest.mark.parametrize("name", FORMATS)
def test_explicit_format_passes_through(name):
    assert choose_format(_long_row(30), name) == name        # even "ell" where ELL would refuse


@pytest.mark.parametrize("name", ["ELL", "csr", "coo", "", "csr_vector"])
def test_unknown_format_name(name):
    with pytest.raises(ValueError, match=f"unknown format {name!r}"):
        choose_format(_long_row(5), name)


# -------------------------------------------------------------------------- csr-adaptive's row bins
def test_row_bins_partition_the_rows_by_length():
    from dpsolve.formats import RowBins
    from dpsolve.matrices import power_law
    A = power_law(5000, mean=8.0, heavy=(1500, 3000), seed=1)
    csr = to_csr(A, np.float64)
    bins = RowBins.from_csr(csr)
    lengths = np.diff(A.indptr)
    allrows = np.concatenate([bins.short, bins.medium, bins.long])
    assert np.array_equal(np.sort(allrows), np.arange(5000))            # each row exactly once
    assert all(np.all(np.diff(b) > 0) for b in (bins.short, bins.medium, bins.long))  # row order
    assert lengths[bins.short].max() <= bins.t_thread < lengths[bins.medium].min()
    assert lengths[bins.medium].max() <= bins.t_warp < lengths[bins.long].min()
    assert bins.t_thread == min(max(int(np.percentile(lengths, 90, method="higher")), 4), 32)
    assert bins.long.size >= 2                                 # the heavy rows (duplicates summed)


def test_row_bins_thresholds_and_errors():
    from dpsolve.formats import RowBins
    from dpsolve.formats.adaptive import thresholds
    assert thresholds(np.full(100, 7)) == (7, 1024)
    assert thresholds(np.full(100, 2)) == (4, 1024)          # clamped below
    assert thresholds(np.full(100, 500)) == (32, 1024)       # clamped above
    csr = to_csr(sp.eye_array(3, format="csr"), np.float64)
    with pytest.raises(ValueError, match="t_thread <= t_warp"):
        RowBins.from_csr(csr, t_thread=64, t_warp=8)


def test_row_bins_lanes_per_short_row():
    """One thread per short row where the columns are local; where they scatter, the power of two
    nearest the short rows' mean length (the measured rule, BENCHMARKS.md)."""
    from dpsolve.formats import RowBins
    from dpsolve.formats.adaptive import LOCAL_SPREAD, short_group, short_stats
    from dpsolve.matrices import laplace_3d, power_law
    assert short_group(7.0, LOCAL_SPREAD) == 1
    assert [short_group(m, LOCAL_SPREAD + 1) for m in (1.0, 3.0, 3.1, 6.0, 6.1, 8.3, 40.0)] == \
        [2, 2, 4, 4, 8, 8, 8]
    lap = to_csr(laplace_3d(40), np.float64)           # |j - i| <= 1600
    assert RowBins.from_csr(lap).group == 1
    pl = to_csr(power_law(200_000, seed=1), np.float64)  # random columns: spread ~ n / 3
    mean_short, spread = short_stats(pl, np.diff(pl.indptr), RowBins.from_csr(pl).t_thread)
    assert spread > 50_000 and 4 < mean_short < 12
    assert RowBins.from_csr(pl).group == 8
    # the statistics by hand on a 3 x 3 matrix: entries (0, 2), (1, 1), (2, 0), (2, 1)
    A = to_csr(sp.csr_array((np.ones(4), ([0, 1, 2, 2], [2, 1, 0, 1])), shape=(3, 3)), np.float64)
    assert short_stats(A, np.diff(A.indptr), 1) == (1.0, (2 + 0 + 2 + 1) / 4)
    assert RowBins.from_csr(A, group=4).group == 4
    with pytest.raises(ValueError, match="lanes per short row must be one of"):
        RowBins.from_csr(A, group=3)


def test_auto_picks_csr_adaptive_only_for_a_heavy_tail_and_where_allowed():
    from dpsolve.matrices import power_law
    A = power_law(20000, mean=8.0, heavy=(5000,), seed=2)
    csr = to_csr(A, np.float64)
    assert choose_format(csr) == "csr-adaptive"
    assert choose_format(csr, allowed=("csr-scalar", "csr-vector", "ell")) != "csr-adaptive"
    regular = to_csr(sp.random_array((2000, 2000), density=0.01, rng=0, format="csr")
                     + sp.eye_array(2000), np.float64)
    assert choose_format(regular) != "csr-adaptive"
