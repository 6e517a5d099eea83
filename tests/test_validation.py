"""Every input dpsolve refuses: the exception type, a message that names the problem, and inputs
left exactly as they were."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

import dpsolve
from dpsolve.formats import ELL, FormatError, to_csr
from dpsolve.matrices import laplace_1d, read_matrix

METHODS = dpsolve.methods.names()     # the method table: every method
N = 6


def spd(n=N):
    return laplace_1d(n)


def call(A, b, method="cg", **kw):
    kw.setdefault("variant", "host")
    return getattr(dpsolve, method)(A, b, **kw)


# --------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("A", [np.ones((3, 4)), sp.csr_array(np.ones((4, 3))),
                               LinearOperator((3, 4), matvec=lambda v: np.zeros(3),
                                              dtype=float)],
                         ids=["dense", "csr", "LinearOperator"])
def test_non_square_A(method, A):
    with pytest.raises(ValueError, match="expected square matrix"):
        call(A, np.ones(A.shape[0]), method)


@pytest.mark.parametrize("A", [np.ones(4), np.ones((2, 2, 2)), sp.coo_array(np.ones(4))],
                         ids=["1d-ndarray", "3d-ndarray", "1d-coo_array"])
def test_A_not_2d(A):
    with pytest.raises(ValueError, match="2-D"):
        call(A, np.ones(A.shape[0]))


def test_A_not_a_matrix():
    with pytest.raises(TypeError, match="A must be"):
        call(object(), np.ones(2))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("A, name", [(None, "NoneType"), (3.0, "float"), ("abc", "str"),
                                     ([1.0, 2.0], "list")])
def test_A_of_the_wrong_type_is_named(method, A, name):
    # the type the caller passed, not that of NumPy's conversion of it (an ndarray of shape ())
    with pytest.raises(TypeError, match=rf"A must be .*, got {name}\b") as e:
        call(A, np.ones(2), method)
    assert "ndarray" not in str(e.value)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", [(N + 1,), (N + 1, 2), (1, N), (N, 1, 1), ()],
                         ids=["too-long", "block-too-long", "row", "3d", "scalar"])
def test_b_shape_mismatch(method, shape):
    # (N, 2) is a block of two right-hand sides (tests/test_block.py)
    with pytest.raises(ValueError, match=r"shapes of A .* and b .* are incompatible"):
        call(spd(), np.ones(shape), method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", [(N - 1,), (N, 2), (1, N)],
                         ids=["too-short", "two-columns", "row"])
def test_x0_shape_mismatch(method, shape):
    with pytest.raises(ValueError, match=r"shapes of A .* and x0 .* are incompatible"):
        call(spd(), np.ones(N), method, x0=np.ones(shape))


def test_x0_string_refused():
    """SciPy's x0="Mb" is accepted (tests/test_contract.py); any other string is refused."""
    with pytest.raises(ValueError, match="x0='M b'"):
        call(spd(), np.ones(N), x0="M b")


def test_empty_matrix():
    with pytest.raises(ValueError, match="empty"):
        call(np.zeros((0, 0)), np.zeros(0))
    with pytest.raises(ValueError, match="empty"):
        call(sp.csr_array((0, 0)), np.zeros(0))


# --------------------------------------------------------------------------- non-finite values
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("form", ["csr", "dense"])
def test_nonfinite_in_A(bad, form):
    A = spd().toarray()
    A[2, 3] = bad
    A_in = sp.csr_array(A) if form == "csr" else A
    with pytest.raises(ValueError, match="A contains NaN or Inf"):
        call(A_in, np.ones(N))


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_nonfinite_in_b(bad):
    b = np.ones(N)
    b[1] = bad
    with pytest.raises(ValueError, match="b contains NaN or Inf"):
        call(spd(), b)


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_nonfinite_in_x0(bad):
    x0 = np.zeros(N)
    x0[4] = bad
    with pytest.raises(ValueError, match="x0 contains NaN or Inf"):
        call(spd(), np.ones(N), x0=x0)


# --------------------------------------------------------------------------- dtypes
BAD_DTYPES = {
    "object": np.dtype(object),
    "str": np.dtype("<U3"),
    "longdouble": np.dtype(np.longdouble),
    "clongdouble": np.dtype(np.clongdouble),
    "datetime64": np.dtype("datetime64[s]"),
    "timedelta64": np.dtype("timedelta64[s]"),
}


