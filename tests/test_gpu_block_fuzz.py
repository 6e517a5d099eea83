"""Seeded fuzz test (GPU): blocks of right-hand sides, ``dpsolve.<method>(A, B)`` and
``P.solve(B)`` with B of shape (n, k), on every device variant and "auto" (GPU machines only).

Cases are drawn when the module is imported, from NumPy ``default_rng`` streams seeded by a fixed
number and the CRC-32 of "method/variant/case" (the same cases on every run and worker). Per
(method, variant), for cg and bicgstab: dtype float32, float64, complex64, complex128; n in
{31, 257, 1000, 4097} (a 2-D Laplacian on the most square grid, 3-D for 1000, or a sparse
diagonally dominant Hermitian matrix, or for bicgstab a convection-diffusion one); k in
{2, 3, 5}, a column scaled by 1e-3 and one zero column; M None, "jacobi", and on the variants
that run a preconditioner of kernels "amg" (real dtypes, n >= 257) or "chebyshev"; B NumPy in C
or Fortran order, or CuPy; x0 None or an (n, k) block; ``full_output`` or not; sync polling or
blocking; one-shot or prepared.

Invariants, on every case:

1. No exception; A, B and x0 are only read.
2. X has B's array kind (NumPy or CuPy), shape (n, k) and the dtype of the column's own single
   solve; ``info`` is an integer array of k codes; with ``full_output``, a report of k columns
   whose codes are ``info``.
3. Each column's code is its single solve's (the README: the batch and fused paths keep it), and
   a column with code 0 meets its tolerance, ||b_j - A x_j|| <= rtol ||b_j|| computed on the
   host in double precision (slack 1.5 in single precision, whose solver decides on a float32
   residual; 1 + 1e-6 in double); a zero column is x = 0 with code 0.
4. A block solved column by column (variants persistent, dynamic and cublas; M "amg" or
   "chebyshev"; complex dtypes off the batch path; the report's path "columns") gives each
   column the bits of the single call it makes, ``P.solve(b_j, x0_j)`` on a system prepared with
   the same arguments: the plain call where only (X, info) is asked for and no x0 is given (the
   prepared one-launch paths), ``full_output=True`` otherwise.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve.backends import VARIANT_NAMES, get_backend
from dpsolve.matrices import convdiff_2d, laplace_2d, laplace_3d
from test_fuzz_host import scaled_norm
from test_gpu_fuzz import _grid, _random_sparse

pytestmark = pytest.mark.gpu

SEED = 20261201
METHODS = ("cg", "bicgstab")
VARIANTS = {m: [v for v in VARIANT_NAMES[1:] if get_backend(v) is not None
                and m in get_backend(v).methods] + ["auto"] for m in METHODS}
STREAM_M = {v for v in VARIANT_NAMES[1:] if getattr(get_backend(v), "takes_stream_M", False)}
STREAM_M.add("auto")
COLUMNS_ONLY = {"persistent", "dynamic", "cublas"}      # no batch or fused block there
DTYPES = ("float32", "float64", "complex64", "complex128")
SIZES = (31, 257, 1000, 4097)
CASES_EACH = 4


def _draw(method, variant, i):
    rng = np.random.default_rng([SEED, zlib.crc32(f"{method}/{variant}/{i}".encode())])
    dtype = DTYPES[rng.integers(len(DTYPES))]
    n = int(SIZES[rng.integers(len(SIZES))])
    kinds = ["laplace", "rand-spd"] + (["convdiff"] if method == "bicgstab" else [])
    kind = kinds[rng.integers(len(kinds))]
    Ms = [None, "jacobi"]
    if variant in STREAM_M:
        Ms.append("chebyshev")
        if np.dtype(dtype).kind == "f" and n >= 257:
            Ms.append("amg")
    return {"method": method, "variant": variant, "dtype": dtype, "n": n, "kind": kind,
            "k": int(rng.choice((2, 3, 5))), "M": Ms[rng.integers(len(Ms))],
            "B": ("numpy-C", "numpy-F", "cupy")[rng.integers(3)], "x0": bool(rng.random() < 0.3),
            "full_output": bool(rng.random() < 0.5),
            "sync": "blocking" if rng.random() < 0.25 else "polling",
            "prepared": bool(rng.random() < 0.5), "seed": int(rng.integers(2 ** 31))}


CASES = [_draw(m, v, i) for m in METHODS for v in VARIANTS[m] for i in range(CASES_EACH)]


def _id(c):
    return (f"{c['method']}-{c['variant']}-{c['dtype']}-n{c['n']}-{c['kind']}-k{c['k']}-"
            f"M{c['M']}-{c['B']}{'-x0' if c['x0'] else ''}{'-fo' if c['full_output'] else ''}-"
            f"{c['sync']}{'-prepared' if c['prepared'] else ''}")


def _matrix(c, rng):
    """The case's A (test_gpu_fuzz's grids and random Hermitian matrices)."""
    n, dtype = c["n"], np.dtype(c["dtype"])
    if c["kind"] == "laplace":
        dims = _grid(n)
        A = laplace_3d(*dims) if len(dims) == 3 else laplace_2d(*dims)
    elif c["kind"] == "convdiff":
        A = convdiff_2d(*_grid(n, three_d=False), peclet=float(rng.uniform(0, 5)))
    else:                                     # sparse, diagonally dominant, Hermitian
        A = _random_sparse(n, rng, True, dtype.kind == "c")
    return sp.csr_array(A).astype(dtype)


def _columns_path(c, rep) -> bool:
    if rep is not None:
        return rep.path.startswith("columns")
    return (c["variant"] in COLUMNS_ONLY or c["M"] in ("amg", "chebyshev")
            or (np.dtype(c["dtype"]).kind == "c" and c["variant"] != "auto"))


@pytest.mark.parametrize("c", CASES, ids=[_id(c) for c in CASES])
def test_block_against_its_columns(c):
    import cupy
    rng = np.random.default_rng(c["seed"])
    dtype = np.dtype(c["dtype"])
    A = _matrix(c, rng)
    n, k = A.shape[0], c["k"]
    B = rng.standard_normal((n, k))
    if dtype.kind == "c":
        B = B + 1j * rng.standard_normal((n, k))
    B[:, 0] *= 1e-3
    B[:, k - 1] = 0
    B = B.astype(dtype)
    X0 = (0.1 * B[:, ::-1]).copy() if c["x0"] else None
    Bin = {"numpy-C": B.copy(), "numpy-F": np.asfortranarray(B),
           "cupy": cupy.asarray(B)}[c["B"]]
    X0in = None if X0 is None else (cupy.asarray(X0) if c["B"] == "cupy" else X0.copy())
    A_before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    rtol = 1e-5 if dtype in (np.float32, np.complex64) else 1e-8
    method = getattr(dpsolve, c["method"])
    kw = {"rtol": rtol, "full_output": c["full_output"]}
    opts = {"M": c["M"], "variant": c["variant"], "sync": c["sync"]}
    P = dpsolve.prepare(A, c["method"], **opts)
    out = P.solve(Bin, X0in, **kw) if c["prepared"] else method(A, Bin, X0in, **kw, **opts)
    X, info = out[0], out[1]
    rep = out[2] if c["full_output"] else None

    host = (lambda v: v.get()) if c["B"] == "cupy" else np.asarray
    np.testing.assert_array_equal(host(Bin), B)                         # 1: only read
    if X0 is not None:
        np.testing.assert_array_equal(host(X0in), X0)
    for a, b in zip((A.data, A.indices, A.indptr), A_before):
        np.testing.assert_array_equal(a, b)
    assert type(X) is type(Bin) and X.shape == (n, k)                   # 2
    assert isinstance(info, np.ndarray) and info.shape == (k,) and info.dtype.kind == "i"
    if rep is not None:
        assert rep.k == k and rep.info.tolist() == info.tolist()
    Xh = host(X)
    bits = _columns_path(c, rep)
    fo = c["full_output"] or X0 is not None
    for j in range(k):
        bj = B[:, j].copy()
        x0j = None if X0 is None else X0[:, j].copy()
        if c["B"] == "cupy":
            bj, x0j = cupy.asarray(bj), (None if x0j is None else cupy.asarray(x0j))
        single = P.solve(bj, x0j, rtol=rtol, full_output=fo)
        xs, code = host(single[0]), int(single[1])
        assert Xh.dtype == xs.dtype
        assert info[j] == code, (j, info.tolist(), code)                  # 3
        if code == 0:
            r = B[:, j].astype(np.complex128 if dtype.kind == "c" else np.float64) - A.astype(
                np.complex128 if dtype.kind == "c" else np.float64) @ Xh[:, j]
            slack = 1.5 if dtype in (np.float32, np.complex64) else 1 + 1e-6
            assert scaled_norm(r) <= slack * rtol * scaled_norm(B[:, j]), j
        if bits:                                                          # 4
            np.testing.assert_array_equal(Xh[:, j], xs)
    assert not Xh[:, k - 1].any() and info[k - 1] == 0
