"""dpsolve/precond/amg/sparse.py on NumPy, against SciPy: the very code the GPU set-up runs on
CuPy arrays (row ids with empty rows, transposes, dense copies, the Hermitian test)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpsolve.precond.amg import sparse as S


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("shape", [(7, 5), (12, 12), (1, 9), (9, 1)])
def test_transpose_dense_and_rows_match_scipy(shape, dtype):
    rng = np.random.default_rng(3)
    M = sp.random_array(shape, density=0.35, format="csr", random_state=rng, dtype=np.float64)
    M = sp.csr_array(M.astype(dtype) * (1 + (1j if np.dtype(dtype).kind == "c" else 0)))
    M.sort_indices()
    if shape[0] > 2:                                       # an empty row
        M = sp.csr_array(sp.vstack([M[:1], sp.csr_array((1, shape[1]), dtype=dtype), M[2:]]))
    rows = S.row_ids(M.indptr, M.nnz)
    assert np.array_equal(rows, np.repeat(np.arange(shape[0]), np.diff(M.indptr)))
    for conj in (False, True):
        tp, ti, td = S.transpose(M.indptr, M.indices, M.data, M.shape, conj=conj)
        ref = sp.csr_array(M.conj().T if conj else M.T)
        ref.sort_indices()
        assert np.array_equal(tp, ref.indptr) and np.array_equal(ti, ref.indices)
        assert np.array_equal(td, ref.data) and ti.dtype == M.indices.dtype
        # the permutation a re-set-up applies to new values of the same pattern
        *_, order = S.transpose(M.indptr, M.indices, M.data, M.shape, conj=conj,
                                with_order=True)
        new = M.data * 3 - 1
        assert np.array_equal(new[order].conj() if conj else new[order],
                              (ref * 3 - (ref != 0)).data)
    assert np.array_equal(S.dense(M.indptr, M.indices, M.data, M.shape), M.toarray())


def test_the_hermitian_test():
    A = np.array([[2.0, 1 + 1j], [1 - 1j, 3.0]])
    assert S.is_hermitian_dense(A) and not S.is_hermitian_dense(A + np.triu(A, 1))
    assert S.is_hermitian_dense(np.zeros((3, 3)))
    assert S.is_hermitian_dense(A + 1e-12 * np.array([[0, 1], [0, 0]]))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_add_matches_scipy(dtype):
    rng = np.random.default_rng(5)
    for shape in ((8, 6), (10, 10), (1, 4)):
        X = sp.csr_array(sp.random_array(shape, density=0.4, random_state=rng)).astype(dtype)
        Y = sp.csr_array(sp.random_array(shape, density=0.3, random_state=rng)).astype(dtype)
        X.sort_indices()
        Y.sort_indices()
        p, i, d = S.add((X.indptr, X.indices, X.data), (Y.indptr, Y.indices, -Y.data), shape)
        got = sp.csr_array((d, i, p), shape=shape)
        assert np.array_equal(got.toarray(), (X - Y).toarray())
        assert all(np.all(np.diff(i[p[r]:p[r + 1]]) > 0) for r in range(shape[0]))


@pytest.mark.parametrize("theta", [0.0, 0.25])
def test_strength_is_the_references(theta):
    """The device set-up's strength graph (sparse.strength, run here on NumPy) equals the host
    reference.s, on a nonsymmetric pattern with weak entries and an explicit zero."""
    from dpsolve.precond.amg import reference as ref
    rng = np.random.default_rng(7)
    A = sp.random_array((40, 40), density=0.1, random_state=rng) + 4 * sp.eye_array(40)
    A = sp.csr_array(A)
    A.data[3] = 0.0                                        # stored, never strong
    A.sort_indices()
    gp, gj = S.strength(A.indptr, A.indices, A.data, A.diagonal(), theta)
    hp, hj = ref.strength_graph(A, theta)
    assert np.array_equal(gp, hp) and np.array_equal(gj, hj)