def _array_of(dtype, shape):
    if dtype.kind in "OU":
        return np.ones(shape).astype(dtype)
    if dtype.kind in "mM":
        return np.ones(shape, dtype=np.int64).astype(dtype)
    return np.ones(shape, dtype=dtype)


def _skip_if_longdouble_is_double(dtype):
    if dtype.char in "gG" and np.finfo(np.longdouble).eps == np.finfo(np.float64).eps \
            and dtype.itemsize == np.dtype(np.float64).itemsize * (2 if dtype.char == "G" else 1):
        pytest.skip("long double is double on this platform")


@pytest.mark.parametrize("name", BAD_DTYPES)
def test_unsupported_dtype_of_A(name):
    dtype = BAD_DTYPES[name]
    _skip_if_longdouble_is_double(dtype)
    A = _array_of(dtype, (N, N))
    with pytest.raises(TypeError, match=r"dtype|A must be"):
        call(A, np.ones(N))


@pytest.mark.parametrize("name", BAD_DTYPES)
def test_unsupported_dtype_of_b(name):
    dtype = BAD_DTYPES[name]
    _skip_if_longdouble_is_double(dtype)
    with pytest.raises(TypeError, match="dtype"):
        call(spd(), _array_of(dtype, (N,)))


@pytest.mark.parametrize("name", BAD_DTYPES)
def test_unsupported_dtype_of_x0(name):
    dtype = BAD_DTYPES[name]
    _skip_if_longdouble_is_double(dtype)
    with pytest.raises(TypeError, match="dtype"):
        call(spd(), np.ones(N), x0=_array_of(dtype, (N,)))


def test_unsupported_dtype_message_names_operand():
    dt = np.dtype("datetime64[s]")
    with pytest.raises(TypeError, match="unsupported dtype datetime64.* for A"):
        call(_array_of(dt, (N, N)), np.ones(N))
    with pytest.raises(TypeError, match="unsupported dtype datetime64.* for b"):
        call(spd(), _array_of(dt, (N,)))
    with pytest.raises(TypeError, match="unsupported dtype datetime64.* for x0"):
        call(spd(), np.ones(N), x0=_array_of(dt, (N,)))


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize("kw, what", [
    (dict(variant="gpu"), "variant"), (dict(variant="HOST"), "variant"),
    (dict(variant=None), "variant"),
    (dict(sync="spin"), "sync"), (dict(sync=1), "sync"),
    (dict(format="coo"), "format"), (dict(format="ELL"), "format"),
], ids=["variant-gpu", "variant-HOST", "variant-None", "sync-spin", "sync-int", "format-coo",
        "format-ELL"])
def test_unknown_choice(kw, what):
    value = next(iter(kw.values()))
    with pytest.raises(ValueError, match=re.escape(f"unknown {what} {value!r}")):
        getattr(dpsolve, "cg")(spd(), np.ones(N), **kw)


@pytest.mark.parametrize("maxiter", [0, -1, -100])
def test_nonpositive_maxiter(maxiter):
    with pytest.raises(ValueError, match="maxiter must be a positive integer"):
        call(spd(), np.ones(N), maxiter=maxiter)


@pytest.mark.parametrize("maxiter", [1.5, 10.0, "10", True], ids=["1.5", "10.0", "str", "bool"])
def test_non_integer_maxiter(maxiter):
    with pytest.raises(TypeError, match="maxiter must be an integer"):
        call(spd(), np.ones(N), maxiter=maxiter)


def test_numpy_integer_maxiter_accepted():
    x, info = call(spd(), np.ones(N), maxiter=np.int64(2), rtol=1e-14)
    assert info == 2


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("atol", [-1.0, None, "legacy", np.nan],
                         ids=["negative", "None", "legacy", "nan"])
def test_invalid_atol(method, atol):
    with pytest.raises(ValueError, match="invalid `atol`"):
        call(spd(), np.ones(N), method, atol=atol)


@pytest.mark.parametrize("rtol", [-1e-5, np.nan, "1e-5"], ids=["negative", "nan", "str"])
def test_invalid_rtol(rtol):
    with pytest.raises(ValueError, match="invalid `rtol`"):
        call(spd(), np.ones(N), rtol=rtol)


