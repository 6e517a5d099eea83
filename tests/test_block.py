"""Several right-hand sides: dpsolve.<method>(A, B) with B of shape (n, k) (dpsolve/_block.py).

Each column is the single solve of that column, bit for bit (one prepared system, the columns one
after another); (n,) and (n, 1) keep SciPy's single right-hand side; bad columns are named."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve.backends import VARIANT_NAMES, get_backend
from dpsolve.matrices import convdiff_2d, laplace_2d

N = 144


def steady_convdiff(nx, ny, shift):
    """2-D convection-diffusion (Peclet 30) plus shift * its mean diagonal times I. BiCGStab is
    chaotic on the unshifted matrix: a change of one ulp in b moves a column's iterations by up
    to 17 of ~200 (HostBlockBiCGStab, float64, 37^2 and 121 x 119), so no two summation orders
    agree within 2 there. Shifted by 0.1-0.2 (7-23 iterations) the same change moves none."""
    A = sp.csr_array(convdiff_2d(nx, ny, peclet=30.0))
    return sp.csr_array(A + shift * A.diagonal().mean() * sp.eye_array(A.shape[0]))


def _A(dtype=np.float64):
    return sp.csr_array(laplace_2d(12)).astype(dtype)


def _B(k=4, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.random((N, k))
    if np.dtype(dtype).kind == "c":
        B = B + 1j * rng.random((N, k))
    if k > 1:
        B[:, 1] *= 1e-3                   # columns of different scale converge at different j
    return B.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("method", ["cg", "bicgstab", "bicg", "gmres"])
def test_each_column_is_its_single_solve(method, dtype):
    A, B = _A(dtype), _B(5, dtype)
    B[:, 3] = 0                                           # a zero column: x = 0, info 0
    B0 = B.copy()
    rtol = 1e-5 if dtype == np.float32 else 1e-8
    X, info, rep = getattr(dpsolve, method)(A, B, rtol=rtol, variant="host", full_output=True)
    assert np.array_equal(B, B0)                          # the caller's B is not modified
    assert X.shape == B.shape and X.dtype == dtype and info.shape == (5,)
    assert rep.k == 5 and rep.info.tolist() == info.tolist()
    for j in range(5):
        x, i = getattr(dpsolve, method)(A, B[:, j], rtol=rtol, variant="host")
        assert np.array_equal(X[:, j], x) and info[j] == i     # the same code too (a float32
        if i == 0:                                             # BiCG may break down: -10)
            assert np.linalg.norm(B[:, j] - A @ X[:, j]) <= rtol * np.linalg.norm(B[:, j]) * 1.01
    assert (info == 0).sum() >= 4
    assert not X[:, 3].any() and rep.iterations[3] == 0


def test_single_right_hand_sides_keep_scipys_shapes():
    A, B = _A(), _B(1)
    for b in (B[:, 0], B):
        x, info = dpsolve.cg(A, b, variant="host")
        assert x.shape == (N,) and isinstance(info, int)


def test_orders_x0_prepared_and_callbacks():
    A, B = _A(), _B(3)
    X, info = dpsolve.cg(A, np.asfortranarray(B), rtol=1e-8, variant="host")
    Xc, _ = dpsolve.cg(A, np.ascontiguousarray(B), rtol=1e-8, variant="host")
    assert np.array_equal(X, Xc) and X.flags.c_contiguous
    # x0 per column: starting at the answer costs no iteration
    X2, info2, rep2 = dpsolve.cg(A, B, X, rtol=1e-8, variant="host", full_output=True)
    assert (rep2.iterations <= 1).all()
    with pytest.raises(ValueError, match=r"x0 \(144, 2\) and b \(144, 3\) must have the same"):
        dpsolve.cg(A, B, np.zeros((N, 2)), variant="host")
    # a prepared system takes blocks too, through P.solve and dpsolve.cg(P, B)
    P = dpsolve.prepare(A, "cg", variant="host")
    Xp, infop = P.solve(B, rtol=1e-8)
    assert np.array_equal(Xp, X) and (infop == 0).all()
    assert np.array_equal(dpsolve.cg(P, B, rtol=1e-8)[0], X)
    # the callback sees X (n, k), the column in progress updated
    seen = []
    dpsolve.cg(A, B, rtol=1e-8, variant="host", callback=lambda Xk: seen.append(Xk.shape))
    assert seen and set(seen) == {(N, 3)}


def test_bad_columns_are_named_and_each_column_keeps_its_code():
    A, B = _A(), _B(4)
    B[5, 2] = np.nan
    with pytest.raises(ValueError, match="b contains NaN or Inf in column 2"):
        dpsolve.cg(A, B, variant="host")
    B[5, 2] = 1.0
    X0 = np.zeros((N, 4))
    X0[0, 1] = np.inf
    with pytest.raises(ValueError, match="x0 contains NaN or Inf in column 1"):
        dpsolve.cg(A, B, X0, variant="host")
    with pytest.raises(ValueError, match=r"shapes of A \(144, 144\) and b \(143, 4\)"):
        dpsolve.cg(A, B[:-1], variant="host")
    # a column that cannot converge in maxiter has its own code; the others converge
    B[:, 0] *= 1e6
    X, info = dpsolve.cg(A, B, atol=1e-3, rtol=0.0, maxiter=3, variant="host")
    assert info[0] == 3
    X, info = dpsolve.cg(A, B[:, 1:], rtol=1e-8, variant="host")
    assert (info == 0).all()


def test_an_empty_block_returns_empty_arrays():
    X, info = dpsolve.cg(_A(), np.zeros((N, 0)), variant="host")
    assert X.shape == (N, 0) and info.shape == (0,)


def test_distributed_block_checks():
    """dpsolve.distributed takes a block b (n_local, k), k != 1 (the solves: tests/mpi_cases.py's
    case "block"); its checks name the columns and shapes."""
    from dpsolve.distributed.solvers import _local_block, block_width
    assert block_width(np.ones((10, 3)), 10) == 3 and block_width(np.ones((10, 0)), 10) == 0
    assert block_width(np.ones((10, 1)), 10) is None and block_width(np.ones(10), 10) is None
    assert block_width(np.ones((9, 3)), 10) is None and block_width([[1.0, 2.0]], 1) == 2
    B = np.ones((10, 3))
    B[4, 2] = B[0, 0] = np.nan
    v, problem = _local_block(B, 10, "b")
    assert v is None and problem == "b contains NaN or Inf in columns 0, 2"
    v, problem = _local_block(np.ones((10, 2)), 10, "x0", k=3)
    assert v is None and "x0 has shape (10, 2)" in problem and "b's shape" in problem
    v, problem = _local_block(np.ones((10, 3), dtype=object), 10, "b")
    assert v is None and "unsupported dtype object" in problem
    v, problem = _local_block(np.ones((10, 3)), 10, "b")
    assert problem is None and v.shape == (10, 3)


def test_distributed_block_report():
    """DistributedBlockReport's figures come from its columns; energy only when every column
    has a reading."""
    from dpsolve.distributed import DistributedBlockReport, DistributedReport

    def col(its, info, energy):
        return DistributedReport(method="cg", variant="host", transport="mpi", ranks=2,
                                 dtype="float64", n=10, nnz=28, iterations=its, info=info,
                                 residual_norm=its / 1e9, energy_joules=energy)
    rep = DistributedBlockReport(columns=[col(5, 0, 1.5), col(9, 9, 2.0)], wall_time=0.25)
    assert rep.k == 2 and rep.iterations.tolist() == [5, 9] and rep.info.tolist() == [0, 9]
    assert rep.residual_norm.tolist() == [5e-9, 9e-9] and rep.energy_joules == 3.5
    assert rep.summary() == ("2 right-hand sides (columns, one set-up): info [0, 9], "
                             "iterations 5-9, wall 250 ms")
    rep.columns.append(col(3, 0, None))
    assert rep.energy_joules is None
    empty = DistributedBlockReport(wall_time=0.001)
    assert empty.k == 0 and empty.energy_joules is None and "iterations 0-0" in empty.summary()


GPU_VARIANTS = [v for v in VARIANT_NAMES[1:] if get_backend(v) is not None]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_gpu_block_equals_single_solves(variant):
    """A pinned variant: cuda, merge and graph run the fused block (each column the single
    solve's code, its iterations within 2, its tolerance met); the others loop over the
    columns, each column the single solve bit for bit."""
    import cupy
    A, B = _A(), _B(3)
    fused = variant in ("cuda", "merge", "graph")
    for Bin in (B, cupy.asarray(B)):
        X, info, rep = dpsolve.cg(A, Bin, rtol=1e-8, variant=variant, M="jacobi",
                                  full_output=True)
        assert isinstance(X, type(Bin)) and (info == 0).all()
        assert rep.path.startswith("fused block CG" if fused else "columns"), rep.path
        Xh = X.get() if isinstance(X, cupy.ndarray) else X
        for j in range(3):
            x, i, r = dpsolve.cg(A, B[:, j], rtol=1e-8, variant=variant, M="jacobi",
                                 full_output=True)
            assert i == 0
            if fused:
                assert abs(rep.columns[j].iterations - r.iterations) <= 2
                assert np.linalg.norm(B[:, j] - A @ Xh[:, j]) <= 1e-8 * np.linalg.norm(B[:, j])
            else:
                assert np.array_equal(Xh[:, j], x)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("method,grid", [("cg", 12), ("cg", 40), ("bicgstab", 12),
                                         ("bicgstab", 19)])
def test_gpu_block_as_a_batch_sharing_A(method, grid, dtype, M):
    """variant="auto" runs a block of small systems as dpsolve.batch's kernels over one A (CG of
    <= 1,024 rows: a row a thread; else vectors in shared memory): each column meets its own
    tolerance, with the single solve's code and iterations within 2 (BiCGStab 4); a zero column
    gives x = 0; x0 is each column's start; NumPy in, NumPy out; CuPy in, CuPy out. H100: every
    code the single solves' (float32 BiCGStab breaks down on the 1e-4 column, -10, as they do)."""
    import cupy
    A = sp.csr_array(laplace_2d(grid)).astype(dtype)
    n = A.shape[0]
    rng = np.random.default_rng(3)
    B = rng.standard_normal((n, 6)).astype(dtype)
    B[:, 2] *= 1e-4
    B[:, 4] = 0
    rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-8
    for Bin in (B, cupy.asarray(B)):
        X, info, rep = getattr(dpsolve, method)(A, Bin, rtol=rtol, M=M, full_output=True)
        assert isinstance(X, type(Bin)) and X.shape == B.shape and X.dtype == dtype
        assert "sharing A" in rep.path
        Xh = X.get() if isinstance(X, cupy.ndarray) else X
        assert not Xh[:, 4].any() and info[4] == 0
        for j in range(6):
            x, i, r = getattr(dpsolve, method)(A, B[:, j], rtol=rtol, M=M, full_output=True)
            assert info[j] == i          # the single solve's code (float32 BiCGStab breaks down
            if i != 0:                   # on the 1e-4 column there: -10 on every path)
                continue
            assert abs(rep.columns[j].iterations - r.iterations) <= (2 if method == "cg" else 4)
            assert np.linalg.norm(B[:, j] - A @ Xh[:, j]) <= 1.01 * max(
                rtol * np.linalg.norm(B[:, j]), 0)
    X0 = np.asarray(X.get() if isinstance(X, cupy.ndarray) else X)
    X1, info1, rep1 = getattr(dpsolve, method)(A, B, X0, rtol=rtol, M=M, full_output=True)
    done = info == 0                                     # started at the solution: no iteration
    assert (info1[done] == 0).all() and (rep1.iterations[done] <= 1).all()


