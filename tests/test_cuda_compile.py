"""Every CUDA source compiles with nvcc for sm_90, with the options the loader gives NVRTC.

This runs on CPU-only machines (CI has nvcc 13.0); it skips only where nvcc is absent.
"""
import re
import shutil
import subprocess

import pytest

from dpsolve.cuda import _loader, abi

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


def test_every_cu_file_is_registered():
    on_disk = {p.name for p in _loader.CUDA_DIR.glob("*.cu")}
    registered = {s.file for s in _loader.SOURCES.values()}
    assert on_disk == registered, "every .cu file must be listed in SOURCES (and exist)"


def test_every_kernel_the_python_asks_for_is_registered():
    """get_kernel(source, "name<{T}>") with literal names (dpsolve/cuda/ops.py, the back ends)
    must name an expression of SOURCES[source]: an unregistered one is compiled nowhere and
    fails only on a GPU ("named symbol not found")."""
    from pathlib import Path
    root = Path(_loader.__file__).resolve().parents[1]
    calls = []
    for path in list(root.rglob("*.py")):
        text = path.read_text()
        calls += [(path.name, m.group(1), m.group(2)) for m in
                  re.finditer(r'get_kernel\(\s*"(\w+)",\s*"([^"{]+<\{T\}>)"', text)]
        calls += [(path.name, m.group(1), m.group(2) + "<{T}>") for m in
                  re.finditer(r'(?:ops|ex)\.scalar\(\s*"(\w+)",\s*"(\w+)"', text)]
        calls += [(path.name, _loader.amg_source(m.group(1)), m.group(1)) for m in
                  re.finditer(r'vc_kernel\(\s*"([^"{]+<\{T\}>)"', text)]  # amg.cu's, routed
    assert len(calls) > 30 and sum(c[1] == "amg_vc" for c in calls) >= 5
    for where, source, expr in calls:
        assert expr in _loader.SOURCES[source].expressions, f"{where}: {source}/{expr}"


def _kernels(text: str):
    """(name, body's first statement) of every __global__ function of a CUDA source."""
    text = re.sub(r"__launch_bounds__\([^)]*\)", "", text)
    for m in re.finditer(r"__global__[^{;(]*?(\w+)\s*\([^{;]*\)\s*\{\n\s*([^\n]*)", text):
        yield m.group(1), m.group(2).strip()


# amg.cu's AMG_PDL(prefetch): DPS_PDL with prefetches of the kernel's matrix before the wait;
# the names its prefetch may read: a kernel's sizes and its matrix's arrays (read-only while a
# V-cycle runs), never a vector
_PREFETCH = re.compile(r"AMG_PDL\(amg::(sell_prefetch<AMG_ROW_CHUNK>|csr_prefetch<W>|"
                       r"block_prefetch_csr|block_prefetch)\((.*)\)\);")
_MATRIX_NAMES = {"n", "nc", "rows", "sptr", "idx", "base", "val", "perm", "indptr", "indices",
                 "data", "minv", "size_t", "const", "int", "nullptr"}


def test_kernels_captured_with_pdl_wait_first():
    """A kernel that pdl.Kernel launches with programmatic serialization must wait for the one
    before it (DPS_PDL) before touching memory: every kernel of pdl.SOURCES and amg.cu's vc_*
    kernels start with it, or (amg.cu) with AMG_PDL, whose prefetch between launch and wait
    names only the kernel's sizes and its matrix. A kernel without it would read what the kernel
    before still writes."""
    from dpsolve.cuda import pdl
    seen = prefetching = 0
    for name in sorted(pdl.SOURCES) + ["amg"]:
        text = (_loader.CUDA_DIR / _loader.SOURCES[name].file).read_text()
        assert len(list(_kernels(text))) == text.count("__global__"), name   # none unread
        for kernel, first in _kernels(text):
            if name == "amg" and not kernel.startswith("vc_"):
                continue
            seen += 1
            m = _PREFETCH.fullmatch(first) if name == "amg" else None
            if m is not None:
                args = re.sub(r"\b(blockIdx|threadIdx|blockDim)\.[xyz]\b", "", m.group(2))
                names = set(re.findall(r"[A-Za-z_]\w*", args))
                assert names <= _MATRIX_NAMES, f"amg.cu: {kernel} prefetches {names}"
                prefetching += 1
                continue
            assert first == "DPS_PDL();", f"{name}.cu: {kernel} starts with {first!r}"
    assert seen > 60 and prefetching >= 15
    header = (_loader.CUDA_DIR / "include/dpsolve/common.cuh").read_text()
    assert "griddepcontrol.wait" in header
    amg = (_loader.CUDA_DIR / "amg.cu").read_text()
    assert re.search(r"DPS_PDL_LAUNCH\(\);\s*\\\s*prefetch;\s*\\\s*DPS_PDL_WAIT\(\);", amg)


