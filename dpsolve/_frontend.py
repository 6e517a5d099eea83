"""The front end shared by cg, bicg and bicgstab: SciPy's semantics, then dispatch to a back end.

A call is set-up (checks, conversion, transfers, the back end's state) then solve; the report
gives both (``setup_time``, ``solve_time``; ``wall_time`` is the whole call). On a GPU the set-up
runs as kernels with one host wait (``dpsolve._system.device_system``); a prepared system
(``dpsolve.prepare``, ``dpsolve/_prepared.py``) pays it once for many solves.

Convergence (SciPy's): the iteration stops when ||r|| < max(rtol*||b||, atol) on the recurrence
residual. dpsolve then recomputes the true residual ||b - A x|| once; if it misses the tolerance
(the recurrence drifted, as it does in float32), the solve restarts from the true residual with
the iterations left, and reports non-convergence (info = maxiter, SciPy's value) if that fails
too. The true residual decides success: info is 0 exactly when ||b - A x|| <= tol.

Range: a b whose norm would under- or overflow the working dtype's squares is solved as b / 2^e
(exactly: ``_system.scale_rhs``), and x, the callback's iterates and the residual multiplied
back; no per-iteration cost, and ||b|| == 0 means b is exactly zero. Likewise an A whose
largest value is far from 1 is solved as A / 2^f (``_system.scale_matrix``, read from the
set-up's check of A), and x multiplied by 2^-f.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import time
import warnings

import numpy as np

from . import _fast, autotune
from . import methods as method_table
from ._device import status as device_status
from ._errors import BackendUnavailableError, DpsolveWarning
from ._system import (coerce, device_system, divide_rhs, in_matrix_window, in_rhs_window,
                      in_safe_range, initial_guess_Mb, make_system, matrix_char, scale_rhs,
                      solved_x0, split_x0, sum_of_squares, times_power_of_two, x0_in_range)
from .formats.csr import _is_cupy, array_module
from .reference._util import ldexp_or_inf
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
    fmt = (choose_format(system.csr, format, getattr(backend, "formats", FORMATS),
                         adjoint=method_table.get(system.method).adjoint)
           if (backend.uses_format and system.csr is not None) else None)
    return backend, fmt


def solve(method, A, b, x0, *, rtol, atol, maxiter, M, callback, variant, sync, format,
          full_output, energy=False, options=None):
    """The one-shot call: set up (on the GPU where one runs), solve once, and let go.
    ``options``: the method's own parameters, checked (dpsolve.methods.Method.check_options).
    A CG call with a cupyx CSR A and a CuPy b takes its matrix's lane from the third call on
    (one launch, one wait: ``_fast.Lane``), the general path's state of the second."""
    key = _fast.lane_key(method, A, b, x0, M, callback, variant, sync, format, full_output,
                         energy, options)
    if key is not None:
        out = _fast.lane_solve(key, A, b, rtol, atol, maxiter)
        if out is not None:
            return out
    t0, c0 = time.perf_counter(), time.process_time()
    check_options(variant, sync, format, maxiter, callback)
    options = method_table.get(method).check_options(options or {})
    x0, x0_mb = split_x0(x0)
    if on_device(variant):
        if variant == "auto" and not _FIRST_CALL:
            _prefetch_first_call(A, b)
        system, sq = device_system(method, A, b, x0, M, sync=sync)
    else:
        system = make_system(method, A, b, x0, M)
        sq = sum_of_squares(system.b)
    system.options = options
    tol, tol_solved = tolerances(system, sq, x0_mb, method, atol, rtol)
    backend, fmt = pick(system, variant, format, callback)
    report = SolveReport(variant=backend.name, format=fmt, sync=sync, method=method,
                         dtype=str(system.dtype), n=system.n, nnz=system.nnz, tolerance=tol)
    if needs_no_iteration(system, tol_solved):
        # b = 0 needs no iteration, but a variant that cannot take this system refuses it
        # all the same: the answer to a call must not depend on b's values
        backend.refuse(system)
        return at_once(system, report, t0, c0, full_output, tol_solved)
    state = prepared(backend, system, fmt, sync)
    out = iterate(backend, state, system, tol_solved, maxiter, callback, sync, energy, report,
                  t0, c0, full_output)
    # the lane runs A as it is: its guard stops at a largest exponent outside the window (where
    # this path scales A, or A's spread forbids it), so no lane for such a matrix
    if key is not None and in_matrix_window(system.csr, system.dtype):
        _fast.adopt(key, A, b, backend, fmt, state)
    return out