@pytest.mark.gpu
def test_gpu_block_batch_path_gives_way():
    """The loop of single solves where neither the batch path nor the fused block applies: a
    variant without fused blocks (persistent, dynamic, cublas), a callback, a preconditioner
    other than Jacobi, b outside the safe range; variants cuda, merge and graph run the fused
    block (the first two launch by launch), and so does blocking sync (the batch path is for
    polling); too large a system for a block a column runs fused; both switched off, the loop."""
    from dpsolve import _block
    A, B = _A(), _B(3)
    for kw in ({"variant": "persistent"}, {"variant": "dynamic"}, {"variant": "cublas"},
               {"callback": lambda X: None}, {"M": "chebyshev"}):
        rep = dpsolve.cg(A, B, rtol=1e-8, full_output=True, **kw)[2]
        assert rep.path == "columns, one prepared system"
    for v, how, sync in (("cuda", "one by one", "polling"), ("merge", "one by one", "polling"),
                         ("graph", "CUDA graphs", "polling"), ("auto", "CUDA graphs", "blocking")):
        X, info, rep = dpsolve.cg(A, B, rtol=1e-8, variant=v, sync=sync, full_output=True)
        assert rep.path.startswith("fused block CG") and how in rep.path, (v, rep.path)
        assert all(c.sync == sync for c in rep.columns)
        assert (info == 0).all()
        for j in range(3):
            assert np.linalg.norm(B[:, j] - A @ X[:, j]) <= 1e-8 * np.linalg.norm(B[:, j])
    big = sp.csr_array(laplace_2d(90))                   # 8,100 rows: not a block a column
    rep = dpsolve.cg(big, np.ones((big.shape[0], 2)), rtol=1e-6, full_output=True)[2]
    assert rep.path.startswith("fused block CG")
    rep = dpsolve.cg(A, B * 1e200, rtol=1e-8, full_output=True)[2]   # ||b||^2 overflows
    assert rep.path == "columns, one prepared system"
    assert "sharing A" in dpsolve.cg(A, B, rtol=1e-8, full_output=True)[2].path
    try:
        _block.BATCH_PATH = False
        assert dpsolve.cg(A, B, rtol=1e-8, full_output=True)[2].path.startswith("fused")
        _block.FUSED_PATH = False
        assert dpsolve.cg(A, B, rtol=1e-8, full_output=True)[2].path.startswith("columns")
    finally:
        _block.BATCH_PATH = _block.FUSED_PATH = True


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [2, 3, 16, 33])
def test_gpu_fused_block_equals_single_solves(k, dtype, M, method):
    """Blocks too large for the batch path run as one fused block (k = 33: two passes), CG on
    2-D Poisson, BiCGStab on a shifted convection-diffusion matrix (``steady_convdiff``): each
    column meets its own tolerance with the single solve's code and its iterations within 2; a
    zero column gives x = 0; x0 is each column's start; NumPy in, NumPy out. Only a column whose
    single solve breaks down is finished by it."""
    import cupy
    # 14,399 rows: beyond the batch path in float32 too (shared memory)
    A = sp.csr_array(laplace_2d(121, 119) if method == "cg"
                     else steady_convdiff(121, 119, 0.2)).astype(dtype)
    solver = getattr(dpsolve, method)
    name = "CG" if method == "cg" else "BiCGStab"
    n = A.shape[0]
    rng = np.random.default_rng(k)
    B = rng.standard_normal((n, k)).astype(dtype)
    B[:, 1] *= 1e-4
    if k > 2:
        B[:, 2] = 0
    rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-8
    singles = [solver(A, B[:, j], rtol=rtol, M=M, full_output=True) for j in range(k)]
    broken = [j for j in range(k) if singles[j][1] != 0]   # float32 BiCGStab may break down
    assert method == "bicgstab" or not broken              # on the 1e-4 column, as in the
    for Bin in (B, cupy.asarray(B)):                       # batch test: the same code here
        X, info, rep = solver(A, Bin, rtol=rtol, M=M, full_output=True)
        assert isinstance(X, type(Bin)) and X.shape == B.shape and X.dtype == dtype
        assert rep.path.startswith(f"fused block {name}")
        assert "finished by single" not in rep.path or broken, rep.path
        Xh = X.get() if isinstance(X, cupy.ndarray) else X
        if k > 2:
            assert not Xh[:, 2].any() and info[2] == 0 and rep.columns[2].iterations == 0
        for j, (x, i, r) in enumerate(singles):
            assert info[j] == i
            if i != 0:
                continue
            assert abs(rep.columns[j].iterations - r.iterations) <= 2, (j, rep.columns[j], r)
            assert np.linalg.norm(B[:, j] - A @ Xh[:, j]) <= 1.01 * rtol * np.linalg.norm(B[:, j])
    X1, info1, rep1 = solver(A, B, Xh, rtol=rtol, M=M, full_output=True)
    done = info == 0                                       # started at the solution
    assert (info1[done] == 0).all() and (rep1.iterations[done] <= 1).all()


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_fused_block_kernels_follow_the_host_steps(dtype, method):
    """DeviceBlockCG / DeviceBlockBiCGStab (block.cu) against HostBlockCG / HostBlockBiCGStab,
    the same steps in NumPy: the same status, iterations within 1, X to rounding where the
    iterations agree; maxiter stops both alike, and so does a per-column limit (the restarts'
    budgets)."""
    import cupy

    from dpsolve import _block_bicgstab as bb
    from dpsolve import _block_fused as bf
    from dpsolve.formats import CSR
    Host, Device = ((bf.HostBlockCG, bf.DeviceBlockCG) if method == "cg"
                    else (bb.HostBlockBiCGStab, bb.DeviceBlockBiCGStab))
    A = sp.csr_array(laplace_2d(37) if method == "cg"
                     else steady_convdiff(37, 37, 0.1)).astype(dtype)
    s = sp.diags_array(np.linspace(0.5, 2.0, A.shape[0]).astype(dtype))
    A = sp.csr_array(s @ A @ s)
    n, k = A.shape[0], 5
    B = np.random.default_rng(9).standard_normal((n, k)).astype(dtype)
    B[:, 3] = 0
    tol = np.array([1e-5, 1e-3, 1e-4, 1e-5, 1e-2]) * np.linalg.norm(B, axis=0)
    dinv = (1 / A.diagonal()).astype(dtype)
    csr = CSR(cupy.asarray(A.indptr, cupy.int32), cupy.asarray(A.indices, cupy.int32),
              cupy.asarray(A.data), n)
    for maxiter, limit in ((1000, None), (6, None), (1000, [3, 1000, 8, 1, 1000])):
        host = Host(A, B, None, tol, dinv, limit=limit)
        bf.run(host, maxiter)
        dev = Device(csr, cupy.asarray(B), None, tol, cupy.asarray(dinv), limit=limit)
        bf.run(dev, maxiter)
        if limit is not None:
            assert host.status.tolist()[:3] == [bf.MAXITER, bf.CONVERGED, bf.MAXITER]
            assert host.iters[0] == 3 and host.iters[2] == 8
        assert dev.status.tolist() == host.status.tolist()
        assert np.abs(dev.iters - host.iters).max() <= 1
        X = dev.X.get()
        eps = 1e-4 if dtype == np.float32 else 1e-10
        for j in np.flatnonzero(dev.iters == host.iters):
            ref = np.linalg.norm(host.X[:, j])
            assert np.linalg.norm(X[:, j] - host.X[:, j]) <= eps * max(ref, 1e-30)