@needs_nvcc
@pytest.mark.parametrize("name", sorted(_loader.SOURCES))
def test_nvcc_compiles_source_for_sm90(name, tmp_path):
    argv, tu = _loader.nvcc_command(name, tmp_path, arch="sm_90")
    assert any(o.startswith("-I") for o in argv) and "-std=c++17" in argv
    res = subprocess.run(argv, capture_output=True, text=True)
    assert res.returncode == 0, f"nvcc failed for {name}:\n{res.stderr}"
    # every name expression was instantiated: the object holds one kernel symbol per expression
    n_expr = sum(len(_loader.expressions(name, dt)) for dt in _loader.CTYPES)
    assert tu.read_text().count("dps_instance_") == n_expr


@needs_nvcc
def test_compile_errors_name_the_real_file_and_line(tmp_path, broken_kernel):
    argv, _ = _loader.nvcc_command("broken", tmp_path / "", arch="sm_90")
    res = subprocess.run(argv, capture_output=True, text=True)
    assert res.returncode != 0
    assert f"{broken_kernel}(3)" in res.stderr, res.stderr


def test_options_add_rdc_on_request():
    assert "-rdc=true" not in _loader.options()
    assert "-rdc=true" in _loader.options(rdc=True)


def test_source_text_starts_with_line_directive():
    """The file's text follows a #line directive naming it (after one comment line: the hash of
    the headers, for CuPy's kernel cache)."""
    for name, src in _loader.SOURCES.items():
        first, rest = _loader.source_text(name).split("\n", 1)
        assert first == f"// dpsolve headers {_loader.headers_digest()}"
        assert rest.startswith(f'#line 1 "{_loader.CUDA_DIR / src.file}"\n')
        assert rest.split("\n", 1)[1] == (_loader.CUDA_DIR / src.file).read_text()


def test_unsupported_dtype_has_no_kernels():
    with pytest.raises(TypeError, match="no CUDA kernels for dtype int32"):
        _loader.ctype("int32")


def test_get_kernel_refuses_defines_that_are_not_macro_definitions():
    for bad in (("-O0",), ("DPS_SPMV_LOADS=1",), (1,)):
        with pytest.raises(ValueError, match="-DNAME"):
            _loader.get_kernel("spmv", "spmv_ell<{T}>", "float64", defines=bad)