_FIRST_CALL: list = []          # set by the process's first GPU call with variant "auto"


def _prefetch_first_call(A, b) -> None:
    """The modules a process's first GPU call of the default variant compiles one after another
    (the input checks, the SpMV, the vector kernels, the persistent variant's availability
    probe: 2.3 of a first call's 3.8 s on the H200 host) start compiling side by side in the
    loader's pool (``_loader.prefetch``), in the dtype the call will most likely work in. A
    wrong guess (an operator, a dtype refused later) costs a compile in the background."""
    _FIRST_CALL.append(True)
    try:
        dt = coerce(matrix_char(A), np.dtype(b.dtype).char)
    except Exception:                  # device_system names what is wrong with the input
        return
    from .cuda import _loader
    from .cuda.ops import PROBE_SPEC
    _loader.prefetch([("check", dt), ("spmv", dt), ("blas1", dt), PROBE_SPEC])


def _set_up_stream(system):
    """The context the set-up's device work runs in: dpsolve's stream where b is on the device
    (the solve's kernels follow on it), else nothing."""
    if _is_cupy(system.b):
        from ._setup import resources
        return resources().stream
    return contextlib.nullcontext()


def tolerances(system, sq, x0_mb, method, atol, rtol):
    """The end of every call's set-up: b scaled into the safe range where ||b||^2 = ``sq`` (as
    summed) is outside it (``scale_rhs``), x0 fitted to an A the set-up scaled
    (``System.ascale``), SciPy's ``x0="Mb"`` made, and the tolerance. Returns (tol,
    tol_solved): SciPy's max(atol, rtol ||b||) for the report, and the same for the system as
    solved (b / 2^scale), computed from the scaled ||b|| so that it is finite where ||b||
    itself overflows; tol_solved is None when b is exactly zero."""
    if not x0_mb and not system.ascale and in_safe_range(sq, system.dtype):   # the usual call
        system.scale = 0
        system.bnorm = math.sqrt(sq)
        tol = _get_atol_rtol(method, system.bnorm, atol, rtol)
        return tol, tol
    with _set_up_stream(system):
        x0, system.x0 = system.x0, None         # x0 * 2^(f - e) below, in one product
        bnorm = system.bnorm = scale_rhs(system, sq)
        system.x0 = solved_x0(x0, system.ascale, system.scale)
        if not x0_in_range(system.x0, x0):
            system.x0_past = x0
        if x0_mb and bnorm != 0:
            initial_guess_Mb(system)
    _get_atol_rtol(method, bnorm, atol, rtol)               # SciPy's errors for bad tolerances
    tol, tol_solved = tolerance_pair(bnorm, system.scale, atol, rtol)
    return tol, (None if bnorm == 0 else tol_solved)


def tolerance_pair(bnorm, e, atol, rtol):
    """(tol, tol_solved) of a b solved as b / 2^e whose scaled norm is ``bnorm``: SciPy's
    max(atol, rtol ||b||) at the caller's scale, from the scaled norm (finite where ||b||
    itself overflows), and at the solved scale; past the largest float either is inf, which
    any x meets (math.ldexp would raise). The single solves' and dpsolve.distributed's."""
    return (max(float(atol), ldexp_or_inf(float(rtol) * bnorm, e)),
            max(ldexp_or_inf(float(atol), -e), float(rtol) * bnorm))


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


def needs_no_iteration(system, tol_solved) -> bool:
    """Whether the call is answered by ``at_once``: b = 0 (``tolerances``' tol_solved None) or an
    x0 that the scaling carried past the largest float."""
    return tol_solved is None or system.x0_past is not None


