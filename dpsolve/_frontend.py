"""The front end shared by cg, bicg and bicgstab: SciPy's semantics, then dispatch to a back end.

A call is set-up (checks, conversion, transfers, the back end's state) then solve; the report
gives both (``setup_time``, ``solve_time``; ``wall_time`` is the whole call). On a GPU the set-up
runs as kernels with one host wait (``dpsolve._system.device_system``); a prepared system
(``dpsolve.prepare``, ``dpsolve/_prepared.py``) pays it once for many solves.

Convergence (SciPy's): the iteration stops when ||r|| < max(rtol*||b||, atol) on the recurrence
residual. dpsolve then recomputes the true residual ||b - A x|| once; if it misses the tolerance
(the recurrence drifted, as it does in float32), the solve restarts from the true residual with
the iterations left, and reports non-convergence (info = iterations run) if that fails too.
"""
from __future__ import annotations

import numbers
import time
import warnings

import numpy as np

from . import autotune
from . import methods as method_table
from ._device import status as device_status
from ._errors import BackendUnavailableError, DpsolveWarning
from ._system import device_system, make_system, vector_norm
from .backends import AUTO_PREFERENCE, VARIANT_NAMES, get_backend, variant_info
from .formats import FORMATS, choose_format
from .report import SolveReport

SYNC_MODES = ("polling", "blocking")
MAX_RESTARTS = 8
_warned_fallback = False


def _get_atol_rtol(name, b_norm, atol, rtol):
    """SciPy's tolerance rule and message: atol = max(atol, rtol * ||b||)."""
    if atol == "legacy" or atol is None or not isinstance(atol, numbers.Real) or atol < 0 \
            or np.isnan(atol):
        raise ValueError(f"'dpsolve.{name}' called with invalid `atol`={atol}; "
                         "if set, `atol` must be a real, non-negative number.")
    if not isinstance(rtol, numbers.Real) or rtol < 0 or np.isnan(rtol):
        raise ValueError(f"'dpsolve.{name}' called with invalid `rtol`={rtol}; "
                         "`rtol` must be a real, non-negative number.")
    return max(float(atol), float(rtol) * float(b_norm))


def _check_choice(kind, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"unknown {kind} {value!r}; expected one of {', '.join(allowed)}")


def _resolve_variant(variant, system, callback=None):
    """The back end to run. Explicit names must be available; "auto" falls back to the host."""
    global _warned_fallback
    if variant != "auto":
        info = variant_info(variant)
        if not info.available:
            raise BackendUnavailableError(variant, info.reason)
        return get_backend(variant)
    dev = device_status()
    if dev.ok:
        # the first preferred variant that takes the system (operators: a host-driven one)
        for name in AUTO_PREFERENCE:
            backend = get_backend(name)
            if backend is None or (callback is not None and backend.device_driven):
                continue
            if backend.availability()[0] and backend.supports(system):
                return backend
    if not dev.ok and not _warned_fallback:
        _warned_fallback = True
        warnings.warn(f"dpsolve: no usable CUDA device ({dev.reason}); variant='auto' runs the "
                      "host reference solver on the CPU", DpsolveWarning, stacklevel=6)
    return get_backend("host")


def check_options(variant, sync, format, maxiter=None, callback=None) -> None:
    _check_choice("variant", variant, ("auto",) + VARIANT_NAMES)
    _check_choice("sync", sync, SYNC_MODES)
    _check_choice("format", format, ("auto",) + FORMATS)
    if maxiter is not None:
        if isinstance(maxiter, bool) or not isinstance(maxiter, numbers.Integral):
            raise TypeError(f"maxiter must be an integer or None, got {maxiter!r}")
        if maxiter < 1:
            raise ValueError(f"maxiter must be a positive integer, got {maxiter}")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable, got {type(callback).__name__}")


def on_device(variant) -> bool:
    """Whether a call with this ``variant`` sets up on the GPU (its checks run as kernels). An
    unavailable variant takes the host path, so that input errors come before its own."""
    if variant == "host" or not device_status().ok:
        return False
    return variant == "auto" or variant_info(variant).available


def pick(system, variant, format, callback):
    """(backend, format) for this system: the measured rule for "auto", else the fixed order."""
    picked = (autotune.choose(system, variant, format, callback)
              if "auto" in (variant, format) and variant != "host" else None)
    if picked is not None:
        return picked
    backend = _resolve_variant(variant, system, callback)
    fmt = (choose_format(system.csr, format, getattr(backend, "formats", FORMATS))
           if (backend.uses_format and system.csr is not None) else None)
    return backend, fmt


