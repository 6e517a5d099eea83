"""The front end shared by cg, bicg and bicgstab: SciPy's semantics, then dispatch to a back end.

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
from ._device import status as device_status
from ._errors import BackendUnavailableError, DpsolveWarning
from ._system import make_system, vector_norm
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
                      "host reference solver on the CPU", DpsolveWarning, stacklevel=4)
    return get_backend("host")


def solve(method, A, b, x0, *, rtol, atol, maxiter, M, callback, variant, sync, format,
          full_output):
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

    system = make_system(method, A, b, x0, M)
    bnrm2 = vector_norm(system.b)
    tol = _get_atol_rtol(method, bnrm2, atol, rtol)
    # "auto": the measured rule (dpsolve/autotune.py) picks variant and format together; where it
    # has nothing to say, the fixed preference order and the row-statistics format rule do
    picked = (autotune.choose(system, variant, format, callback)
              if "auto" in (variant, format) and variant != "host" else None)
    if picked is not None:
        backend, fmt = picked
    else:
        backend = _resolve_variant(variant, system, callback)
        fmt = (choose_format(system.csr, format, getattr(backend, "formats", FORMATS))
               if (backend.uses_format and system.csr is not None) else None)
    report = SolveReport(variant=backend.name, format=fmt, sync=sync, method=method,
                         dtype=str(system.dtype), n=system.n, nnz=system.nnz, tolerance=tol)

    if bnrm2 == 0:      # SciPy: a zero right-hand side returns zeros at once
        if system.out_cupy:
            import cupy
            x = cupy.zeros(system.n, dtype=system.dtype)
        else:
            x = np.zeros(system.n, dtype=system.dtype)
        report.iterations, report.info, report.converged, report.residual_norm = 0, 0, True, 0.0
        return (x, 0, report) if full_output else (x, 0)

    if maxiter is None:
        maxiter = 10 * system.n

    t0 = time.perf_counter()
    state = backend.prepare(system, fmt)
    x = backend.initial_x(system)
    total, restarts, stats = 0, 0, {}
    while True:
        run = backend.run(state, system, x, atol=tol, maxiter=maxiter - total,
                          callback=callback, sync=sync)
        x = run.x
        total += run.iterations
        _accumulate(stats, run.stats)
        rnorm = backend.residual_norm(state, system, x)
        if run.info != 0:
            info = run.info if run.info < 0 else total
            break
        # Converged on the recurrence. A run of 0 iterations tested a freshly computed residual.
        if rnorm <= tol or run.iterations == 0:
            info = 0
            break
        if total >= maxiter or restarts >= MAX_RESTARTS:
            info = total
            break
        restarts += 1
    report.iterations, report.info, report.converged = total, info, info == 0
    report.residual_norm, report.restarts = rnorm, restarts
    for k, v in stats.items():
        setattr(report, k, v)
    report.wall_time = report.wall_time if report.wall_time is not None else time.perf_counter() - t0
    x = backend.to_output(x, system)
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
