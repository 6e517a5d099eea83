"""The set-ups' whole-array reductions (check.cu's count_true, any_of, max_abs through
dpsolve.cuda.ops) against NumPy at awkward sizes and dtypes, and the property they exist for:
a system of a new size loads no new kernel (CuPy's own reductions compile one per size class on
first use, 1-3 s each through NVRTC on a machine whose kernel cache is empty).

GPU only: skipped with a reason where there is no usable CUDA device.
"""
import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu

SIZES = [0, 1, 31, 32, 33, 255, 2049, 100_003]
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _values(n, dtype, rng):
    v = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
    return v.astype(dtype)


@pytest.mark.parametrize("n", SIZES)
def test_count_true(n):
    import cupy

    from dpsolve.cuda import ops
    rng = np.random.default_rng(n)
    m = rng.random(n) < 0.37
    assert ops.count_true(cupy.asarray(m)) == int(m.sum())
    slot = cupy.full(1, 5, cupy.int32)                   # added into, not overwritten
    assert ops.count_true(cupy.asarray(m), out=slot) is None
    assert int(slot.get()[0]) == 5 + int(m.sum())
    with pytest.raises(TypeError, match="bool"):
        ops.count_true(cupy.zeros(3, cupy.int32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_any_zero_all_finite_max_abs(n, dtype):
    import cupy

    from dpsolve.cuda import ops
    rng = np.random.default_rng(n + 17)
    v = _values(n, dtype, rng)
    assert ops.any_zero(cupy.asarray(v)) == bool((v == 0).any())
    assert ops.all_finite(cupy.asarray(v)) is True
    # |x| of a complex x: CUDA's hypot and NumPy's may differ in the last place
    rel = 4 * np.finfo(dtype).eps if np.dtype(dtype).kind == "c" else 0
    assert ops.max_abs(cupy.asarray(v)) == pytest.approx(float(np.abs(v).max()) if n else 0.0,
                                                         rel=rel, abs=0)
    if n == 0:
        return
    for at in {0, n // 2, n - 1}:
        w = v.copy()
        w[at] = -0.0                                      # a negative zero is a zero
        assert ops.any_zero(cupy.asarray(w)) is True
        for bad in (np.inf, -np.inf, np.nan):
            w = v.copy()
            w[at] = bad
            assert ops.all_finite(cupy.asarray(w)) is False
            top = ops.max_abs(cupy.asarray(w))
            assert np.isnan(top) if np.isnan(bad) else top == np.inf
        if np.dtype(dtype).kind == "c":
            w = v.copy()
            w[at] = complex(1.0, np.nan)                  # NaN in the imaginary part only
            assert ops.all_finite(cupy.asarray(w)) is False


def test_max_abs_shared_slot_and_views():
    """Several arrays folded into one slot read back once; strided and 2-D inputs."""
    import cupy

    from dpsolve.cuda import ops
    a = cupy.asarray(np.array([1.0, -7.5, 3.0]))
    b = cupy.asarray(np.array([[2.0, 0.5], [-6.0, 4.0]], dtype=np.float32))
    slot = cupy.zeros(1, cupy.uint64)
    ops.max_abs(a, out=slot)
    ops.max_abs(b.T, out=slot)                             # a transposed (strided) view
    assert ops.max_abs_value(slot) == 7.5
    assert ops.max_abs(a[::2]) == 3.0
    big = cupy.asarray(np.array([3e38], dtype=np.float32))   # |x| of a float32 near its top
    assert ops.max_abs(big) == float(np.float32(3e38))
    huge = cupy.asarray(np.array([1e300 + 1e300j]))          # hypot, not the square root of
    assert ops.max_abs(huge) == pytest.approx(np.sqrt(2) * 1e300)   # an overflowing square


def _loads(monkeypatch):
    """The kernel modules CuPy loads or compiles from now on: (name, caller) pairs, the name a
    CUB reduction's ("cub: ..."), dpsolve's ("dpsolve") or the source's first line."""
    import traceback

    import cupy.cuda.compiler as cc
    seen = []
    orig = cc._compile_module_with_cache

    def wrapped(source, *args, **kwargs):
        where = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in traceback.extract_stack()
                 if "/dpsolve/" in f.filename and "_loader" not in f.filename]
        name = ("dpsolve" if source.startswith("// dpsolve headers") else
                "cub: " + source[source.find("__global__"):][:60] if "<cub/" in source else
                source.lstrip().splitlines()[0][:60])
        seen.append((name, where[-1] if where else "?"))
        return orig(source, *args, **kwargs)
    monkeypatch.setattr(cc, "_compile_module_with_cache", wrapped)
    return seen


def _laplace(dims):
    from dpsolve.matrices import laplace_2d, laplace_3d
    return sp.csr_array(laplace_2d(*dims) if len(dims) == 2 else laplace_3d(*dims))


@pytest.mark.parametrize("M", [None, "jacobi", "amg"])
def test_a_new_size_compiles_no_cub_reduction(monkeypatch, M):
    """After solves of a 2-D and a 3-D system, solves of other sizes (other level sizes and
    coarsest grids: AMG's set-up reduces on every level) load none of CuPy's CUB reductions,
    whose block size follows the array's size: each new size class was a kernel compiled by
    NVRTC with CUB's headers, 1-3 s on an empty kernel cache (75 of them, 27 s, in a first AMG
    set-up; run on the tree before dpsolve's own reductions, this test failed for M="amg" at
    device.py's diagonal check). CuPy's element-wise and scan kernels are left: ~0.1 s each,
    once per machine. The variant is pinned (graph runs all three M), so that no other
    variant's path is taken at another size."""
    import cupy
    import cupyx.scipy.sparse as csp

    import dpsolve

    def solve(dims):
        A = csp.csr_matrix(_laplace(dims))
        b = A @ cupy.ones(A.shape[0])
        x, info = dpsolve.cg(A, b, rtol=1e-10, M=M, variant="graph")
        assert info == 0
        cupy.testing.assert_allclose(x, cupy.ones(A.shape[0]), rtol=1e-5)

    solve((37, 41))
    solve((11, 13, 12))
    seen = _loads(monkeypatch)
    for dims in ((53, 29), (19, 23, 17), (250, 243)):
        solve(dims)
    cub = [s for s in seen if s[0].startswith("cub: ")]
    assert cub == [], f"CUB reductions compiled or loaded for a new size: {cub}"


def test_device_format_checks_compile_no_cub_reduction(monkeypatch):
    """dpsolve's checks of device index arrays (formats.validate.check_indices of cupyx COO, CSC
    and CSR inputs, formats.csr.CSR.validate) at new sizes load none of CuPy's CUB reductions
    (formats.csr.any_true counts with dpsolve's kernel), and a bad index is still refused with
    its entry named. (cupyx's own COO / CSC -> CSR conversion still reduces with CUB: that is
    cupyx's.) COO and CSC systems solve: the conversion, on the caller's stream, is ordered
    before the solve's stream reads it (this test once got a valid COO refused as malformed)."""
    import cupy
    import cupyx.scipy.sparse as csp

    import dpsolve
    from dpsolve._errors import FormatError
    from dpsolve.formats.csr import CSR
    from dpsolve.formats.validate import check_indices

    for dims in ((21, 22), (33, 27), (19, 23, 17)):
        A = csp.csr_matrix(_laplace(dims))
        for M in (A.tocoo(), A.tocsc()):
            x, info = dpsolve.cg(M, A @ cupy.ones(A.shape[0]), rtol=1e-10, variant="graph")
            assert info == 0
            cupy.testing.assert_allclose(x, cupy.ones(A.shape[0]), rtol=1e-5)
    check_indices(csp.csr_matrix(_laplace((9, 8))).tocoo())       # the element-wise kernels
    mats = [csp.csr_matrix(_laplace(dims)) for dims in ((53, 29), (250, 243), (31, 37, 29))]
    mats = [(A, A.tocoo(), A.tocsc()) for A in mats]
    seen = _loads(monkeypatch)
    for A, coo, csc in mats:
        for M in (A, coo, csc):
            check_indices(M)
        CSR(A.indptr, A.indices, A.data, A.shape[0]).validate()
    cub = [s for s in seen if s[0].startswith("cub: ")]
    assert cub == [], f"CUB reductions compiled or loaded for a new size: {cub}"
    n = 300
    bad = csp.csr_matrix((cupy.ones(n), cupy.arange(n, dtype=cupy.int32) * 0 + 7,
                          cupy.arange(n + 1, dtype=cupy.int32)), shape=(n, n))
    bad.indices[123] = n + 5
    with pytest.raises(FormatError, match=f"{n + 5} at entry 123 is out of range"):
        check_indices(bad)