def solve(method, A, b, x0, *, rtol, atol, maxiter, M, callback, variant, sync, format,
          full_output, energy=False, options=None):
    """The one-shot call: set up (on the GPU where one runs), solve once, and let go.
    ``options``: the method's own parameters, checked (dpsolve.methods.Method.check_options)."""
    t0, c0 = time.perf_counter(), time.process_time()
    check_options(variant, sync, format, maxiter, callback)
    options = method_table.get(method).check_options(options or {})
    if on_device(variant):
        system, bnrm2 = device_system(method, A, b, x0, M, sync=sync)
    else:
        system = make_system(method, A, b, x0, M)
        bnrm2 = vector_norm(system.b)
    system.options = options
    tol = _get_atol_rtol(method, bnrm2, atol, rtol)
    backend, fmt = pick(system, variant, format, callback)
    report = SolveReport(variant=backend.name, format=fmt, sync=sync, method=method,
                         dtype=str(system.dtype), n=system.n, nnz=system.nnz, tolerance=tol)
    if bnrm2 == 0:
        return zero_solution(system, report, t0, c0, full_output)
    state = prepared(backend, system, fmt, sync)
    return iterate(backend, state, system, tol, maxiter, callback, sync, energy, report, t0, c0,
                   full_output)


def prepared(backend, system, fmt, sync, wait=False, **kw):
    """The back end's state for this system. ``wait``: wait (as ``sync`` says) for its device
    work. The one-shot call does not: its set-up's device work (allocations' memsets, a format's
    layout) is queued ahead of the solve on the same stream, and a host wait between them would
    cost a blocking-sync wake-up per call, so ``setup_time`` is the host's part of the set-up
    and ``solve_time`` includes what of it the GPU had still queued (``gpu_time`` is the
    iterations' own)."""
    state = backend.prepare(system, fmt, **kw)
    stream = getattr(state, "stream", None)
    if wait and stream is not None:
        from ._setup import wait as wait_stream
        wait_stream(stream, sync)
    return state


def zero_solution(system, report, t0, c0, full_output):
    """SciPy: a zero right-hand side returns zeros at once."""
    if system.out_cupy:
        import cupy
        x = cupy.zeros(system.n, dtype=system.dtype)
    else:
        x = np.zeros(system.n, dtype=system.dtype)
    report.iterations, report.info, report.converged, report.residual_norm = 0, 0, True, 0.0
    report.setup_time = report.wall_time = time.perf_counter() - t0
    report.solve_time = 0.0
    report.host_cpu_time = time.process_time() - c0
    return (x, 0, report) if full_output else (x, 0)


def restarted(run_once, residual, tol, maxiter):
    """dpsolve's restarts from the true residual, for every variant (single-GPU and distributed):
    ``run_once(budget)`` runs SciPy's loop for at most ``budget`` iterations from the current x
    and returns (info, iterations); ``residual()`` is then the true ||b - A x||. While the
    recurrence says converged and the true residual does not, run again (MAX_RESTARTS at most,
    within maxiter). Returns (info, iterations, true residual norm, restarts)."""
    total = restarts = 0
    while True:
        info, its = run_once(maxiter - total)
        total += its
        rnorm = residual()
        if info != 0:
            return (info if info < 0 else total), total, rnorm, restarts
        # converged on the recurrence; a run of 0 iterations tested a freshly computed residual
        if rnorm <= tol or its == 0:
            return 0, total, rnorm, restarts
        if total >= maxiter or restarts >= MAX_RESTARTS:
            return total, total, rnorm, restarts
        restarts += 1


def iterate(backend, state, system, tol, maxiter, callback, sync, energy, report, t0, c0,
            full_output):
    """Solve with the prepared ``state``: SciPy's loop, then restarts from the true residual
    while the recurrence says converged and the true residual does not. ``t0``/``c0``: the
    call's start (wall and process CPU), so the report splits set-up from solve."""
    if maxiter is None:
        maxiter = 10 * system.n
    backend.load(state, system)
    x = backend.initial_x(system)
    t_solve = time.perf_counter()
    report.setup_time = t_solve - t0
    stats, last = {}, [None]

    def run_once(budget):
        run = last[0] = backend.run(state, system, last[0].x if last[0] else x, atol=tol,
                                    maxiter=budget, callback=callback, sync=sync, energy=energy)
        _accumulate(stats, run.stats)
        return run.info, run.iterations

    def residual():
        run = last[0]
        return (run.residual if run.residual is not None
                else backend.residual_norm(state, system, run.x))

    info, total, rnorm, restarts = restarted(run_once, residual, tol, maxiter)
    x = last[0].x
    report.iterations, report.info, report.converged = total, info, info == 0
    report.residual_norm, report.restarts = rnorm, restarts
    for k, v in stats.items():
        if k != "wall_time":
            setattr(report, k, v)
    x = backend.to_output(x, system)
    t_end = time.perf_counter()
    report.solve_time = t_end - t_solve
    report.wall_time = t_end - t0
    # the call's host CPU time: set-up, solve and output (the runs' own is inside it)
    report.host_cpu_time = time.process_time() - c0
    return (x, info, report) if full_output else (x, info)


_SUMMED = ("wall_time", "gpu_time", "gpu_energy", "host_cpu_time", "host_energy", "host_syncs",
           "host_launches", "build_time")


def _accumulate(acc, stats):
    """Merge one run's stats into the solve's: sums for costs, the last value for the rest."""
    for k, v in stats.items():
        if k in _SUMMED and k in acc:
            acc[k] = None if (v is None or acc[k] is None) else acc[k] + v
        else:
            acc[k] = v
