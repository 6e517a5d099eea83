"""The one kernel loader: compiles ``dpsolve/cuda/*.cu`` through CuPy's NVRTC back end.

* Each source file is a family of templated kernels. ``SOURCES`` lists, per file, the name
  expressions to instantiate; ``{T}`` is replaced by the C++ type of the dtype.
* Sources are prefixed with ``#line 1 "<path>"`` and compiled with ``-I dpsolve/cuda/include``, so
  compiler errors name the real file and line.
* Modules are memoised per (device, source, dtype, rdc). ``rdc=True`` adds ``-rdc=true`` for
  kernels that launch kernels or set graph conditionals (CuPy then links libcudadevrt). A
  ``lazy`` source (the persistent and dynamic solvers', the batch's) is compiled one kernel a
  module, at the kernel's first use. ``compile_all`` compiles the modules a path names side by
  side in threads before its first kernel; ``compiling`` does it while a block runs (the AMG
  set-up's, beside its own first steps), ``prefetch`` without waiting (a process's first call).
* ``nvcc_command`` gives the exact equivalent ``nvcc`` invocation; the CPU test suite compiles every
  source with it for sm_90, so a syntax error never lands.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._errors import KernelCompileError
from ..formats.adaptive import GROUPS
from . import abi, pdl

CUDA_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = CUDA_DIR / "include"
OPTIONS = ("-std=c++17", f"-I{INCLUDE_DIR}")

CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
          np.dtype(np.complex64): "dps::complex<float>",
          np.dtype(np.complex128): "dps::complex<double>"}

CSR_VECTOR_WIDTHS = (2, 4, 8, 16, 32)
# amg.cu's V-cycle kernels over SELL-32, templated <T, HALF, NARROW[, PACKED]>, and over level
# 0's ELL, templated <T, HALF[, PACKED]>
VC_SELL = ("vc_presmooth_residual_sell", "vc_residual_sell", "vc_jacobi_sell", "vc_cheb_sell",
           "vc_restrict_sell", "vc_prolong_sell", "vc_restrict_sell_low", "vc_prolong_sell_low")
VC_ELL = ("vc_presmooth_residual_ell", "vc_residual_ell", "vc_jacobi_ell", "vc_cheb_ell",
          "vc_presmooth_residual_ell_low", "vc_jacobi_ell_low")
AMG_WIDE = tuple(f"{k}<{{T}}, {h}, false>" for k in VC_SELL for h in ("false", "true"))


def _vc_variants(low: bool) -> tuple:
    """The ELL and 16-bit-offset SELL kernels of VC_ELL and VC_SELL (the *_low ones, or the
    others) at each HALF (the matrix values in T or in float16, precision "half"), and PACKED
    (float16 values and offsets in one word: device.PACK_SELL): <T, HALF>, <T, true, true>,
    <T, HALF, true> and <T, true, true, true>."""
    ell = [k for k in VC_ELL if k.endswith("_low") == low]
    sell = [k for k in VC_SELL if k.endswith("_low") == low]
    return (tuple(f"{k}<{{T}}, {h}>" for k in ell for h in ("false", "true"))
            + tuple(f"{k}<{{T}}, true, true>" for k in ell)
            + tuple(f"{k}<{{T}}, {h}, true>" for k in sell for h in ("false", "true"))
            + tuple(f"{k}<{{T}}, true, true, true>" for k in sell))
BLOCK_LANES = (2, 4, 8, 16, 32)       # block.cu's G: lanes a row, one a column (k <= G)
# block.cu's kernels over the rows (templated on G too) and its per-column scalar kernels
BLOCK_VECTOR_KERNELS = ("block_start", "block_update", "block_direction", "block_flush",
                        "bs_start", "bs_direction", "bs_s", "bs_update")
# and its SpMMs, templated on G and on D^-1 (SCALED) too
BLOCK_SPMM_KERNELS = ("block_spmm_dot", "bs_spmm_ts")
BLOCK_SCALAR_KERNELS = ("block_alpha", "block_beta", "bs_first", "bs_half",
                        "bs_omega", "bs_next")

# batch_cg_rows's (NZ, R): entries a row holds in registers, rows a thread; -> its most threads
# (NZ = 5 and 7: 2-D and 3-D stencils' rows, no empty slot to hold; batch.cu says why it pays)
BATCH_ROWS = {(5, 4): 256, (7, 4): 256, (8, 1): 1024, (8, 2): 512, (8, 4): 256, (16, 1): 512,
              (32, 1): 256, (0, 4): 1024}    # NZ = 0: any row length, its entries via L1
# the (NZ, R) of batch_cg_rows's DIA form too: a pattern of NZ diagonals (2-D and 3-D stencils)
BATCH_DIAGONALS = ((5, 4), (7, 4))
# persistent CG's one-block kernel (cg_persistent_cta<T, NZ, R, FAST>; ops.cta_plan): rows of at
# most NZ entries, R rows a thread, blocks of CTA_THREADS (its cta::THREADS)
CTA_SHAPES = tuple((nz, r) for nz in (5, 7) for r in (2, 4, 6, 8))
CTA_THREADS = 512

# the W template arguments of the dynamic / persistent kernels (abi.cuh; CSR-vector passes its
# width)
DYN_ELL, DYN_CSR_SCALAR, DYN_ADAPTIVE = abi.DYN_ELL, abi.DYN_CSR_SCALAR, abi.DYN_ADAPTIVE
DYNAMIC_CODES = (DYN_ELL, DYN_CSR_SCALAR) + CSR_VECTOR_WIDTHS + (DYN_ADAPTIVE,)
# the W of the merge variant's fused SpMV + DOT kernels: the formats with one thread per row
FUSED_CODES = (DYN_ELL, DYN_CSR_SCALAR)


@dataclass(frozen=True)
class Source:
    file: str
    expressions: tuple       # name expressions with {T} for the value type
    rdc: bool = False
    cooperative: bool = False    # launched with cuLaunchCooperativeKernel (grid.sync())
    # one module a kernel: a solve uses one or two of the source's many instantiations, and
    # compiling all of them made a first call wait for every one (cg_persistent.cu's 24: 15.5 s
    # of a first dpsolve.cg on an H100 with an empty kernel cache)
    lazy: bool = False


SOURCES = {
    "spmv": Source("spmv.cu", ("spmv_csr_scalar<{T}>", "spmv_ell<{T}>", "ell_fill<{T}>")
                   + tuple(f"spmv_csr_vector<{{T}}, {w}>" for w in CSR_VECTOR_WIDTHS)
                   + tuple(f"spmv_csr_adaptive<{{T}}, {g}>" for g in GROUPS)),  # G: lanes per row
    "blas1": Source("blas1.cu", ("dot_partial<{T}>", "dot_final<{T}>", "dot_accurate<{T}>",
                                 "axpy<{T}>", "xpay<{T}>")),
    # the set-up of a solve: a user's CSR checked in one pass (int or int64 indices), and the
    # true residual's norm
    "check": Source("check.cu", ("csr_check<{T}, int>", "csr_check<{T}, long long>",
                                 "resid_partial<{T}>", "fingerprint", "count_true",
                                 "any_of<{T}>", "max_abs<{T}>")),
    "cg": Source("cg.cu", ("cg_start<{T}>", "cg_alpha<{T}>", "cg_beta<{T}>")),
    # smoothed-aggregation AMG (dpsolve/precond/amg), amg.cu in three modules by the dtype each
    # part runs in (amg_source routes a kernel): the set-up's kernels (the working dtype, and the
    # power steps' wide one) ...
    "amg": Source("amg.cu", ("mis_init<{T}>", "mis2_max<{T}>", "mis2_decide<{T}>",
                             "mis2_max_decide<{T}>",
                             "agg_join<{T}>", "agg_flags<{T}>", "agg_number<{T}>",
                             "agg_root_order<{T}>", "csr_scale_rows<{T}>",
                             "pattern_asymmetry<{T}>", "smooth_tentative<{T}>",
                             "power_step_ell<{T}>", "diag_check<{T}>",
                             "power_start<{T}>", "transpose_count<{T}>",
                             "transpose_fill<{T}>", "transpose_rank<{T}>")
                  + tuple(f"power_step<{{T}}, {w}>" for w in CSR_VECTOR_WIDTHS)),
    # ... the V-cycle's (the cycle's dtype: single precision by default) and its preparation's
    # (SELL copies, float16 rounding, 16-bit offsets; the smoothed restriction's subtraction and
    # the Hermitian test, which run on the cycle's copies); the SELL kernels' NARROW: their column
    # indices as 16-bit offsets (device.narrow), int ones in the module amg_wide ...
    "amg_vc": Source("amg.cu", ("sell_order<{T}>", "sell_widths<{T}>", "sell_fill<{T}>",
                                "half_round<{T}>", "narrow_index<{T}>", "narrow_ell<{T}>",
                                "vc_dense<{T}>", "vc_restrict_block<{T}>", "vc_scale<{T}>",
                                "subtract_scaled<{T}>", "hermitian_misses<{T}>")
                     + _vc_variants(low=False)
                     + tuple(f"{k}<{{T}}, {w}>" for k in ("vc_residual", "vc_jacobi", "vc_cheb",
                                                          "vc_prolong", "vc_presmooth_residual",
                                                          "vc_restrict_scale")
                             for w in CSR_VECTOR_WIDTHS)),
    # ... and the kernels of a lowered cycle's finest level that read and write the working
    # dtype's vectors (T: that dtype; the casts, and the *_low kernels that fuse them)
    "amg_vc_low": Source("amg.cu", ("vc_to_single<{T}>", "vc_from_single<{T}>")
                         + _vc_variants(low=True)
                         + tuple(f"{k}<{{T}}, {w}>" for k in ("vc_prolong_low", "vc_restrict_low")
                                 for w in CSR_VECTOR_WIDTHS)),
    # the SELL kernels over int column indices (a slice spanning more than 65,534 columns, or
    # device.NARROW_INDICES off): a module of their own, compiled at the first such hierarchy, so
    # that the common case compiles no more kernels than before
    "amg_wide": Source("amg.cu", AMG_WIDE),
    # a small level's power steps in one cooperative launch (amg.cu's power_iterate: grid.sync)
    "amg_power": Source("amg.cu", tuple(f"power_iterate<{{T}}, {w}>" for w in CSR_VECTOR_WIDTHS),
                        cooperative=True, lazy=True),
    # the AMG set-up's sparse products (dpsolve/precond/amg/device.py: spgemm)
    "spgemm": Source("spgemm.cu", ("spgemm_bound<{T}>", "spgemm_rows<{T}, 0>",
                                   "spgemm_rows<{T}, 1>", "spgemm_dense_shared<{T}, 0>",
                                   "spgemm_dense_shared<{T}, 1>", "spgemm_pattern<{T}>",
                                   "spgemm_pattern_dense<{T}>", "spgemm_rows_small<{T}, 0>",
                                   "spgemm_rows_small<{T}, 1>", "spgemm_pattern_small<{T}>")),
    # batches of small systems of one pattern, a block per system (dpsolve/batch/device.py);
    # lazy: a call uses three of its 28 kernels, and all 28 took nvcc 16 s in complex64 (8.8 s
    # in float64) against 0.7-1.2 s for one
    "batch": Source("batch.cu", ("batch_cg<{T}>", "batch_bicgstab<{T}>", "batch_a_checks<{T}>",
                                 "batch_cg_redo<{T}>")
                   + tuple(f"batch_cg_rows<{{T}}, {nz}, {r}, {j}>" for nz, r in BATCH_ROWS
                           for j in ("false", "true"))
                   + tuple(f"batch_cg_rows<{{T}}, {nz}, {r}, {j}, true{f}>"
                           for nz, r in BATCH_DIAGONALS for j in ("false", "true")
                           for f in ("", ", true")), lazy=True),
    # CG on k right-hand sides at once, G lanes a row (dpsolve/_block_fused.py)
    "block": Source("block.cu", tuple(f"{k}<{{T}}, {g}>" for k in BLOCK_VECTOR_KERNELS
                                      for g in BLOCK_LANES)
                    + tuple(f"{k}<{{T}}, {g}, {s}>" for k in BLOCK_SPMM_KERNELS
                            for g in BLOCK_LANES for s in ("false", "true"))
                    + tuple(f"{k}<{{T}}>" for k in BLOCK_SCALAR_KERNELS)),
    # the stream face of a pointwise preconditioner (dpsolve/precond)
    "precond": Source("precond.cu", ("pointwise_apply<{T}>", "pointwise_apply_adjoint<{T}>",
                                     "inverse_diagonal<{T}>")),
    "cg_merge": Source("cg_merge.cu", ("cg_merge_alpha<{T}>", "cg_update_dot<{T}>",
                                       "cg_merge_beta<{T}>")
                       + tuple(f"cg_spmv_dot<{{T}}, {w}>" for w in FUSED_CODES)),
    "cg_dynamic": Source("cg_dynamic.cu", tuple(f"cg_dyn_start<{{T}}, {w}>"
                                               for w in DYNAMIC_CODES), rdc=True, lazy=True),
    "bicg_dynamic": Source("bicg_dynamic.cu", tuple(f"bicg_dyn_start<{{T}}, {w}>"
                                                   for w in DYNAMIC_CODES), rdc=True, lazy=True),
    "bicgstab_dynamic": Source("bicgstab_dynamic.cu",
                               tuple(f"bicgstab_dyn_start<{{T}}, {w}>"
                                     for w in DYNAMIC_CODES), rdc=True, lazy=True),
    # BiCG / BiCGStab of the host-driven variants: `cuda` (krylov.cu) and `merge` (*_merge.cu)
    "krylov": Source("krylov.cu", ("bi_axpy<{T}>", "bi_xpay<{T}>",
                                   "bicgstab_p<{T}>", "nrm2_final<{T}>", "krylov_start<{T}>",
                                   "bicg_beta<{T}>", "bicg_alpha<{T}>", "bicgstab_beta<{T}>",
                                   "bicgstab_alpha<{T}>", "bicgstab_snorm<{T}>",
                                   "bicgstab_omega<{T}>")),
    "bicg_merge": Source("bicg_merge.cu", ("bicg_merge_p<{T}>", "bicg_merge_alpha<{T}>",
                                           "bicg_merge_update<{T}>", "bicg_merge_rho<{T}>")
                         + tuple(f"bicg_spmv2_dot<{{T}}, {w}>" for w in FUSED_CODES)
                         + tuple(f"bicg_spmv2_vector<{{T}}, {w}>" for w in CSR_VECTOR_WIDTHS)),
    "bicgstab_merge": Source("bicgstab_merge.cu",
                             ("bicgstab_merge_p<{T}>", "bicgstab_merge_s<{T}>",
                              "bicgstab_dot2_partial<{T}>", "bicgstab_merge_omega<{T}>",
                              "bicgstab_merge_r<{T}>", "bicgstab_merge_rho<{T}>")
                             + tuple(f"bicgstab_spmv_dot<{{T}}, {w}>" for w in FUSED_CODES)
                             + tuple(f"bicgstab_spmv_dot2<{{T}}, {w}>" for w in FUSED_CODES)),
    # the single-reduction CG (dpsolve/methods/cg1/gpu.py): one all-reduce per iteration
    "cg1": Source("cg1.cu", ("cg1_update<{T}>", "cg1_finish<{T}>", "cg1_start<{T}>",
                             "cg1_step<{T}>")),
    # distributed SpMV around the local product (dpsolve/distributed/gpu.py)
    "halo": Source("halo.cu", ("halo_pack<{T}>", "halo_add<{T}>")),
    # variant "graph": the loop control of the conditional-WHILE graph (rdc:
    # cudaGraphSetConditional)
    "graph": Source("graph.cu", ("graph_head<{T}>", "graph_step<{T}>"), rdc=True),
    # variant "persistent": one cooperative kernel per solve (rdc: it shares dynamic.cuh)
    "cg_persistent": Source("cg_persistent.cu", tuple(f"cg_persistent<{{T}}, {w}>"
                                                     for w in DYNAMIC_CODES),
                            rdc=True, cooperative=True, lazy=True),
    # the prepared call's one-launch CG (dpsolve/_fast.py): the same file, its flags compiled in
    "cg_persistent_fast": Source("cg_persistent.cu", tuple(f"cg_persistent_fast<{{T}}, {w}>"
                                                          for w in DYNAMIC_CODES),
                                 rdc=True, cooperative=True, lazy=True),
    # its one-block CG for small systems (ops.cta_plan): <T, NZ, R, FAST>, no grid.sync (rdc:
    # dynamic.cuh calls the device runtime)
    "cg_persistent_cta": Source("cg_persistent.cu", tuple(
        f"cg_persistent_cta<{{T}}, {nz}, {r}, {fast}>" for nz, r in CTA_SHAPES
        for fast in ("false", "true")), rdc=True, lazy=True),
    "bicg_persistent": Source("bicg_persistent.cu", tuple(f"bicg_persistent<{{T}}, {w}>"
                                                         for w in DYNAMIC_CODES),
                              rdc=True, cooperative=True, lazy=True),
    "bicgstab_persistent": Source("bicgstab_persistent.cu",
                                  tuple(f"bicgstab_persistent<{{T}}, {w}>"
                                        for w in DYNAMIC_CODES),
                                  rdc=True, cooperative=True, lazy=True),
}


_AMG_ROUTE = {e: name for name, src in SOURCES.items() if src.file == "amg.cu"
              for e in src.expressions}


def amg_source(expression: str) -> str:
    """The source (module) of amg.cu that holds ``expression`` (with ``{T}``)."""
    try:
        return _AMG_ROUTE[expression]
    except KeyError:
        raise ValueError(f"{expression} is not one of amg.cu's registered kernels") from None


def ctype(dtype) -> str:
    try:
        return CTYPES[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"no CUDA kernels for dtype {np.dtype(dtype)}; "
                        f"supported: {', '.join(str(d) for d in CTYPES)}") from None


def options(rdc: bool = False) -> tuple:
    return OPTIONS + (("-rdc=true",) if rdc else ())


@functools.lru_cache(maxsize=None)
def headers_digest() -> str:
    """A hash of every header under include/: CuPy's on-disk kernel cache is keyed by the source
    text and the options, not by what the source includes, so the text carries this hash and a
    changed header can never bring back a module compiled against the old one."""
    h = hashlib.sha256()
    for p in sorted(INCLUDE_DIR.rglob("*.cuh")):
        h.update(p.relative_to(INCLUDE_DIR).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def source_text(name: str) -> str:
    """The exact text handed to NVRTC for source ``name``."""
    path = CUDA_DIR / SOURCES[name].file
    return f'// dpsolve headers {headers_digest()}\n#line 1 "{path}"\n' + path.read_text()


def expressions(name: str, dtype) -> list:
    t = ctype(dtype)
    return [e.format(T=t) for e in SOURCES[name].expressions]


def nvcc_command(name: str, out_dir: Path, arch: str = "sm_90") -> tuple[list, Path]:
    """(argv, translation unit) compiling ``name`` with nvcc as NVRTC compiles it at run time.

    The translation unit is the loader's source text plus one explicit instantiation per name
    expression and dtype (what NVRTC's name expressions do), so template bodies are checked too.
    """
    src = SOURCES[name]
    lines = [source_text(name), "\n// instantiations, as NVRTC name expressions make them\n"]
    k = 0
    for dt in CTYPES:
        for expr in expressions(name, dt):
            lines.append(f"static void* const dps_instance_{k} = (void*)&{expr};\n")
            k += 1
    tu = Path(out_dir) / f"{name}_check.cu"
    tu.write_text("".join(lines))
    argv = ["nvcc", f"-arch={arch}", *options(src.rdc), "-c", str(tu),
            "-o", str(tu.with_suffix(".o"))]
    return argv, tu


@functools.lru_cache(maxsize=None)
def _module(device_id: int, name: str, dtype_str: str, rdc: bool, defines: tuple = (),
            only: str | None = None):
    """Source ``name`` compiled for one dtype: every name expression, or ``only`` that one
    (a lazy source's module of one kernel)."""
    import cupy
    src = SOURCES[name]
    exprs = [only] if only is not None else expressions(name, dtype_str)
    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(code=source_text(name), options=options(rdc or src.rdc) + defines,
                             name_expressions=exprs, backend="nvrtc",
                             enable_cooperative_groups=src.cooperative)
        try:
            mod.compile()
        except cupy.cuda.compiler.CompileException as e:
            raise KernelCompileError(f"NVRTC failed to compile {CUDA_DIR / src.file} "
                                     f"for {dtype_str}:\n{e}") from None
    return mod


_KERNELS: dict = {}
_COMPILED: set = set()          # _module's keys compiled (or loaded from CuPy's cache) here
_PENDING: dict = {}             # _module's keys compiling in the pool now -> their Futures
_POOL_LOCK = threading.Lock()
_POOL: list = []                # [(threads, the pool of compile threads)], made at its first use
COMPILE_THREADS = 8             # the most modules compiling at once (NVRTC runs without the GIL)


def _module_key(dev: int, name: str, dtype, rdc: bool = False, expression: str | None = None):
    """``_module``'s arguments for source ``name`` at ``dtype`` (``expression``, with ``{T}``,
    names the kernel of a lazy source's one-kernel module)."""
    dt = np.dtype(dtype)
    src = SOURCES[name]
    only = None
    if src.lazy:
        if expression is None:
            raise ValueError(f"{name} is lazy: name the kernel to compile")
        only = expression.format(T=ctype(dt))
        if only not in expressions(name, dt):
            raise ValueError(f"{only} is not one of {src.file}'s registered kernels")
    return (dev, name, dt.str, rdc, (), only)


def _spec_keys(specs) -> tuple[list, list]:
    """The module keys of ``specs`` (each (name, dtype[, expression])) on the current device,
    each once: (those to compile, those compiled here already)."""
    import cupy
    dev = cupy.cuda.runtime.getDevice()
    todo, done = [], []
    for spec in specs:
        key = _module_key(dev, *spec[:2], expression=spec[2] if len(spec) > 2 else None)
        if key not in todo and key not in done:
            (done if key in _COMPILED else todo).append(key)
    return todo, done


def _submit(key):
    """The Future of module ``key`` compiling in the pool's threads: one per module while it
    compiles, so a module named twice (or fetched by ``get_kernel`` meanwhile) compiles once."""
    import concurrent.futures
    with _POOL_LOCK:
        job = _PENDING.get(key)
        if job is None:
            if not _POOL or _POOL[0][0] != COMPILE_THREADS:   # made anew at a new size (warm's)
                if _POOL:
                    _POOL[0][1].shutdown(wait=False)         # its compiles still finish
                _POOL[:] = [(COMPILE_THREADS, concurrent.futures.ThreadPoolExecutor(
                    COMPILE_THREADS, thread_name_prefix="dpsolve-nvrtc"))]
            job = _PENDING[key] = _POOL[0][1].submit(_build, key)
    return job


def compile_all(specs, report=None) -> None:
    """Compile the modules a path is about to use side by side, before its first kernel: each
    spec (name, dtype[, expression]) as ``get_kernel`` would compile it (``expression`` names
    the kernel of a lazy source). NVRTC compiles a module on one CPU thread and CuPy releases
    the GIL around it, so k modules wait for the slowest instead of their sum (a first
    ``M="amg"`` call compiled 9 modules one after another, 19-21 s on the H200 host). Modules
    already here (or in CuPy's disk cache, then only loaded) cost a set lookup. A compile error
    is raised as ``get_kernel`` raises it, or, with ``report``, handed to it: ``report(key,
    error)`` is called in the caller's thread once for each module the specs name, as it is
    done (error None where it compiled or was here; key: ``_module``'s arguments, its name and
    dtype second and third). Compiles at once slow each other (amg.cu split into four modules,
    tried: the first ``M="amg"`` call 20.1 -> 24.2 s, each part nearly the whole one's time)."""
    import concurrent.futures
    keys, here = _spec_keys(specs)
    if report is not None:
        for key in here:
            report(key, None)
    elif len(keys) < 2:
        for key in keys:
            _compiled(*key)
        return
    jobs = {_submit(key): key for key in keys}
    if report is None:
        for job in jobs:
            job.result()
        return
    for job in concurrent.futures.as_completed(jobs):
        report(jobs[job], job.exception())


def prefetch(specs) -> list:
    """Start compiling the modules ``specs`` name (``compile_all``'s) in the pool's threads and
    return at once (their Futures): the kernels a path fetches later find their modules compiled
    or compiling (``get_kernel`` waits for that module alone). A compile error is raised where a
    kernel of that module is fetched, not here; a module nothing fetches finishes in the
    background."""
    return [_submit(key) for key in _spec_keys(specs)[0]]


@contextlib.contextmanager
def compiling(specs):
    """Compile the modules ``specs`` name (``compile_all``'s) in the pool's threads while the
    block runs, and wait for them at its end: a path's first call overlaps its later kernels'
    compiles with its first steps (the AMG set-up's CuPy kernels, compiled on the caller's
    thread). A kernel the block fetches from a module still compiling waits for that module
    alone. A compile error is raised at the block's end; where the block itself raises, its
    error is the one raised, at once, and the compiles go on (their modules kept for the next
    call)."""
    jobs = prefetch(specs)
    yield
    for job in jobs:
        job.result()


def _build(key):
    """Module ``key`` compiled (or loaded from CuPy's cache) and recorded as here."""
    try:
        mod = _module(*key)
        _COMPILED.add(key)
        return mod
    finally:
        with _POOL_LOCK:
            _PENDING.pop(key, None)


def _compiled(*key):
    """Module ``key``: waiting for it where the pool compiles it now, else compiled here."""
    job = _PENDING.get(key)
    return _build(key) if job is None else job.result()


def get_kernel(name: str, expression: str, dtype, rdc: bool = False, defines: tuple = ()):
    """The compiled kernel for ``expression`` (with ``{T}``) of source ``name`` at ``dtype``.

    ``defines`` (``-DNAME=value`` options) build a separate module: the benchmarks' way to compare
    compile-time variants (e.g. spmv.cuh's DPS_SPMV_LOADS) side by side; the package uses none.
    Memoised per device: after the first call this is one dictionary lookup.
    """
    if defines and any(not (isinstance(d, str) and d.startswith("-D")) for d in defines):
        raise ValueError(f"defines must be -DNAME[=value] options, got {defines!r}")
    import cupy
    dev = cupy.cuda.runtime.getDevice()
    key = (dev, name, expression, dtype, rdc, defines)
    k = _KERNELS.get(key)
    if k is None:
        dt = np.dtype(dtype)
        mod = _module_key(dev, name, dt, rdc, expression)    # a lazy source's kernel checked
        k = _compiled(*mod[:4], tuple(defines), mod[5]).get_function(expression.format(
            T=ctype(dt)))
        k = _KERNELS[key] = pdl.wrap(k, name, SOURCES[name].file, expression)   # PDL: pdl.py
    return k