@pytest.mark.gpu
def test_gpu_fused_block_hands_a_broken_column_to_its_single_solve():
    """An indefinite A: the column whose p^H A p is exactly 0 breaks down in the block and is
    finished by the single solve (its code); the others are the block's."""
    d = np.concatenate([np.ones(4500), -np.ones(4500)])   # 9,000 rows: beyond the batch path
    A = sp.csr_array(sp.diags_array(d))
    B = np.zeros((9000, 3))
    B[:4500, 0] = 1
    B[:4500, 1] = np.linspace(0, 1, 4500)
    B[:, 2] = 1                                           # p^H A p = 0 at once
    X, info, rep = dpsolve.cg(A, B, rtol=1e-8, full_output=True)
    assert rep.path.startswith("fused block CG") and "column(s) 2 finished" in rep.path
    for j in range(3):
        x, i = dpsolve.cg(A, B[:, j], rtol=1e-8)
        assert info[j] == i
    assert info[0] == info[1] == 0


def test_a_numpy_block_goes_up_once_or_stays_on_the_host(monkeypatch):
    """_block._on_device and _device_zeros (CPU, a stand-in cupy): a NumPy B of a system on the
    GPU goes up in one upload with its X0; out of device memory (the upload, or X's zeros) the
    columns stay on the host (None); a CuPy B, a callback or a host system never go up."""
    import sys
    import types

    from dpsolve import _block

    class OutOfMemoryError(Exception):
        pass
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(get_current_stream=lambda: "stream",
                                      memory=types.SimpleNamespace(
                                          OutOfMemoryError=OutOfMemoryError))
    fake.zeros = np.zeros
    monkeypatch.setitem(sys.modules, "cupy", fake)
    ups = []

    def upload(arrays, stream):
        ups.append((len(arrays), stream))
        return [None if a is None else np.array(a) for a in arrays]
    monkeypatch.setattr(_block, "upload", upload)
    P = types.SimpleNamespace(_device=True, n=N, dtype=np.dtype(np.float64))
    B, X0 = _B(3), _B(3, seed=1)
    dB, dX0 = _block._on_device(P, B, X0, False, None)
    assert ups == [(2, "stream")] and np.array_equal(dB, B) and np.array_equal(dX0, X0)
    assert _block._on_device(P, B, "Mb", True, None)[1] == "Mb"      # x0="Mb" passes through
    assert _block._on_device(P, B, None, False, lambda X: None) is None
    assert _block._on_device(types.SimpleNamespace(_device=False), B, None, False, None) is None
    X = _block._device_zeros((N, 3), np.float64)
    assert X.shape == (N, 3) and X.dtype == np.float64 and not X.any()

    def no_room(*a, **k):
        raise OutOfMemoryError
    monkeypatch.setattr(fake, "zeros", no_room)
    assert _block._device_zeros((N, 3), np.float64) is None
    monkeypatch.setattr(_block, "upload", no_room)
    assert _block._on_device(P, B, None, False, None) is None