def at_once(system, report, t0, c0, full_output, tol=None):
    """The answers that need no iteration. SciPy: a zero right-hand side returns zeros at once
    (``tolerances``: tol_solved None), whatever x0. An x0 that the scaling of b and A carried
    past the largest float (``System.x0_past``) stops at once with -10, the code of a step that
    produces a non-finite value, and x = x0, the last finite iterate, as an x0 as far from an
    unscaled solution stops at its first step; its residual in the solve's frame is not finite,
    and the report's is NaN (not computed). An infinite tolerance ``tol`` takes any x: there x0
    is the answer with info 0, as every solve with one stops at once."""
    x0 = system.x0_past
    if x0 is not None and system.bnorm:
        info, rnorm = (0 if tol == math.inf else -10), math.nan
        if system.out_cupy:
            import cupy
            x = cupy.array(x0)
        else:
            x = x0.get() if _is_cupy(x0) else np.array(x0)
    else:
        info, rnorm = 0, 0.0
        if system.out_cupy:
            import cupy
            x = cupy.zeros(system.n, dtype=system.dtype)
        else:
            x = np.zeros(system.n, dtype=system.dtype)
    report.iterations, report.info, report.converged = 0, info, info == 0
    report.residual_norm = rnorm
    report.setup_time = report.wall_time = time.perf_counter() - t0
    report.solve_time = 0.0
    report.host_cpu_time = time.process_time() - c0
    return (x, info, report) if full_output else (x, info)


def restarted(run_once, residual, tol, maxiter):
    """dpsolve's restarts from the true residual, for every variant (single-GPU and distributed):
    ``run_once(budget)`` runs SciPy's loop for at most ``budget`` iterations from the current x
    and returns (info, iterations); ``residual()`` is then the true ||b - A x||. While the
    recurrence says converged and the true residual does not, run again (MAX_RESTARTS at most,
    within maxiter). Returns (info, iterations, true residual norm, restarts).

    Success needs the true residual: info is 0 only when ``rnorm <= tol``. With ``tol == 0``
    the strict recurrence test (SciPy's ``<``) can never pass, and the loop ends by exhausting
    the precision (an exact or underflowed residual gives 0/0, a "breakdown"): there the true
    residual alone decides, 0 if it is exactly 0, else non-convergence. Otherwise SciPy's codes
    stand: a breakdown keeps its code, a run out of iterations is non-convergence. Non-
    convergence is ``maxiter``, SciPy's value, also when a run that exits at once (its freshly
    computed residual below ``tol``, the true one not) leaves nothing to restart."""
    total = restarts = 0
    while True:
        info, its = run_once(maxiter - total)
        total += its
        rnorm = residual()
        if info == 0 and rnorm <= tol:
            return 0, total, rnorm, restarts
        if info < 0 and tol == 0:
            return (0 if rnorm == 0 else maxiter), total, rnorm, restarts
        if info < 0:
            return info, total, rnorm, restarts
        if info > 0 or its == 0 or total >= maxiter or restarts >= MAX_RESTARTS:
            return maxiter, total, rnorm, restarts
        restarts += 1


def iterate(backend, state, system, tol, maxiter, callback, sync, energy, report, t0, c0,
            full_output):
    """Solve with the prepared ``state``: SciPy's loop, then restarts from the true residual
    while the recurrence says converged and the true residual does not. ``tol``: the tolerance
    of the system as solved (b / 2^system.scale); x, the callback's iterates and the reported
    residual are the caller's (times 2^scale). ``t0``/``c0``: the call's start (wall and process
    CPU), so the report splits set-up from solve. No NumPy floating-point warning escapes (a
    breakdown's 0/0 is a code, not a warning); the user's callback runs under the caller's own
    warning settings."""
    if maxiter is None:
        maxiter = 10 * system.n
    tol = fit_rhs(system, tol)
    backend.load(state, system)
    x = backend.initial_x(system)
    t_solve = time.perf_counter()
    report.setup_time = t_solve - t0
    stats, last = {}, [None]
    xscale = system.scale - system.ascale        # x as the caller wants it: x solved * 2^xscale
    callback = _caller_callback(callback, xscale)

    def run_once(budget):
        run = last[0] = backend.run(state, system, last[0].x if last[0] else x, atol=tol,
                                    maxiter=budget, callback=callback, sync=sync, energy=energy)
        _accumulate(stats, run.stats)
        return run.info, run.iterations

    def residual():
        run = last[0]
        return (run.residual if run.residual is not None
                else backend.residual_norm(state, system, run.x))

    with np.errstate(all="ignore"):
        info, total, rnorm, restarts = restarted(run_once, residual, tol, maxiter)
        x = last[0].x
        if xscale:
            info, rnorm = _unscaled_check(backend, state, system, x, xscale, info, rnorm, tol,
                                          maxiter)
        x = backend.to_output(x, system)
        if xscale:
            x = _scaled_back(x, xscale)
        if system.scale:
            rnorm = ldexp_or_inf(rnorm, system.scale)     # past the largest float: inf
    report.iterations, report.info, report.converged = total, info, info == 0
    report.residual_norm, report.restarts = rnorm, restarts
    if system.M.active:
        report.preconditioner = system.M.describe()
    for k, v in stats.items():
        if k != "wall_time":
            setattr(report, k, v)
    t_end = time.perf_counter()
    report.solve_time = t_end - t_solve
    report.wall_time = t_end - t0
    # the call's host CPU time: set-up, solve and output (the runs' own is inside it)
    report.host_cpu_time = time.process_time() - c0
    return (x, info, report) if full_output else (x, info)


