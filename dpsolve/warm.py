"""``dpsolve warm``: every kernel compiled up front, side by side, before the first solve.

dpsolve's kernels are compiled at run time by NVRTC and kept in CuPy's kernel cache, so each
kernel family costs its compile once per machine and dpsolve version, at its first use (a first
``M="amg"`` call waits 19-25 s for it on the H200 machines). ``warm`` pays all of it at once, when
it suits the user (an image build, a job's set-up), in two steps:

1. every module of ``dpsolve/cuda`` (``_loader.SOURCES``) for each dtype asked, a lazy source's
   every kernel as its own module, compiled by ``_loader.compile_all`` in a pool of threads (NVRTC
   runs without the GIL);
2. a few small solves for each dtype (CG and BiCGStab on every available device variant, Jacobi,
   AMG and Chebyshev, a block of right-hand sides and a batch), which compile CuPy's own kernels
   that the set-ups and the front end use (elementwise kernels, one per operation and dtype).

Modules already in the cache are only loaded. Progress is printed a line a tenth of the modules,
and a line a dtype's solves.
"""
from __future__ import annotations

import time

import numpy as np

DEFAULT_DTYPES = ("float64", "float32")


def module_specs(dtypes) -> list:
    """(name, dtype[, expression]) for every module of every source at each dtype: a lazy
    source's kernels one by one (``_loader.compile_all``'s specs)."""
    from .cuda import _loader
    specs = []
    for dt in dtypes:
        for name, src in _loader.SOURCES.items():
            if src.lazy:
                specs.extend((name, np.dtype(dt), e) for e in src.expressions)
            else:
                specs.append((name, np.dtype(dt)))
    return specs


def _samples(dtype):
    """(label, call) of the small solves for ``dtype``: each a few iterations, on the GPU."""
    import cupy
    import cupyx.scipy.sparse as csp
    import scipy.sparse as sp

    import dpsolve
    from dpsolve import batch
    from dpsolve.backends import VARIANT_NAMES, get_backend, variant_info
    from dpsolve.matrices import laplace_2d

    dt = np.dtype(dtype)
    small = csp.csr_matrix(sp.csr_matrix(laplace_2d(16)).astype(dt))
    large = csp.csr_matrix(sp.csr_matrix(laplace_2d(64)).astype(dt))
    b_small = cupy.ones(small.shape[0], dt)
    b_large = cupy.ones(large.shape[0], dt)
    out = []
    for v in [v for v in VARIANT_NAMES[1:] if variant_info(v).available]:
        for method in [m for m in ("cg", "bicgstab") if m in get_backend(v).methods]:
            for M in (None, "jacobi"):
                out.append((f"{method} {v} M={M}", lambda m=method, v=v, M=M: getattr(
                    dpsolve, m)(small, b_small, variant=v, M=M, maxiter=5)))
    if dt.kind == "f":
        for M in ("amg", "chebyshev"):
            out.append((f"cg auto M={M}", lambda M=M: dpsolve.cg(
                large, b_large, variant="auto", M=M, maxiter=5)))
    out.append(("cg, a block of 4", lambda: dpsolve.cg(
        large, cupy.ones((large.shape[0], 4), dt), maxiter=5)))
    A8 = sp.csr_array(laplace_2d(8))
    A8.sort_indices()
    out.append(("batch cg", lambda: batch.cg(
        batch.csr(cupy.tile(cupy.asarray(A8.data, dt), (4, 1)), A8.indices, A8.indptr),
        cupy.ones((4, A8.shape[0]), dt), maxiter=5)))
    return out


def warm(dtypes=DEFAULT_DTYPES, threads: int | None = None, samples: bool = True,
         say=print) -> int:
    """Compile every module (then, with ``samples``, run the small solves) for ``dtypes``;
    returns the number of steps that failed (each named in a line through ``say``)."""
    from ._device import status
    from .cuda import _loader
    dev = status()
    if not dev.ok:
        raise RuntimeError(f"no usable CUDA device: {dev.reason}")
    dtypes = [np.dtype(d) for d in dtypes]
    specs = module_specs(dtypes)
    kept = _loader.COMPILE_THREADS
    if threads is not None:
        _loader.COMPILE_THREADS = threads
    try:
        return _warm(_loader, dtypes, specs, samples, say)
    finally:
        _loader.COMPILE_THREADS = kept             # later first calls: the loader's own


def _warm(_loader, dtypes, specs, samples, say) -> int:
    t0 = time.perf_counter()
    say(f"compiling {len(specs)} modules ({', '.join(d.name for d in dtypes)}) on "
        f"{_loader.COMPILE_THREADS} threads ...")
    failed, done = 0, 0
    step = max(1, len(specs) // 10)

    def report(key, error):                            # in this thread, as each module is done
        nonlocal failed, done
        done += 1
        if error is not None:                          # a source that does not compile here
            failed += 1
            say(f"  FAILED: {key[1]} {np.dtype(key[2]).name}: {error}")
        if done % step == 0 or done == len(specs):     # a line a tenth
            say(f"  {done}/{len(specs)} modules, {time.perf_counter() - t0:.1f} s")
    _loader.compile_all(specs, report=report)
    if samples:
        for dt in dtypes:
            runs = _samples(dt)
            t1 = time.perf_counter()
            for label, call in runs:
                try:
                    call()
                except Exception as e:
                    failed += 1
                    say(f"  FAILED: {dt.name} {label}: {type(e).__name__}: {e}")
            say(f"  {len(runs)} small solves in {dt.name}, {time.perf_counter() - t1:.1f} s")
    say(f"warm: {time.perf_counter() - t0:.1f} s, {failed} step(s) failed")
    return failed
