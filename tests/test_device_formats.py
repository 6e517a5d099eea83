"""The device matrices (dpsolve/cuda/device_matrix.py) and the ops wrappers that ask them, on the
CPU: matrices are built over host (NumPy) arrays, get_kernel is replaced by a stub naming the
kernel, and an executor's ``record()`` captures each wrapper's launches instead of issuing them.
Checked:
the registry covers every format, the W codes are abi.py's, the grids and work sizes, and every
launch's kernel is registered with the loader and gets arguments of the kinds its .cu signature
declares (int -> np.int32, pointer -> array or null), x and y where they belong.
"""
import re

import numpy as np
import pytest

from dpsolve.cuda import _loader, abi, ops
from dpsolve.cuda import device_matrix as dm
from dpsolve.cuda.executor import Executor
from dpsolve.formats import FORMATS, to_csr
from dpsolve.matrices import power_law

SM = 100                 # the stubbed multiprocessor count
FUSED = ("csr-scalar", "ell")       # one thread per row: fused SpMV + DOT kernels
ALL = FORMATS + ("operator",)


@pytest.fixture(scope="module")
def csr():
    """3000 rows: short, medium and one long (2000-entry) row, so csr-adaptive has three bins."""
    return to_csr(power_law(3000, mean=6.0, heavy=(2000,), seed=1), np.float64)


def matrix(fmt, csr):
    if fmt == "operator":
        return dm.OperatorMatrix(None, "matvec", csr.n, csr.dtype, "A.matvec")
    return dm.FORMAT_CLASSES[fmt].from_csr(csr, max_fill=1e9)


@pytest.fixture
def record(monkeypatch):
    """record(fn, *args) -> (fn's result, [(source, expression, grid, args)] of its launches;
    a host call (an operator's function) as None)."""
    monkeypatch.setattr(ops, "get_kernel",
                        lambda source, expr, dtype, rdc=False, defines=(): (source, expr))
    monkeypatch.setattr(ops, "_sm_count", lambda: SM)
    monkeypatch.setattr(ops, "_max_active_blocks", lambda kernel: 2)
    monkeypatch.setattr(dm, "adaptive_descriptor",
                        lambda A: np.zeros(abi.DPS_BINS_WORDS, np.uint64))

    def run(fn, *args, **kw):
        with Executor(None).record() as plan:
            out = fn(*args, **kw)
        return out, [None if grid is None else (*kernel, grid[0], args)
                     for kernel, grid, _, args, _ in plan.launches]
    return run


def params(source: str, expression: str) -> list[str]:
    """The parameter declarations of the kernel ``expression`` names, from its .cu file."""
    name = expression.split("<")[0]
    text = (_loader.CUDA_DIR / _loader.SOURCES[source].file).read_text()
    m = re.search(r"__global__[^;{]*?\b" + name + r"\(([^)]*)\)", text)
    assert m, f"no kernel {name} in {source}"
    return [p.strip() for p in m.group(1).split(",")]


def check_launch(source, expression, args):
    """The kernel is compiled by the loader and each argument is of the kind its parameter
    declares."""
    assert expression in _loader.SOURCES[source].expressions, (source, expression)
    decl = params(source, expression)
    assert len(decl) == len(args), (expression, decl, args)
    for d, a in zip(decl, args):
        if "*" in d:
            assert isinstance(a, np.ndarray) or (isinstance(a, np.uint64) and a == 0), (d, a)
        elif re.fullmatch(r"int \w+", d):
            assert isinstance(a, np.int32), (expression, d, a)