FIT_MARGIN = 8


def fit_rhs(system, tol):
    """Where the bound preconditioner takes a narrower range of b than the working dtype
    (``Preconditioner.rhs_window``: AMG's float32 V-cycle of a float64 system) and ||b|| as solved
    is outside it, scale b and x0 by a power of two more (exact; x, the residual and the
    callback's iterates go back through ``system.scale`` as ``scale_rhs``'s do) and return the
    tolerance ``tol`` of the system as now solved; else ``tol``. After the state's set-up (the
    window comes from the hierarchy) and before b is loaded."""
    window = system.M.rhs_window() if system.M.active else None
    if (not system.bnorm or not math.isfinite(system.bnorm)
            or in_rhs_window(system.bnorm, window)):
        return tol
    lo, hi = window
    e = math.frexp(system.bnorm)[1]
    shift = e - (lo + FIT_MARGIN if e <= lo else hi - FIT_MARGIN)    # b / 2^shift: 8 inside
    with _set_up_stream(system):
        divide_rhs(system, shift)
    system.bnorm = math.ldexp(system.bnorm, -shift)
    return ldexp_or_inf(tol, -shift)                # a huge atol past the largest float: inf


def _scaled_back(x, scale: int):
    """x * 2^scale for the caller (exact). A CuPy x is made on dpsolve's stream, which the
    caller's current stream is then ordered after (``_setup.hand_to_caller``): no host wait,
    and the caller's next use of x sees it whole."""
    if not _is_cupy(x):
        return times_power_of_two(x, scale)
    from ._setup import hand_to_caller, resources
    res = resources()
    with res.stream:
        x = times_power_of_two(x, scale)
    hand_to_caller(res.stream, res)
    return x


def _unscaled_check(backend, state, system, x, xscale, info, rnorm, tol, maxiter):
    """(info, rnorm) of the x the caller will get, x * 2^xscale: where that rounds (entries
    below the normal range, or past the largest float), the true residual of the rounded x
    decides, not that of the x solved for. A rare path: scaled systems only, and a residual
    computed only where the multiplication back is not exact."""
    with _set_up_stream(system):
        back = times_power_of_two(times_power_of_two(x, xscale), -xscale)
        if bool(array_module(x).array_equal(back, x)):
            return info, rnorm
    rnorm = backend.residual_norm(state, system, back)
    if info == 0 and not rnorm <= tol:
        info = maxiter
    return info, rnorm


def _caller_callback(callback, scale):
    """The user's callback as the solve calls it: an iterate multiplied back to the caller's
    scale (a residual norm GMRES passes is relative: it needs nothing), under the caller's
    NumPy error settings (the solve itself ignores floating-point warnings)."""
    if callback is None:
        return None
    errstate = np.geterr()

    def caller(xk):
        if scale and getattr(xk, "ndim", 0):
            xk = times_power_of_two(xk, scale)
        with np.errstate(**errstate):
            return callback(xk)
    return caller


_SUMMED = ("wall_time", "gpu_time", "gpu_energy", "host_cpu_time", "host_energy", "host_syncs",
           "host_launches", "build_time")


def _accumulate(acc, stats):
    """Merge one run's stats into the solve's: sums for costs, the last value for the rest."""
    for k, v in stats.items():
        if k in _SUMMED and k in acc:
            acc[k] = None if (v is None or acc[k] is None) else acc[k] + v
        else:
            acc[k] = v