def _spmv_ptx(tmp_path, define=None) -> str:
    """spmv.cu's PTX as the loader compiles it, plus one -D option (None: the defaults)."""
    argv, tu = _loader.nvcc_command("spmv", tmp_path, arch="sm_90")
    if define is not None:
        argv.insert(1, f"-D{define}")
    out = tmp_path / f"spmv_{define}.ptx"
    i = argv.index("-c")
    argv[i], argv[-1] = "-ptx", str(out)
    res = subprocess.run(argv, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out.read_text()


def _kernel_ptx(text, name):
    """One kernel's PTX body: the first entry whose mangled name starts with ``name``."""
    start = text.index(".entry " + name)
    return text[start:text.index("\n}", start)]


@needs_nvcc
def test_spmv_load_policies_compile_and_stream_what_they_say(tmp_path):
    """spmv.cuh's DPS_SPMV_LOADS: 0 keeps every load on ld.global.nc; 1 (the default) streams the
    coalesced matrix loads (ld.global.cs) but not CSR-scalar's; 2 streams them all."""
    ptx = {p: _spmv_ptx(tmp_path, None if p is None else f"DPS_SPMV_LOADS={p}")
           for p in (0, 1, 2, None)}
    assert ptx[None] == ptx[1]                                   # the default is policy 1
    assert "ld.global.cs" not in ptx[0] and "ld.global.nc" in ptx[0]
    assert 0 < ptx[1].count("ld.global.cs") < ptx[2].count("ld.global.cs")
    scalar = [m for m in re.findall(r"\.entry (\w*spmv_csr_scalar\w*)", ptx[1])]
    ell = [m for m in re.findall(r"\.entry (\w*spmv_ell\w*)", ptx[1])]
    assert scalar and ell
    assert all("ld.global.cs" not in _kernel_ptx(ptx[1], k) for k in scalar)
    assert all("ld.global.cs" in _kernel_ptx(ptx[2], k) for k in scalar)
    assert all("ld.global.cs" in _kernel_ptx(ptx[1], k) for k in ell)


@needs_nvcc
def test_ell_pairs_load_two_rows_at_once(tmp_path):
    """spmv.cu's DPS_SPMV_ELL_PAIRS (on by default): the float / double ELL kernels load two rows'
    indices (and values) in one vector load; with -DDPS_SPMV_ELL_PAIRS=0 one at a time."""
    default, single = _spmv_ptx(tmp_path), _spmv_ptx(tmp_path, "DPS_SPMV_ELL_PAIRS=0")
    for t, v in (("d", "v2.f64"), ("f", "v2.f32")):
        on, off = (_kernel_ptx(text, f"_Z8spmv_ellI{t}E") for text in (default, single))
        assert re.search(r"ld\.global\.cs\.v2\.[us]32", on) and f"ld.global.cs.{v}" in on, t
        assert not re.search(r"\.v2\.[us]32", off), t


def test_adaptive_descriptor_layout_matches_dynamic_cuh():
    """ops.adaptive_descriptor writes the words that dynamic.cuh's Bins<T>::load reads, in the
    same order (a static check: a swapped pair would only show on a GPU)."""
    import inspect
    from dpsolve.cuda import ops
    header = (_loader.INCLUDE_DIR / "dpsolve" / "dynamic.cuh").read_text()
    body = header[header.index("struct Bins {"):
                  header.index("__device__ __forceinline__ static Bins load")]
    fields = re.findall(r"(\w+);", body.replace("int n_short, n_med, n_chunks;",
                                                "int n_short; int n_med; int n_chunks;"))
    src = inspect.getsource(ops.adaptive_descriptor)
    ptrs = re.search(r"ptrs = \[(.*?)\]", src, re.S).group(1)
    names = [p.strip().split(".")[-1] for p in ptrs.split(",") if p.strip()]
    names += ["n_short", "n_med", "n_chunks"]
    rename = {"short": "short_rows", "medium": "med_rows", "long": "long_rows"}
    assert [rename.get(n, n) for n in names] == fields


def test_dynamic_format_codes_match_dynamic_cuh():
    """The loader's W codes of the device-driven kernels are the headers' (abi.cuh, which
    dynamic.cuh reads; a mismatch would instantiate a kernel for the wrong row loop, and show
    only on a GPU)."""
    header = abi.parse((_loader.INCLUDE_DIR / "dpsolve" / "abi.cuh").read_text())
    defined = {k: header[k] for k in ("DYN_ELL", "DYN_CSR_SCALAR", "DYN_ADAPTIVE")}
    assert defined == {"DYN_ELL": _loader.DYN_ELL, "DYN_CSR_SCALAR": _loader.DYN_CSR_SCALAR,
                       "DYN_ADAPTIVE": _loader.DYN_ADAPTIVE}
    assert not set(_loader.CSR_VECTOR_WIDTHS) & set(defined.values())


def test_amg_rows_at_once_stay_within_the_kernels_bound():
    """amg.cu's CSR kernels take 1 to MAX_ROWS rows a group at a time, as the host asks
    (device.rows_at_once); more would compute only MAX_ROWS of them and leave rows unwritten."""
    from dpsolve.precond.amg import device
    text = (_loader.CUDA_DIR / "amg.cu").read_text()
    m = re.search(r"constexpr int MAX_ROWS = (\d+);", text)
    assert m and int(m.group(1)) == device.MAX_ROWS
    for n in (0, 1, 1000, 10**6, 10**8):
        for lanes in (2, 4, 8, 16, 32):
            assert 1 <= device.rows_at_once(n, lanes) <= device.MAX_ROWS


def test_amg_restriction_a_block_a_row_only_into_few_long_rows():
    """device.restriction_lanes gives a block a row (BLOCK) only below level 0, only where 32
    lanes a row would leave fewer than LANES_MIN_THREADS threads and the rows are longer than
    RESTRICT_BLOCK_MEAN on average; else cycle_lanes' choice."""
    from dpsolve.precond.amg import device
    few = device.LANES_MIN_THREADS // 32 - 1               # rows: 32 lanes a row too few threads
    long_nnz = (device.RESTRICT_BLOCK_MEAN + 1) * few
    assert device.restriction_lanes(1, few, long_nnz) == device.BLOCK
    assert device.restriction_lanes(0, few, long_nnz) == device.cycle_lanes(few, long_nnz) != \
        device.BLOCK                                       # level 0: never
    short_nnz = device.RESTRICT_BLOCK_MEAN * few           # not longer than the mean bound
    assert device.restriction_lanes(2, few, short_nnz) == device.cycle_lanes(few, short_nnz)
    many = device.LANES_MIN_THREADS // 32 + 1              # threads enough at 32 lanes
    assert (device.restriction_lanes(1, many, 800 * many)
            == device.cycle_lanes(many, 800 * many) == 32)


def test_amg_sell_kernels_registered_once_in_two_modules():
    """Every SELL V-cycle kernel is registered for both HALF values and both NARROW values: the
    16-bit ones in the V-cycle's modules (amg_vc, and amg_vc_low for the *_low ones), the int32
    ones in "amg_wide", and no expression in two; the ELL kernels stay <T, HALF>."""
    vc = set(_loader.SOURCES["amg_vc"].expressions) | set(_loader.SOURCES["amg_vc_low"].expressions)
    wide = set(_loader.SOURCES["amg_wide"].expressions)
    assert wide == set(_loader.AMG_WIDE) and not vc & wide
    for k in _loader.VC_SELL:
        for h in ("false", "true"):
            assert f"{k}<{{T}}, {h}, true>" in vc and f"{k}<{{T}}, {h}, false>" in wide
    for k in _loader.VC_ELL:
        assert {f"{k}<{{T}}, false>", f"{k}<{{T}}, true>"} <= vc
    text = (_loader.CUDA_DIR / "amg.cu").read_text()
    assert "constexpr unsigned NARROW_PAD = 0xFFFFu;" in text


def test_amg_kernels_routed_to_one_module_each():
    """amg.cu's kernels live in four modules by the dtype each runs in (the set-up's, the
    V-cycle's, a lowered cycle's finest level's, the int-index SELL ones): no expression in two,
    amg_source finds each one's, the *_low kernels and the casts in amg_vc_low, every other vc_
    kernel and the cycle's preparation (its copies, RS's subtraction, the Hermitian test) in
    amg_vc, and an unknown one is named."""
    names = ("amg", "amg_vc", "amg_vc_low", "amg_wide")
    seen = {}
    for name in names:
        for e in _loader.SOURCES[name].expressions:
            assert e not in seen, (e, seen.get(e), name)
            seen[e] = name
            assert _loader.amg_source(e) == name
    for e, name in seen.items():
        kernel = e.split("<")[0]
        if name == "amg_wide":
            continue
        low = kernel.endswith("_low") or kernel in ("vc_to_single", "vc_from_single")
        vc = kernel.startswith("vc_") or kernel in ("sell_order", "sell_widths", "sell_fill",
                                                    "half_round", "narrow_index", "narrow_ell",
                                                    "subtract_scaled", "hermitian_misses")
        assert name == ("amg_vc_low" if low else "amg_vc" if vc else "amg"), e
    with pytest.raises(ValueError, match="amg.cu"):
        _loader.amg_source("no_such<{T}>")


def _ptxas_usage(name, tmp_path):
    """{mangled kernel: (registers, spill bytes)} of a source compiled for sm_90 (ptxas -v)."""
    argv, _ = _loader.nvcc_command(name, tmp_path, arch="sm_90")
    res = subprocess.run([argv[0], "-Xptxas", "-v", *argv[1:]], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    usage, kernel, spill = {}, None, 0
    for line in res.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            kernel, spill = m.group(1), 0
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            spill = int(m.group(1)) + int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m and kernel:
            usage[kernel] = (int(m.group(1)), spill)
    return usage


@needs_nvcc
@pytest.mark.parametrize("name", ["amg_vc", "amg_vc_low", "amg_wide"])
def test_amg_vcycle_kernels_keep_every_warp_slot(name, tmp_path):
    """The V-cycle's kernels (vc_*) over float and double hold at most 32 registers a thread,
    without spilling: 2,048 threads an SM, all its warp slots, which their latency-bound loads
    need. The chunked row loop (amg::strided_sum) left to the compiler took 40 in the float16
    Jacobi sweep of a double b, and 160^3's sweep ran at half the speed (amg.cu's full_sm)."""
    usage = _ptxas_usage(name, tmp_path)
    real = {}
    for mangled, (regs, spill) in usage.items():
        m = re.match(r"_Z(\d+)", mangled)                  # a kernel at namespace scope
        if m is None:
            continue
        length = int(m.group(1))
        kernel = mangled[m.end():m.end() + length]
        first = mangled[m.end() + length:m.end() + length + 2]    # "If" / "Id": float, double
        if kernel.startswith("vc_") and first in ("If", "Id"):
            real[f"{kernel}<{first[1]}> {mangled}"] = (regs, spill)
    assert len(real) >= (20 if name == "amg_vc" else 10)
    heavy = {k: v for k, v in real.items() if v[0] > 32 or v[1] > 0}
    assert not heavy, heavy