@pytest.mark.parametrize("callback", [1, "print", [print]], ids=["int", "str", "list"])
def test_callback_not_callable(callback):
    with pytest.raises(TypeError, match="callback must be callable"):
        call(spd(), np.ones(N), callback=callback)


# --------------------------------------------------------------------------- preconditioners
@pytest.mark.parametrize("M", [
    np.ones(N + 1),
    np.ones((N + 1, N + 1)),
    sp.eye_array(N + 1, format="csr"),
    sp.diags_array(np.ones(N - 1)),
    LinearOperator((N, N + 1), matvec=lambda v: v[:N], dtype=float),
], ids=["1d-too-long", "dense-too-big", "sparse-identity-too-big", "dia-too-small",
        "LinearOperator-nonsquare"])
def test_M_wrong_shape(M):
    with pytest.raises(ValueError, match=r"shape"):
        call(spd(), np.ones(N), M=M)


def test_M_inverse_diagonal_nonfinite():
    inv = np.ones(N)
    inv[0] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        call(spd(), np.ones(N), M=inv)


@pytest.mark.parametrize("what", ["b", "x0", "B", "A", "dense A", "update"])
def test_a_value_past_the_working_dtype_is_named(what):
    """A finite float64 value past the largest float32 given to a float32 prepared system (b,
    x0, a block B; A at prepare or update, sparse or dense): a ValueError saying so, with no
    NumPy warning. Before, NumPy's "overflow encountered in cast" escaped and the error said
    "contains NaN or Inf"."""
    A = sp.csr_array(spd())
    big = np.ones(N)
    big[1] = 1e39
    Abig = A.copy()
    Abig.data[0] = 1e39
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P = dpsolve.prepare(A.astype(np.float32), "cg", dtype="float32", variant="host")
        calls = {"b": lambda: P.solve(big), "x0": lambda: P.solve(np.ones(N), x0=big),
                 "B": lambda: P.solve(np.column_stack([np.ones(N), big])),
                 "A": lambda: dpsolve.prepare(Abig, "cg", dtype="float32", variant="host"),
                 "dense A": lambda: dpsolve.prepare(Abig.toarray(), "cg", dtype="float32",
                                                    variant="host"),
                 "update": lambda: P.update(Abig)}
        with pytest.raises(ValueError, match=r"past the largest float32, the working dtype"):
            calls[what]()
        x, info = P.solve(np.ones(N))                     # the system serves the next call
    assert info == 0


@pytest.mark.parametrize("form", ["1-D", "sparse"])
def test_M_inverse_diagonal_past_the_working_dtype(form):
    """A finite float64 inverse diagonal with an entry past the largest float32, for a float32
    solve: a ValueError naming the row, with no NumPy warning. Before, the 1-D form said
    "NaN or Inf" after NumPy's overflow warning escaped, and the sparse form ran with Inf in
    D^-1 (info -10)."""
    inv = np.full(N, 0.5)
    inv[2] = 1e39
    M = inv if form == "1-D" else sp.diags_array(inv).tocsr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        what = "M (inverse diagonal)" if form == "1-D" else "M (diagonal)"
        with pytest.raises(ValueError, match="^" + re.escape(
                f"{what} has 1 entry past the largest float32, the working dtype (row 2): "
                f"solve in a wider dtype") + "$"):     # b's, x0's and A's words, rows named
            call(spd().astype(np.float32), np.ones(N, np.float32), M=M)


@pytest.mark.parametrize("stored", [True, False], ids=["explicit-zero", "missing-entry"])
def test_jacobi_zero_diagonal_names_row(stored):
    A = spd().toarray()
    A[3, 3] = 0.0
    A_in = sp.csr_array(A)
    if stored:                                  # keep the zero as a stored entry
        A_in = sp.csr_array((np.r_[A_in.data, 0.0],
                             (np.r_[A_in.tocoo().row, 3], np.r_[A_in.tocoo().col, 3])),
                            shape=A.shape)
        assert A_in.nnz == sp.csr_array(A).nnz + 1
    with pytest.raises(ValueError, match=r"zero diagonal entry \(row 3\)"):
        call(A_in, np.ones(N), M="jacobi")