def grid_for(work):      # ops.grid_for with SM multiprocessors
    return max(1, min(-(-work // ops.BLOCK), 32 * SM))


def test_registry_has_a_class_for_every_format(csr):
    assert set(dm.FORMAT_CLASSES) == set(FORMATS)
    for fmt, cls in dm.FORMAT_CLASSES.items():
        assert cls.format == fmt and issubclass(cls, dm.DeviceMatrix)
        A = matrix(fmt, csr)
        assert type(A) is cls and (A.n, A.nnz, A.dtype) == (csr.n, csr.nnz, csr.dtype)
        assert (A.csr is None) == (fmt == "ell") and (A.ell is None) == (fmt != "ell")
        assert (A.bins is None) == (fmt != "csr-adaptive")
    with pytest.raises(ValueError, match="unknown format"):
        dm.build(csr, "sell-c-sigma")
    assert ops.DeviceMatrix is dm.DeviceMatrix and ops.OperatorMatrix is dm.OperatorMatrix
    assert issubclass(dm.OperatorMatrix, dm.DeviceMatrix)


def test_dynamic_codes_are_the_abi_ones(csr):
    want = {"ell": abi.DYN_ELL, "csr-scalar": abi.DYN_CSR_SCALAR,
            "csr-adaptive": abi.DYN_ADAPTIVE}
    for fmt, code in want.items():
        assert matrix(fmt, csr).dynamic_code == ops.dynamic_code(matrix(fmt, csr)) == code
    for w in _loader.CSR_VECTOR_WIDTHS:
        assert dm.CsrVectorMatrix(csr, width=w).dynamic_code == w
    assert matrix("csr-vector", csr).width == dm.vector_width(csr.nnz / csr.n)
    codes = [matrix(f, csr).dynamic_code for f in FORMATS]
    assert len(set(codes)) == len(codes) and set(codes) <= set(_loader.DYNAMIC_CODES)
    with pytest.raises(TypeError, match="operator"):
        matrix("operator", csr).dynamic_code


def test_work_and_grids(csr, record):
    n = csr.n
    for fmt in ALL:
        A = matrix(fmt, csr)
        work = n * (A.width if fmt == "csr-vector" else 1)
        assert A.work == work
        assert ops.dynamic_grid(A) == min(-(-work // ops.BLOCK), 4 * SM)
        assert ops.persistent_grid("kernel", A) == min(2 * SM, -(-work // ops.BLOCK))
    A = dm.CsrVectorMatrix(csr, width=16)
    assert (A.work, ops.dynamic_grid(A)) == (16 * n, min(-(-16 * n // ops.BLOCK), 4 * SM))


def test_matrix_bytes(csr):
    s, n, nnz = 8, csr.n, csr.nnz
    want = {"csr-scalar": nnz * (s + 4) + (n + 1) * 4, "csr-vector": nnz * (s + 4) + (n + 1) * 4,
            "csr-adaptive": nnz * (s + 4) + (n + 1) * 4 + 4 * n, "operator": 0}
    for fmt in ALL:
        A = matrix(fmt, csr)
        assert A.matrix_bytes() == want.get(fmt, A.ell and A.ell.width * n * (s + 4)), fmt
    assert matrix("ell", csr).matrix_bytes() >= nnz * (s + 4)


def test_spmv_launches(csr, record):
    x, y = np.zeros(csr.n), np.zeros(csr.n)
    for fmt in FORMATS:
        A = matrix(fmt, csr)
        _, launches = record(ops.spmv, A, x, y)
        [(source, expr, grid, args)] = launches
        assert source == "spmv" and args[-2] is x and args[-1] is y
        check_launch(source, expr, args)
        if fmt == "csr-adaptive":
            ns, nm, _ = A.bins.counts()
            assert ns and nm and A.bins.nchunks, "the test matrix fills every bin"
            want = grid_for(ns * A.bins.group) + grid_for(nm * 32) + min(A.bins.nchunks, 32 * SM)
            assert expr == f"spmv_csr_adaptive<{{T}}, {A.bins.group}>"
        else:
            want = grid_for(A.work)
        assert grid == want, fmt
    assert record(ops.spmv, matrix("operator", csr), x, y)[1] == [None]     # a host call
    assert record(ops.spmv, dm.CsrScalarMatrix(to_csr(np.zeros((0, 0)), np.float64)),
                  x[:0], y[:0])[1] == []


def test_ell_fill_launch(csr, record):
    """ELL.from_csr's device path (formats/ell.py's _kernel_fill): one ell_fill launch over the
    CSR's arrays into the ELL's, a thread a row; none for an empty matrix or width 0."""
    width = int(np.diff(csr.indptr).max())
    idx, val = np.empty(csr.n * width, np.int32), np.empty(csr.n * width)
    _, [(source, expr, grid, args)] = record(ops.ell_fill, csr, width, idx, val)
    assert (source, expr, grid) == ("spmv", "ell_fill<{T}>", grid_for(csr.n))
    check_launch(source, expr, args)
    assert args[:2] == (csr.n, width) and args[2] is csr.indptr and args[3] is csr.indices
    assert args[4] is csr.data and args[5] is idx and args[6] is val
    assert record(ops.ell_fill, csr, 0, idx[:0], val[:0])[1] == []


def test_merge_kernels_fused_or_not(csr, record):
    n = csr.n
    v = [np.zeros(n) for _ in range(6)]
    parts = np.zeros(2 * ops.DOT_MAX_PARTIALS)
    calls = {"cg_spmv_dot": ("cg_merge", lambda A: ops.merge_spmv_dot(A, v[0], v[1], parts)),
             "bicgstab_spmv_dot": ("bicgstab_merge", lambda A: ops.bicgstab_merge_spmv_dot(
                 A, v[0], v[1], v[2], parts)),
             "bicgstab_spmv_dot2": ("bicgstab_merge", lambda A: ops.bicgstab_merge_spmv_dot2(
                 A, v[0], v[1], v[2], parts, parts[ops.DOT_MAX_PARTIALS:])),
             "bicg_spmv2_dot": ("bicg_merge", lambda A: ops.bicg_merge_spmv2_dot(
                 A, A, v[0], v[1], v[2], v[3], parts))}
    for fmt in ALL:
        A = matrix(fmt, csr)
        for base, (source, call) in calls.items():
            nparts, launches = record(call, A)
            if fmt in FUSED:
                [(src, expr, grid, args)] = launches
                assert (src, expr) == (source, f"{base}<{{T}}, {A.dynamic_code}>")
                assert grid == nparts == ops.merge_parts(n)
                check_launch(src, expr, args)
                # (n, width, indptr, indices, data, ...): CSR passes width 0, ELL a null indptr
                if fmt == "ell":
                    assert args[1] == A.ell.width and args[2] == 0 and args[3] is A.ell.indices
                else:
                    assert args[1] == 0 and args[2] is A.csr.indptr and args[3] is A.csr.indices
            elif base == "bicg_spmv2_dot" and fmt == "csr-vector":     # A p, A^H p~ together
                (src, expr, grid, args), dot = launches
                assert expr == f"bicg_spmv2_vector<{{T}}, {A.width}>" and grid == grid_for(A.work)
                check_launch(src, expr, args)
                assert dot[1] == "dot_partial<{T}>" and nparts == dot[2]
            else:                                             # the SpMV, then the DOT
                spmvs = 2 if base == "bicg_spmv2_dot" else 1
                assert len(launches) == spmvs + 1, (fmt, base)
                assert all(s is None if fmt == "operator" else s[0] == "spmv"
                           for s in launches[:spmvs])
                check_launch(*launches[-1][:2], launches[-1][3])
    assert set(dm.UNFUSED_SPMV) == set(ALL) - set(FUSED) == set(ops.UNFUSED_SPMV)
    assert {matrix(f, csr).dynamic_code for f in FUSED} == set(_loader.FUSED_CODES)


@pytest.mark.parametrize("persistent", [False, True])
def test_device_driven_launches(csr, record, persistent):
    n = csr.n
    v = [np.zeros(n) for _ in range(13)]
    v[1] = abi.pack("PrecondArgs", inv_diag=np.zeros(n))   # every method's second operand: pc
    parts, status = np.zeros(6 * ops.DOT_MAX_PARTIALS), np.zeros(abi.DYN_STATUS_WORDS)
    for fmt in FORMATS:
        A = matrix(fmt, csr)
        for method, call in (
                ("cg", lambda: ops.cg_device(A, *v[:8], parts, status, 1e-8, 10,
                                             persistent=persistent)),
                ("bicg", lambda: ops.bicg_device(A, A, *v[:13], parts, status, 1e-8, 10,
                                                 persistent=persistent)),
                ("bicgstab", lambda: ops.bicgstab_device(A, *v[:11], parts, status, 1e-8, 10,
                                                         persistent=persistent))):
            grid, [(source, expr, g, args)] = record(call)
            kind = "persistent" if persistent else "dyn_start"
            assert source == f"{method}_{'persistent' if persistent else 'dynamic'}"
            assert expr == f"{method}_{kind}<{{T}}, {A.dynamic_code}>" and g == grid
            # one by-value argument: the method's struct of args.cuh, as abi.py lays it out
            struct = {"cg": "CgArgs", "bicg": "BicgArgs", "bicgstab": "StabArgs"}[method]
            assert params(source, expr) == [f"const dyn::{struct}<T> a"]
            [a] = args
            assert a.dtype == abi.args_dtype(struct)
            width = A.ell.width if fmt == "ell" else 0
            assert a["width"] == width and a["n"] == n and a["maxiter"] == 10
            assert a["indptr"] == (A.csr.indptr.ctypes.data if A.csr is not None else 0)
            assert a["x"] == v[2].ctypes.data and a["status"] == status.ctypes.data
    with pytest.raises(TypeError, match="operator"):
        record(ops.cg_device, matrix("operator", csr), *v[:8], parts, status, 1e-8, 10)


def test_cg_args_is_cg_devices_record_with_the_fast_fields(csr, record):
    """The prepared call's one launch (dpsolve/_fast.py) packs its record with ops.cg_args,
    cg_device's own: the same fields, with flags and rtol where given (0 otherwise)."""
    n = csr.n
    v = [np.zeros(n) for _ in range(8)]
    v[1] = abi.pack("PrecondArgs", inv_diag=None)          # no preconditioner: z is r
    parts, status = np.zeros(6 * ops.DOT_MAX_PARTIALS), np.zeros(abi.DYN_STATUS_WORDS)
    for fmt in FORMATS:
        A = matrix(fmt, csr)
        _, [(_, _, _, [launched])] = record(lambda: ops.cg_device(A, *v, parts, status, 1e-8, 10,
                                                                   persistent=True))
        plain = ops.cg_args(A, *v, parts, status, 1e-8, 10, persistent=True)
        fast = ops.cg_args(A, *v, parts, status, 1e-8, 10, persistent=True, flags=abi.DPS_FAST_TOL,
                           rtol=1e-6)
        assert plain.tobytes() == launched.tobytes()
        assert plain["flags"] == 0 and plain["rtol"] == 0.0 and plain["z"] == plain["r"]
        assert fast["flags"] == abi.DPS_FAST_TOL and fast["rtol"] == 1e-6
        assert all(fast[f] == plain[f] for f in plain.dtype.names if f not in ("flags", "rtol",
                                                                               "pc"))


def test_cta_plan_rules(monkeypatch):
    """persistent CG's one-block kernel (ops.cta_plan): which systems take it, and its shape."""
    from types import SimpleNamespace

    from dpsolve.formats import CSR
    asked = []

    class Kernel:
        max_dynamic_shared_size_bytes = 48 * 1024 - 768
    monkeypatch.setattr(ops, "get_kernel", lambda src, expr, dt: asked.append(expr) or Kernel())
    monkeypatch.setattr(ops, "_shared_optin", lambda: 232448)         # an H100's opt-in bytes

    def system(n, row, dtype=np.float64, csr=True):
        lens = np.full(n, row)
        indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        return SimpleNamespace(n=n, dtype=np.dtype(dtype),
                               csr=CSR(indptr, np.zeros(indptr[-1], np.int32),
                                       np.zeros(indptr[-1], dtype), n) if csr else None)

    def plan(*a, **k):
        p = ops.cta_plan(system(*a, **k))
        return None if p is None else (asked[-1], p[1], p[2])

    assert plan(4096, 5) == ("cg_persistent_cta<{T}, 5, 8, false>", 512, 8 * 6 * 512 * 8)
    assert plan(1000, 3) == ("cg_persistent_cta<{T}, 5, 2, false>", 512, 2 * 6 * 512 * 8)
    assert plan(1, 1) == ("cg_persistent_cta<{T}, 5, 2, false>", 512, 2 * 6 * 512 * 8)
    assert plan(2744, 7) == ("cg_persistent_cta<{T}, 7, 6, false>", 512, 6 * 8 * 512 * 8)
    assert plan(3073, 7, np.float32) == ("cg_persistent_cta<{T}, 7, 8, false>", 512,
                                         8 * 8 * 512 * 4)
    assert plan(3073, 7) is None                     # 8 x 8 x 4 KiB: more than a block may have
    assert plan(4097, 5, np.float32) is None         # more rows than 8 x 512
    assert plan(100, 8) is None                      # a row of 8 entries
    assert plan(2048, 5, np.complex128)[1:] == (512, 4 * 6 * 512 * 16)      # R = 4
    assert plan(2049, 5, np.complex64) is None       # complex: R <= 4
    assert plan(100, 5, csr=False) is None           # not a CSR format
    # persistent_cg_kernel, what both launch sites ask: the one block, a grid of one
    kernel, grid, block, shared = ops.persistent_cg_kernel(system(4096, 5), fast=True)
    assert asked[-1] == "cg_persistent_cta<{T}, 5, 8, true>" and isinstance(kernel, Kernel)
    assert (grid, block, shared) == (1, 512, 8 * 6 * 512 * 8)
    monkeypatch.setattr(ops, "CTA", False)
    assert plan(100, 5) is None


def test_cta_block_is_the_kernels():
    """ops.cta_plan launches _loader.CTA_THREADS threads: the kernel's compile-time block."""
    text = (_loader.CUDA_DIR / "cg_persistent.cu").read_text()
    m = re.search(r"constexpr int THREADS = (\d+);", text)
    assert m and int(m.group(1)) == _loader.CTA_THREADS