def test_jacobi_several_zero_diagonals_listed():
    A = spd().toarray()
    A[1, 1] = A[4, 4] = 0.0
    with pytest.raises(ValueError, match=r"2 zero diagonal entries \(rows 1, 4\)"):
        call(A, np.ones(N), M="jacobi")


@pytest.mark.parametrize("M", ["jacobi", "chebyshev", "amg"])
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("dtype, tiny", [(np.float32, 1e-39), (np.float64, 1e-310),
                                         (np.complex64, 1e-39 + 1e-39j)])
def test_a_diagonal_whose_reciprocal_overflows_names_row(method, M, dtype, tiny):
    """A diagonal entry whose reciprocal is past the largest float of the working dtype (A's
    other values near 1, so no scaling of A brings it into range) gets a ValueError naming the
    row from every preconditioner that divides by the diagonal. Before, D^-1 held Inf: the
    solve broke down (info -10) and NumPy's overflow warning escaped."""
    A = spd(40).toarray().astype(dtype)
    A[3, 3] = tiny
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"reciprocal is past the largest .*row 3\b"):
            call(sp.csr_array(A), np.ones(40, dtype), method, M=M)
        x, info = call(sp.csr_array(A), np.ones(40, dtype), method, maxiter=3)   # no M: it runs
    assert np.isfinite(x).all()


WHO = {"jacobi": "Jacobi preconditioner", "chebyshev": "M='chebyshev'", "amg": "AMG"}


@pytest.mark.parametrize("M", ["jacobi", "chebyshev", "amg"])
@pytest.mark.parametrize("problem, value", [("zero", 0.0), ("negative", -4.0),
                                            ("reciprocal", 1e-39)])
def test_every_preconditioner_refuses_a_diagonal_in_one_set_of_words(M, problem, value):
    """Jacobi, Chebyshev and AMG word a diagonal they cannot take by dpsolve.precond.diagonal's
    refusal, naming themselves and the rows (the GPU set-up the same: test_gpu_precond.py).
    Before, M="chebyshev" said "needs a nonzero, finite diagonal" with no rows, and AMG's host and
    GPU set-ups used two other sets of words. A negative diagonal is AMG's refusal only: Jacobi
    and Chebyshev take it (-A solves)."""
    from dpsolve.precond.diagonal import refusal
    A = spd(40).toarray().astype(np.float32)
    A[[3, 17], [3, 17]] = value
    b = np.ones(40, np.float32)
    if problem == "negative" and M != "amg":
        x, info = call(sp.csr_array(-spd(40).astype(np.float32)), b, "bicgstab", M=M, rtol=1e-5)
        assert info == 0
        return
    want = refusal(problem, np.array([3, 17]), WHO[M], dtype=np.float32)
    assert "rows 3, 17" in want and WHO[M] in want
    with pytest.raises(ValueError, match="^" + re.escape(want) + "$"):
        call(sp.csr_array(A), b, "bicgstab", M=M)


def test_refusal_names_rows_and_how_many_more():
    from dpsolve.precond.diagonal import refusal, rows_text
    assert rows_text(np.array([4])) == "row 4"
    assert rows_text(np.arange(12), "global row", 100) == \
        "global rows 100, 101, 102, 103, 104, 105, 106, 107, 108, 109 and 2 more"
    assert refusal("negative", [1], "AMG", "the level-2 coarse matrix (R A P)", np.complex64) \
        == ("AMG needs a positive diagonal, but the level-2 coarse matrix (R A P) has 1 diagonal "
            "entry with a non-positive real part (row 1)")
    with pytest.raises(ValueError, match="problem must be one of"):
        refusal("odd", [1], "AMG")


def test_jacobi_zero_diagonal_bayer10(matrix_dir):
    A = read_matrix(matrix_dir / "bayer10.mtx.gz")
    b = np.ones(A.shape[0])
    with pytest.raises(ValueError,
                       match=r"13433 zero diagonal entries \(rows 0, 1, 2, .* and 13423 more\)"):
        dpsolve.bicgstab(A, b, M="jacobi", variant="host")


def test_jacobi_needs_a_matrix():
    op = LinearOperator((N, N), matvec=lambda v: spd() @ v, dtype=float)
    with pytest.raises(ValueError, match="jacobi.*LinearOperator"):
        call(op, np.ones(N), M="jacobi")


@pytest.mark.parametrize("M", ["Jacobi", "ilu", ""], ids=["Jacobi", "ilu", "empty"])
def test_unknown_M_string(M):
    with pytest.raises(ValueError, match=rf"unknown preconditioner M={M!r}"):
        call(spd(), np.ones(N), M=M)


# --------------------------------------------------------------------------- formats
def _one_long_row(n=50):
    """A diagonal plus one full row: ELL would pad every row to n entries."""
    A = sp.lil_array((n, n))
    A.setdiag(4.0)
    A[0, :] = 1.0
    A[0, 0] = 4.0
    return sp.csr_array(A)


def test_ell_refuses_one_long_row():
    A = _one_long_row()
    csr = to_csr(A, np.float64)
    with pytest.raises(FormatError, match=r"ELL would store 2500 entries for 99 nonzeros"):
        ELL.from_csr(csr)
    assert issubclass(FormatError, ValueError) and issubclass(FormatError, dpsolve.DpsolveError)


def test_host_variant_ignores_format():
    A = _one_long_row()
    x, info, rep = call(A, np.ones(A.shape[0]), "bicgstab", format="ell", full_output=True)
    assert info == 0
    assert rep.format is None


# --------------------------------------------------------------------------- inputs untouched
def _failing_calls():
    """(description, kwargs for dpsolve.cg) for calls that fail after the inputs were read."""
    return [
        ("nan-in-x0", dict(x0_bad=np.nan)),
        ("jacobi-zero-diagonal", dict(zero_diag=True, M="jacobi")),
        ("bad-atol", dict(atol=-1.0)),
        ("bad-rtol", dict(rtol=-1.0)),
        ("M-wrong-shape", dict(M=np.ones(N + 2))),
        ("nan-in-A", dict(A_bad=np.nan)),
        ("unknown-M", dict(M="ilu")),
    ]


_SPARSE_ARRAYS = ("data", "indices", "indptr", "row", "col", "offsets")


def _snapshot(A):
    if isinstance(A, np.ndarray):
        return {"dense": A.copy()}
    snap = {k: np.array(getattr(A, k), copy=True) for k in _SPARSE_ARRAYS if hasattr(A, k)}
    snap["nnz"] = A.nnz
    return snap


def _assert_same(A, snap):
    if isinstance(A, np.ndarray):
        np.testing.assert_array_equal(A, snap["dense"])
        return
    for k, v in snap.items():
        if k == "nnz":
            assert A.nnz == v
        else:
            np.testing.assert_array_equal(getattr(A, k), v, err_msg=f"A.{k} was modified")


@pytest.mark.parametrize("A_kind", ["csr", "coo-with-duplicates", "dense"])
@pytest.mark.parametrize("case", [c[1] for c in _failing_calls()],
                         ids=[c[0] for c in _failing_calls()])
def test_failing_call_leaves_inputs_untouched(A_kind, case):
    case = dict(case)
    dense = spd().toarray()
    if case.pop("zero_diag", False):
        dense[2, 2] = 0.0
    A_bad = case.pop("A_bad", None)
    if A_bad is not None:
        dense[0, 1] = A_bad
    if A_kind == "csr":
        A = sp.csr_array(dense)
    elif A_kind == "coo-with-duplicates":
        A = sp.coo_array(dense)
        # duplicates make a sum_duplicates() on the caller's object visible
        A = sp.coo_array((np.r_[A.data, 1.0, -1.0], (np.r_[A.row, 0, 0], np.r_[A.col, 0, 0])),
                         shape=A.shape)
    else:
        A = dense
    b = np.arange(1.0, N + 1)
    x0 = np.linspace(0, 1, N)
    x0_bad = case.pop("x0_bad", None)
    if x0_bad is not None:
        x0[3] = x0_bad
    saved_A, saved_b, saved_x0 = _snapshot(A), b.copy(), x0.copy()
    with pytest.raises((ValueError, TypeError)):
        dpsolve.cg(A, b, x0=x0, variant="host", **case)
    np.testing.assert_array_equal(b, saved_b)
    np.testing.assert_array_equal(x0, saved_x0)
    _assert_same(A, saved_A)
