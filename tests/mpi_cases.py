"""Named cases of the distributed solvers, run on every rank under mpirun (not collected by
pytest; tests/test_distributed.py launches it):

    mpirun -n K python tests/mpi_cases.py --out FILE [CASE ...]     (no CASE: all of them)

Every rank runs every case in order and appends one JSON line per case to FILE (or
$DPSOLVE_MPI_CASES_OUT): {"case", "rank", "size", "ok", "detail", "seconds"}. A case does its
collective work first and checks afterwards (``Check`` records failures instead of raising), so
a failed check on one rank never leaves the others waiting in a collective; a hang is caught by
the caller's timeout.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CASES = {}            # name -> (function, minimum number of ranks)


def case(name, min_ranks=1):
    def deco(fn):
        CASES[name] = (fn, min_ranks)
        return fn
    return deco


class Check:
    """Failures recorded, not raised (see the module docstring)."""

    def __init__(self):
        self.fails = []
        self.notes = []

    def that(self, cond, msg):
        if not cond:
            self.fails.append(str(msg))
        return bool(cond)

    def note(self, msg):
        self.notes.append(str(msg))


# --------------------------------------------------------------------------- problems
def spd(dtype):
    from dpsolve.matrices import laplace_2d
    if np.dtype(dtype).kind == "c":
        E = sp.diags_array([np.ones(80)], offsets=[1]).astype(complex)
        A = laplace_2d(9).astype(complex) + 2 * sp.eye_array(81) + 0.5j * (E - E.T)
    else:
        A = laplace_2d(9)
    return sp.csr_array(A.astype(dtype))


def nonsym(dtype):
    from dpsolve.matrices import convdiff_2d
    A = convdiff_2d(9, peclet=20.0)
    if np.dtype(dtype).kind == "c":
        A = A.astype(complex) + 0.5j * sp.eye_array(81)
    return sp.csr_array(A.astype(dtype))


def problem(method, dtype):
    A = spd(dtype) if method == "cg" else nonsym(dtype)
    rng = np.random.default_rng(7)
    b = rng.standard_normal(A.shape[0])
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(A.shape[0])
    return A, b.astype(dtype)


def rtol_of(dtype):
    return 1e-10 if np.dtype(dtype).char in "dD" else 1e-5


def serial(method, A, b, **kw):
    import dpsolve
    return getattr(dpsolve, method)(A, b, variant="host", full_output=True, **kw)


def mine(v, A):
    """This rank's rows of a global vector."""
    return v[A.row_start:A.row_stop]


def same_everywhere(comm, value):
    return all(v == value for v in comm.allgather(value))


def expect_error(comm, ck, exc_type, fn, *must_contain):
    """Run the collective ``fn``: it must raise ``exc_type`` on every rank, with the same
    message everywhere, containing each of ``must_contain``. Returns this rank's exception."""
    exc = None
    try:
        fn()
    except Exception as e:           # noqa: BLE001 - what it is, is checked below
        exc = e
    got = (type(exc).__name__, str(exc)) if exc is not None else None
    every = comm.allgather(got)
    ck.that(exc is not None and isinstance(exc, exc_type),
            f"expected {exc_type.__name__}, got {got}")
    ck.that(all(g == every[0] for g in every), f"the ranks got different errors: {every}")
    for s in must_contain:
        ck.that(exc is not None and s in str(exc), f"{s!r} not in the message {got}")
    return exc


def expect_stop(comm, ck, fn, on, own, *must_contain):
    """Run the collective ``fn``, in which rank ``on`` raises KeyboardInterrupt or SystemExit
    (from its user code or a SIGINT): that rank must raise it again (``own(exc)`` True), every
    other rank the same DistributedError naming it (``ranks == (on,)``, marked ``everywhere``),
    containing each of ``must_contain``. Returns this rank's exception."""
    from dpsolve.distributed import DistributedError
    exc = None
    try:
        fn()
    except BaseException as e:       # noqa: BLE001 - KeyboardInterrupt too: checked below
        exc = e
    got = (type(exc).__name__, str(exc)) if exc is not None else None
    others = [g for r, g in enumerate(comm.allgather(got)) if r != on]
    if comm.Get_rank() == on:
        ck.that(own(exc), f"rank {on} raised {got}, not its own exception again")
    else:
        ck.that(isinstance(exc, DistributedError) and getattr(exc, "everywhere", False)
                and getattr(exc, "ranks", None) == (on,),
                f"expected a DistributedError (everywhere) naming rank {on}, got {got}")
        for s in must_contain:
            ck.that(s in str(exc), f"{s!r} not in the message {got}")
    ck.that(all(g == others[0] for g in others), f"the other ranks got different errors: {others}")
    return exc


def still_works(comm, ck):
    """After an error: a small solve on every rank still runs and converges (the ranks are in
    step)."""
    import dpsolve.distributed as dd
    A = dd.DistributedMatrix.laplace3d(3, 3, 2, comm)
    x, info = dd.cg(A, np.ones(A.n_local), rtol=1e-8)
    ck.that(info == 0 and same_everywhere(comm, info), f"the follow-up solve gave info={info}")


def partitions_for(size, n):
    """Irregular row counts for ``size`` ranks over ``n`` rows: empty ranks, a rank of one row,
    very uneven blocks."""
    if size == 1:
        return [[n]]
    if size == 2:
        return [[0, n], [1, n - 1], [n - 3, 3]]
    if size == 3:
        return [[0, 1, n - 1], [n - 2, 0, 2], [1, n - 2, 1]]
    if size == 4:
        return [[5, 0, 1, n - 6], [0, 0, n, 0], [1, 1, 1, n - 3]]
    base = [0, 1] + [0] * (size - 3)
    return [base + [n - 1]]


# --------------------------------------------------------------------------- cases: solves
def _solve_case(ctx, ck, method, dtype, *, M=None, x0=False, maxiter=None, partition=None,
                build="global"):
    import dpsolve.distributed as dd
    comm = ctx.comm
    A, b = problem(method, dtype)
    n = A.shape[0]
    part = dd.Partition.from_sizes(partition) if partition is not None else None
    if build == "global":
        DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, comm,
                                              partition=part)
    else:
        part = part or dd.Partition.even(n, ctx.size)
        DA = dd.DistributedMatrix.from_rows(A[slice(*part.rows(ctx.rank))], comm)
    xg0 = (np.random.default_rng(3).standard_normal(n).astype(dtype) if x0 else None)
    if x0 == "last":          # nonzero on the last rank's rows only: x0.any() must be global
        last = DA.partition.rows(ctx.size - 1)
        xg0[:last[0]] = 0
        xg0[last[1]:] = 0
    b_loc = mine(b, DA).copy()
    x0_loc = mine(xg0, DA).copy() if x0 else None
    b_keep = b_loc.copy()
    x0_keep = x0_loc.copy() if x0 else None
    kw = dict(rtol=rtol_of(dtype), maxiter=maxiter, M=M)
    x, info, rep = getattr(dd, method)(DA, b_loc, x0_loc, full_output=True, **kw)
    xs, infos, reps = serial(method, A, b, x0=xg0, **kw)
    infos_all = comm.allgather(info)
    its_all = comm.allgather(rep.iterations)
    ck.that(all(i == infos_all[0] for i in infos_all), f"info differs by rank: {infos_all}")
    ck.that(all(i == its_all[0] for i in its_all), f"iterations differ by rank: {its_all}")
    ck.that(info == infos, f"info {info}, serial {infos}")
    ck.that(x.dtype == np.dtype(dtype), f"x has dtype {x.dtype}")
    ck.that(np.array_equal(b_loc, b_keep), "b was modified")
    if x0:
        ck.that(np.array_equal(x0_loc, x0_keep), "x0 was modified")
    ref = mine(xs, DA)
    scale = float(np.abs(xs).max())
    err = float(np.abs(x - ref).max()) / scale if x.size else 0.0
    if maxiter is not None:               # the same iterations in another rounding
        ck.that(err <= (1e-9 if np.dtype(dtype).char in "dD" else 1e-3),
                f"x differs from the serial one by {err:.3g} (relative)")
    else:
        ck.that(err <= (1e-10 if np.dtype(dtype).char in "dD" else 1e-4),
                f"x differs from the serial one by {err:.3g} (relative)")
        ck.that(abs(rep.iterations - reps.iterations) <= 2,
                f"{rep.iterations} iterations, serial {reps.iterations}")
        ck.that(rep.residual_norm <= rep.tolerance,
                f"true residual {rep.residual_norm:.3g} above the tolerance {rep.tolerance:.3g}")
    if ctx.size == 1 and partition is None:
        ck.that(np.array_equal(x, xs) and rep.iterations == reps.iterations,
                "one rank is not bit for bit the serial host solve")
    ck.that(rep.ranks == ctx.size and len(rep.wall_times) == ctx.size, "report ranks")
    ck.that(rep.n == n and rep.nnz == A.nnz, f"report n={rep.n} nnz={rep.nnz}")
    ck.that(rep.allreduce_calls > 0 and rep.halo_calls >= rep.iterations, "report counts")
    ck.that(rep.wall_time >= max(rep.comm_times) >= 0, "report times")
    ck.that(all(0 <= w <= a for w, a in zip(rep.allreduce_wait_seconds, rep.allreduce_seconds))
            and len(rep.allreduce_wait_seconds) == ctx.size,
            f"waits {rep.allreduce_wait_seconds} outside 0..{rep.allreduce_seconds}")
    ck.that(same_everywhere(comm, (rep.residual_norm, rep.iterations, rep.bytes_sent)),
            "the report differs by rank")
    # SciPy on the gathered system, for the record
    xg = dd.gather(x, DA)
    if ctx.rank == 0 and maxiter is None and info == 0:
        r = b - A @ xg
        ck.that(np.linalg.norm(r) <= 1.0001 * rep.tolerance + 1e-30,
                f"||b - A x|| = {np.linalg.norm(r):.3g} on the gathered x")
    ck.note(f"{method} {np.dtype(dtype).name}: info={info} it={rep.iterations} "
            f"(serial {reps.iterations}) err={err:.2g}")


for _m in ("cg", "bicg", "bicgstab"):
    for _dt in ("float32", "float64", "complex128"):
        case(f"solve-{_m}-{_dt}")(
            lambda ctx, ck, m=_m, dt=_dt: _solve_case(ctx, ck, m, dt))
    case(f"jacobi-{_m}")(lambda ctx, ck, m=_m: _solve_case(ctx, ck, m, "float64", M="jacobi"))
    case(f"x0-{_m}")(lambda ctx, ck, m=_m: _solve_case(ctx, ck, m, "float64", x0=True))
    case(f"x0-one-rank-{_m}")(
        lambda ctx, ck, m=_m: _solve_case(ctx, ck, m, "float64", x0="last"))
    case(f"from-rows-{_m}")(
        lambda ctx, ck, m=_m: _solve_case(ctx, ck, m, "float64", build="rows"))


@case("maxiter")
def _maxiter(ctx, ck):
    for m in ("cg", "bicg", "bicgstab"):
        _solve_case(ctx, ck, m, "float64", maxiter=3)


@case("partitions")
def _partitions(ctx, ck):
    for sizes in partitions_for(ctx.size, 81):
        for m in ("cg", "bicg", "bicgstab"):
            _solve_case(ctx, ck, m, "float64", partition=sizes,
                        build="global" if m != "bicg" else "rows")
        _solve_case(ctx, ck, "bicgstab", "complex128", partition=sizes, M="jacobi")


@case("graph-needs-gpu")
def _graph_needs_gpu(ctx, ck):
    """Without a GPU, variant graph is refused before any work, on every rank, by name (on
    GPUs it runs on any number of ranks: the GPU cases gpu-graph-*)."""
    import dpsolve.distributed as dd
    if _has_gpu():
        ck.note("a GPU here: the GPU cases run variant graph")
        return
    DA = dd.DistributedMatrix.laplace3d(4, 4, 4, ctx.comm)
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.cg(DA, np.ones(DA.n_local), variant="graph", transport="nccl"),
                 "variant 'graph' needs a GPU on every rank")


@case("callable-M")
def _callable_m(ctx, ck):
    """M as a callable (and an object with matvec/rmatvec for BiCG) applying D^-1 gives the very
    bits of M="jacobi"."""
    import dpsolve.distributed as dd
    for m in ("cg", "bicg", "bicgstab"):
        A, b = problem(m, "complex128")
        DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm)
        inv = 1.0 / DA.diagonal()

        class Op:
            def matvec(self, r):
                return inv * r

            def rmatvec(self, r):
                return np.conj(inv) * r
        Mc = Op() if m == "bicg" else (lambda r: inv * r)
        x1, i1 = getattr(dd, m)(DA, mine(b, DA), rtol=1e-10, M="jacobi")
        x2, i2 = getattr(dd, m)(DA, mine(b, DA), rtol=1e-10, M=Mc)
        ck.that(i1 == i2 == 0 and np.array_equal(x1, x2), f"{m}: callable M differs")


@case("breakdown")
def _breakdown(ctx, ck):
    """SciPy's -10 / -11 cases, distributed (2x2 ones leave ranks without rows)."""
    import scipy.sparse.linalg as sla

    import dpsolve.distributed as dd
    sys.path.insert(0, str(ROOT / "tests"))
    from scipy_cases import sym_nonpd
    cases = [("bicg", *sym_nonpd()), ("bicgstab", *sym_nonpd()),
             ("bicg", np.array([[-1.0, 0.0], [1.0, 1.0]]), np.array([1.0, 0.0])),
             ("bicg", np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0])),
             ("bicgstab", np.array([[1.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0])),
             ("bicgstab", np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0])),
             ("cg", np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]))]
    for method, Ad, b in cases:
        A = sp.csr_array(Ad)
        DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm)
        with np.errstate(all="ignore"):
            x, info = getattr(dd, method)(DA, mine(b, DA), rtol=1e-8, maxiter=50)
            xs, infos, _ = serial(method, A, b, rtol=1e-8, maxiter=50)
            _, info_scipy = getattr(sla, method)(A, b, rtol=1e-8, maxiter=50)
        ck.that(same_everywhere(ctx.comm, info), f"{method} {Ad.shape}: info differs by rank")
        if method != "cg":
            ck.that(info_scipy in (-10, -11), f"SciPy gave {info_scipy} (expected a breakdown)")
            ck.that(info == info_scipy, f"{method} {Ad.shape}: info {info}, SciPy {info_scipy}")
        else:
            ck.that(info == infos == -10, f"cg on an indefinite 2x2: info {info}, serial {infos}")
        ck.that(np.allclose(x, mine(xs, DA)), f"{method} {Ad.shape}: x differs from serial")
        ck.note(f"{method} n={A.shape[0]}: info={info}")


@case("zero-b")
def _zero_b(ctx, ck):
    import dpsolve.distributed as dd
    DA = dd.DistributedMatrix.laplace3d(3, 3, 3, ctx.comm)
    x, info, rep = dd.bicgstab(DA, np.zeros(DA.n_local), np.ones(DA.n_local), full_output=True)
    ck.that(info == 0 and not x.any() and rep.iterations == 0, "zero b must give zeros at once")


@case("extreme-b")
def _extreme_b(ctx, ck):
    """b at 2^-1000 and 2^1000 (squares that under- and overflow): solved as at scale 1, as the
    single-GPU front end does (b scaled by a power of two: the same iterations, x times 2^k
    exactly); the callback sees the caller's scale; no NumPy floating-point warning escapes (the
    README's promise; before, ||b||^2's overflow at 2^1000 warned). Before: x = 0 with info 0,
    and -10."""
    import warnings

    import dpsolve.distributed as dd
    for method in ("cg", "bicgstab"):
        A, b = problem(method, "float64")
        DA = dd.DistributedMatrix.from_global(A, ctx.comm)
        x1, info1, rep1 = getattr(dd, method)(DA, mine(b, DA), rtol=1e-10, full_output=True)
        for k in (-1000, 1000):
            seen = []
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                x, info, rep = getattr(dd, method)(
                    DA, mine(b, DA) * 2.0 ** k, rtol=1e-10, full_output=True,
                    callback=lambda xk: seen.append(float(np.max(np.abs(xk))) if xk.size
                                                    else 0.0))
            what = f"{method} at 2^{k}: info {info} in {rep.iterations}, {rep1.iterations} at 1"
            ck.that(not caught, f"{what}: warned {[str(w.message) for w in caught]}")
            ck.that(info == info1 == 0 and rep.iterations == rep1.iterations, what)
            ck.that(np.array_equal(x, x1 * 2.0 ** k), f"{what}: x is not 2^k x_1")
            ck.that(rep.residual_norm <= rep.tolerance, f"{what}: report contradicts info")
            ck.that(all(m == 0 or abs(np.log2(m) - k) < 20 for m in seen),
                    f"{what}: the callback saw another scale")


@case("scales-apart")
def _scales_apart(ctx, ck):
    """A, b and x0 each at 1 or at the edge of the range (2^+-900, float32 2^+-100), the
    methods (cg, cg1, bicgstab) in float64 and float32, with and without Jacobi and x0: no
    NumPy floating-point warning escapes (the README's promise: before, ||b||^2, the scaling
    of x0 and the iterations warned); an x0 that the scaling carries past the largest float
    stops at once with -10 and x = x0 bit for bit (before: an infinite x and a warning); a
    solution past the largest float (A tiny, b huge) comes back with info != 0, never 0 (before:
    "converged" with x = inf; the single-GPU front end's _unscaled_check, over the ranks)."""
    import itertools
    import warnings

    import dpsolve.distributed as dd
    for method, dtype in itertools.product(("cg", "cg1", "bicgstab"), ("float64", "float32")):
        big = 900 if dtype == "float64" else 100
        A1, b1 = problem("cg" if method == "cg1" else method, dtype)
        for ea, eb, ex, M in itertools.product((0, big, -big), (0, big, -big), (None, 0, big),
                                               (None, "jacobi")):
            if (ea + eb + (ex or 0)) % 2 and M is None:
                continue                                 # half the grid: 108 solves a rank
            A = sp.csr_array(A1 * np.asarray(2.0 ** ea, dtype))
            DA = dd.DistributedMatrix.from_global(A, ctx.comm)
            b = mine(b1 * np.asarray(2.0 ** eb, dtype), DA)
            x0 = None if ex is None else mine(np.linspace(1, 2, A.shape[0]).astype(dtype)
                                              * np.asarray(2.0 ** ex, dtype), DA)
            what = f"{method} {dtype} A 2^{ea} b 2^{eb} x0 {ex} M={M}"
            fn = dd.cg if method == "cg1" else getattr(dd, method)
            kw = dict(single_reduction=True) if method == "cg1" else {}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                x, info, rep = fn(DA, b, x0, rtol=rtol_of(dtype), maxiter=40, M=M,
                                  full_output=True, **kw)
            ck.that(not caught, f"{what}: warned {[str(w.message) for w in caught]}")
            ck.that(same_everywhere(ctx.comm, (info, rep.iterations)), f"{what}: ranks differ")
            # x0 * 2^(f - e) in the solve, f ~ ea (A / 2^f) and e ~ eb (b / 2^e)
            past = x0 is not None and ex + ea - eb > np.finfo(dtype).maxexp
            if past:
                ck.that(info == -10 and rep.iterations == 0 and np.array_equal(x, x0),
                        f"{what}: x0 past the range gave info {info} in {rep.iterations}")
            if not np.isfinite(x).all():
                ck.that(info != 0 and eb - ea > np.finfo(dtype).maxexp - 8,
                        f"{what}: a non-finite x with info {info}")


@case("extreme-A")
def _extreme_a(ctx, ck, **kw):
    """A at 2^-900 and 2^900 (float64) and 2^-100, 2^100 (float32): solved as A / 2^f, as the
    single-GPU front end does: scale 1's iterations and x / 2^k to the bit, with M None and
    Jacobi, x0 and the callback at the caller's scale. A user's M keeps A as it is. ``kw``: the
    solver's variant and transport (the GPU case)."""
    import dpsolve.distributed as dd
    for dtype, ks in (("float64", (-900, 900)), ("float32", (-100, 100))):
        for method, M in (("cg", None), ("cg", "jacobi"), ("bicgstab", None)):
            A, b = problem(method, dtype)
            b = b.astype(dtype)
            DA = dd.DistributedMatrix.from_global(A.astype(dtype), ctx.comm)
            rtol = 1e-10 if dtype == "float64" else 1e-4
            x0 = np.full(DA.n_local, 0.25, dtype)
            x1, info1, rep1 = getattr(dd, method)(DA, mine(b, DA), x0, rtol=rtol, M=M,
                                                  full_output=True, **kw)
            for k in ks:
                s = np.ldexp(np.dtype(dtype).type(1), k)
                DK = dd.DistributedMatrix.from_global(A.astype(dtype) * s, ctx.comm)
                seen = []
                x, info, rep = getattr(dd, method)(
                    DK, mine(b, DA), x0 / s, rtol=rtol, M=M, full_output=True, **kw,
                    callback=lambda xk: seen.append(float(np.max(np.abs(xk))) if xk.size
                                                    else 0.0))
                what = (f"{method} {dtype} M={M} A * 2^{k}: info {info} in {rep.iterations}, "
                        f"{info1} in {rep1.iterations} at 1")
                ck.that(info == info1 == 0 and rep.iterations == rep1.iterations, what)
                ck.that(np.array_equal(x, (x1 / s).astype(dtype)), f"{what}: x is not x_1 / 2^k")
                ck.that(all(m == 0 or abs(np.log2(m) + k) < 20 for m in seen),
                        f"{what}: the callback saw another scale")
    from dpsolve.distributed.solvers import _scaled_matrix
    A, b = problem("cg", "float32")
    DK = dd.DistributedMatrix.from_global(A.astype("float32") * np.float32(2.0 ** 100), ctx.comm)
    hi = int(np.frexp(float(abs(A).max()))[1]) + 100          # max|A| * 2^100's exponent
    for M, f in ((None, hi), ("jacobi", hi), (lambda r: r, 0)):
        DS, got = _scaled_matrix(ctx.comm, DK, np.dtype("float32"), M)
        ck.that(got == f, f"M={M}: A scaled by 2^-{got}, expected 2^-{f}")
        ck.that(np.array_equal(DS.local.data * np.float32(2.0 ** got), DK.local.data),
                f"M={M}: the scaled values are not A / 2^f exactly")


def _prepared_against_one_shot(ctx, ck, DA, method, solves, **opts):
    """``dd.prepare(DA, method, **opts)`` solving each (b, x0, kw) of ``solves`` in turn gives
    the one-shot call's x, info and iterations, bit for bit; the caller's b and x0 untouched."""
    import dpsolve.distributed as dd
    with dd.prepare(DA, method, **opts) as P:
        for b, x0, kw in solves:
            keep = (b.copy(), None if x0 is None else x0.copy())
            xp, ip, rp = P.solve(b, x0, full_output=True, **kw)
            xo, io, ro = getattr(dd, method)(DA, b, x0, full_output=True, **opts, **kw)
            what = f"{method} {opts} {np.asarray(b).dtype} {kw}"
            ck.that(ip == io and rp.iterations == ro.iterations,
                    f"{what}: prepared info {ip} it {rp.iterations}, one-shot {io} "
                    f"it {ro.iterations}")
            ck.that(xp.dtype == xo.dtype and np.array_equal(xp, xo),
                    f"{what}: prepared x differs from the one-shot x")
            ck.that(np.array_equal(b, keep[0]) and (x0 is None or np.array_equal(x0, keep[1])),
                    f"{what}: b or x0 modified")
            ck.that(rp.allreduce_calls == ro.allreduce_calls
                    and rp.halo_calls == ro.halo_calls,
                    f"{what}: counts {rp.allreduce_calls}/{rp.halo_calls}, one-shot "
                    f"{ro.allreduce_calls}/{ro.halo_calls}")
        return P


@case("prepared")
def _prepared(ctx, ck):
    """dd.prepare: each solve as the one-shot call (CG with Jacobi, BiCGStab with an x0, a
    float32 and a complex b changing the working dtype, BiCG); A is a snapshot; a bad b is the
    one-shot call's error on every rank and the system still solves; closed, it refuses."""
    import dpsolve.distributed as dd
    A, b = problem("cg", "float64")
    DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm)
    b1 = mine(b, DA).copy()
    b2 = np.cos(np.arange(DA.n_local, dtype=np.float64) + DA.partition.rows(ctx.rank)[0])
    kw = dict(rtol=1e-10)
    _prepared_against_one_shot(ctx, ck, DA, "cg", [(b1, None, kw), (b2, None, kw),
                                                   (b1.astype(np.float32), None, kw),
                                                   (b2 + 1j * b1, None, kw), (b1, None, kw)],
                               M="jacobi")
    _prepared_against_one_shot(ctx, ck, DA, "bicgstab", [(b1, b2, kw), (b2, None, kw)])
    made = []                                     # A^H (collective): once for the system
    transpose = dd.DistributedMatrix.conj_transpose
    dd.DistributedMatrix.conj_transpose = lambda self: made.append(1) or transpose(self)
    try:
        _prepared_against_one_shot(ctx, ck, DA, "bicg", [(b2, b1, kw), (b1, None, kw)],
                                   M="jacobi")
    finally:
        dd.DistributedMatrix.conj_transpose = transpose
    ck.that(len(made) == 3, f"A^H made {len(made)} times for 2 prepared and 2 one-shot BiCG "
                            f"solves (expected 1 + 2)")
    D32 = DA.astype(np.float32)                   # the working dtype from b: float32, then 64
    _prepared_against_one_shot(ctx, ck, D32, "cg", [(b1.astype(np.float32), None, {}),
                                                    (b1, None, kw),
                                                    (b2.astype(np.float32), None, {})])
    P = dd.prepare(DA, "cg", M="jacobi")
    x_before = P.solve(b1, rtol=1e-10)[0]
    kept = DA.local.data.copy()
    DA.local.data *= 3.0                          # the caller changes A: not the system's
    try:
        ck.that(np.array_equal(P.solve(b1, rtol=1e-10)[0], x_before),
                "the prepared system followed a change to A's arrays")
    finally:
        DA.local.data[:] = kept
    bad = b1.copy()
    if ctx.rank == 0 and bad.size:
        bad[0] = np.nan
    expect_error(ctx.comm, ck, ValueError, lambda: P.solve(bad), "b contains NaN or Inf")
    ck.that(np.array_equal(P.solve(b1, rtol=1e-10)[0], x_before),
            "after the error the prepared system solved differently")
    P.close()
    P.close()                                     # a second close does nothing
    expect_error(ctx.comm, ck, RuntimeError, lambda: P.solve(b1), "closed")
    tr = dd.MpiTransport(ctx.comm)
    P = dd.prepare(DA, "cg", transport=tr)
    tr.close()                                    # the caller's transport, closed under it
    expect_error(ctx.comm, ck, ValueError, lambda: P.solve(b1), "mpi transport passed is closed")
    expect_error(ctx.comm, ck, ValueError, lambda: dd.cg(DA, b1, transport=tr), "is closed")
    P.close()
    expect_error(ctx.comm, ck, TypeError, lambda: dd.prepare(A, "cg"), "DistributedMatrix")


@case("block")
def _block_of_columns(ctx, ck):
    """A block b (n_local, k): each column the one-shot solve of that column, bit for bit (CG
    with Jacobi and an x0 block, BiCGStab; one-shot and prepared), info an array, A set up
    once for the block; the callback gets X (n_local, k); zero columns; a NaN in one rank's
    column, an x0 of another shape and a rank passing one vector are the same error on every
    rank; the caller's arrays untouched."""
    import dpsolve.distributed as dd
    from dpsolve.distributed import solvers
    A, b = problem("cg", "float64")
    DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm)
    n, start = DA.n_local, DA.partition.rows(ctx.rank)[0]
    rows = np.arange(n, dtype=np.float64) + start
    B = np.stack([mine(b, DA), np.cos(rows), np.sin(3 * rows), np.ones(n)], axis=1)
    X0 = np.stack([np.cos(2 * rows + j) for j in range(4)], axis=1)
    keep = B.copy(), X0.copy()
    kw = dict(rtol=1e-10)
    made = []
    scaled = solvers._scaled_matrix
    solvers._scaled_matrix = lambda *a, **k: made.append(1) or scaled(*a, **k)
    try:
        for method, M, x0 in (("cg", "jacobi", X0), ("cg", None, None), ("bicgstab", None, X0)):
            made.clear()
            X, info, rep = getattr(dd, method)(DA, B, x0, M=M, full_output=True, **kw)
            ck.that(len(made) == 1, f"{method}: A set up {len(made)} times for one block")
            ck.that(X.shape == B.shape and isinstance(info, np.ndarray) and info.shape == (4,)
                    and rep.k == 4 and (rep.info == info).all(),
                    f"{method}: X {X.shape}, info {info!r}, report {rep.k} columns")
            for j in range(4):
                xj, ij, rj = getattr(dd, method)(DA, B[:, j].copy(),
                                                 None if x0 is None else x0[:, j].copy(), M=M,
                                                 full_output=True, **kw)
                ck.that(np.array_equal(X[:, j], xj) and info[j] == ij
                        and rep.columns[j].iterations == rj.iterations,
                        f"{method} M={M}: column {j} differs from its one-shot solve")
            with dd.prepare(DA, method, M=M) as P:
                Xp, ip = P.solve(B, x0, **kw)
                ck.that(np.array_equal(Xp, X) and np.array_equal(ip, info),
                        f"{method}: the prepared block differs from the one-shot block")
    finally:
        solvers._scaled_matrix = scaled
    ck.that(np.array_equal(B, keep[0]) and np.array_equal(X0, keep[1]), "B or X0 modified")
    seen = []
    dd.cg(DA, B[:, :2], rtol=1e-6, callback=lambda X: seen.append((X.shape, X.copy())))
    ck.that(seen and all(shape == (n, 2) for shape, _ in seen),
            f"the callback got {[shape for shape, _ in seen[:3]]}, not X (n_local, 2)")
    X, info = dd.cg(DA, np.zeros((n, 0)))
    ck.that(X.shape == (n, 0) and info.shape == (0,), f"zero columns: {X.shape}, {info.shape}")
    bad = B.copy()
    if ctx.rank == ctx.size - 1 and n:
        bad[0, 2] = np.nan
    expect_error(ctx.comm, ck, ValueError, lambda: dd.cg(DA, bad), "b contains NaN or Inf in "
                 "column 2", f"rank {ctx.size - 1}")
    expect_error(ctx.comm, ck, ValueError, lambda: dd.cg(DA, B, X0[:, :3]), "x0 has shape")
    if ctx.size > 1:
        mixed = B if ctx.rank else B[:, 0].copy()
        expect_error(ctx.comm, ck, ValueError, lambda: dd.cg(DA, mixed),
                     "ranks disagree on the right-hand sides")
    ck.note(f"iterations {rep.iterations.tolist()}")


@case("solve-time-skew", min_ranks=2)
def _solve_time_skew(ctx, ck):
    """A rank that starts its iterations late (here: 0.5 s asleep where its set-up would run)
    makes the others wait at the first all-reduce, inside their solve time; the report's
    solve_time is the min over ranks, the solve's own time, without that skew."""
    import time

    import dpsolve.distributed as dd
    from dpsolve.distributed import solvers
    DA = dd.DistributedMatrix.laplace3d(4, 4, 4, ctx.comm)
    host = solvers.VARIANTS["host"]

    def late(job):
        if ctx.rank == 0:
            time.sleep(0.5)
        return host(job)
    solvers.VARIANTS["host"] = late
    try:
        _, info, rep = dd.cg(DA, np.ones(DA.n_local), rtol=1e-10, full_output=True)
    finally:
        solvers.VARIANTS["host"] = host
    times = rep.solve_times
    ck.that(info == 0 and len(times) == ctx.size, f"info {info}, {len(times)} solve times")
    ck.that(rep.solve_time == min(times), f"solve_time {rep.solve_time} is not the min of {times}")
    ck.that(max(times) - min(times) >= 0.25, f"the others did not wait for rank 0: {times}")
    ck.that(rep.solve_time <= rep.wall_time, "solve_time above the wall time")


@case("determinism")
def _determinism(ctx, ck):
    """The same solve twice (a fresh transport, then one held by the caller, reused) gives the
    same bits; the report's global numbers are the same on every rank."""
    import dpsolve.distributed as dd
    A, b = problem("bicgstab", "float64")
    part = dd.Partition.from_sizes(partitions_for(ctx.size, 81)[-1])
    DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm,
                                          partition=part)
    tr = dd.MpiTransport(ctx.comm)
    runs = []
    for transport in ("mpi", tr, tr):
        for m in ("bicgstab", "bicg", "cg"):
            M = "jacobi" if m == "bicg" else None
            x, info, rep = getattr(dd, m)(DA, mine(b, DA), rtol=1e-12, M=M,
                                          transport=transport, full_output=True)
            runs.append((m, x.tobytes(), info, rep.iterations, rep.residual_norm))
    k = len(runs) // 3
    ck.that(runs[:k] == runs[k:2 * k] == runs[2 * k:], "a repeated solve gave other bits")
    ck.that(same_everywhere(ctx.comm, [r[2:] for r in runs]), "ranks disagree")
    ck.that(tr.stats.allreduce_calls > 0 and tr.stats.halo_calls > 0, "stats not counted")
    tr.stats.reset()
    ck.that(tr.stats.allreduce_calls == 0 and tr.stats.bytes_sent == 0, "reset")


# --------------------------------------------------------------------------- cases: pieces
@case("constructors")
def _constructors(ctx, ck):
    """from_global, from_rows and laplace3d build the same matrix, the same split and the same
    halo plan; to_global is dpsolve.matrices.laplace_3d bit for bit."""
    import dpsolve.distributed as dd
    from dpsolve.matrices import laplace_3d
    comm = ctx.comm
    for dtype, sizes in ((np.float64, None), (np.float32, partitions_for(ctx.size, 60)[0])):
        G = laplace_3d(5, 4, 3, dtype=dtype)
        part = dd.Partition.from_sizes(sizes) if sizes else dd.Partition.even(60, ctx.size)
        a = dd.DistributedMatrix.laplace3d(5, 4, 3, comm, dtype=dtype, partition=part)
        b = dd.DistributedMatrix.from_global(G if ctx.rank == 0 else None, comm,
                                             partition=part)
        c = dd.DistributedMatrix.from_rows(G[slice(*part.rows(ctx.rank))], comm)
        for name, o in (("from_global", b), ("from_rows", c)):
            same = (o.partition == a.partition and o.dtype == a.dtype
                    and np.array_equal(o.ghosts, a.ghosts)
                    and all(np.array_equal(getattr(o.local, f), getattr(a.local, f))
                            and np.array_equal(getattr(o.remote, f), getattr(a.remote, f))
                            for f in ("data", "indices", "indptr"))
                    and o.halo.send_ranks == a.halo.send_ranks
                    and np.array_equal(o.halo.send_idx, a.halo.send_idx)
                    and o.halo.recv_ranks == a.halo.recv_ranks
                    and np.array_equal(o.halo.recv_offsets, a.halo.recv_offsets))
            ck.that(same, f"{name} differs from laplace3d ({np.dtype(dtype).name})")
        g = a.to_global()
        if ctx.rank == 0:
            ck.that(g.dtype == G.dtype and np.array_equal(g.data, G.data)
                    and np.array_equal(g.indices, G.indices)
                    and np.array_equal(g.indptr, G.indptr),
                    f"laplace3d is not laplace_3d bit for bit ({np.dtype(dtype).name})")
        else:
            ck.that(g is None, "to_global off the root")
        ck.that(a.n_local == part.rows(ctx.rank)[1] - part.rows(ctx.rank)[0], "n_local")
        ck.that(a.shape == (60, 60) and a.n == 60 and a.rank == ctx.rank, "attributes")
        ck.that(a.local.shape == (a.n_local, a.n_local)
                and a.remote.shape == (a.n_local, a.ghosts.size), "part shapes")
        ck.that(np.array_equal(a.diagonal(), G.diagonal()[slice(*part.rows(ctx.rank))]),
                "diagonal")


@case("halo-and-matvec")
def _halo(ctx, ck):
    """Every rank's plan matches its neighbours' (what r sends to s is what s expects from r),
    ghosts are sorted and owned by others, and matvec is A @ x, over irregular partitions."""
    import dpsolve.distributed as dd
    comm = ctx.comm
    A = nonsym("complex128")
    rng = np.random.default_rng(5)
    xg = rng.standard_normal(81) + 1j * rng.standard_normal(81)
    for sizes in partitions_for(ctx.size, 81) + [None]:
        part = dd.Partition.from_sizes(sizes) if sizes else None
        DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, comm,
                                              partition=part)
        p = DA.halo
        sends = {s: int(p.send_offsets[i + 1] - p.send_offsets[i])
                 for i, s in enumerate(p.send_ranks)}
        recvs = {r: int(p.recv_offsets[i + 1] - p.recv_offsets[i])
                 for i, r in enumerate(p.recv_ranks)}
        every = comm.allgather((sends, recvs))
        for s, cnt in sends.items():
            ck.that(every[s][1].get(ctx.rank) == cnt, f"rank {ctx.rank} sends {cnt} to {s}, "
                    f"which expects {every[s][1].get(ctx.rank)}")
        owners = DA.partition.owner(DA.ghosts)
        ck.that((np.diff(DA.ghosts) > 0).all() and (owners != ctx.rank).all(), "ghosts")
        ck.that(p.n_ghost == DA.ghosts.size and p.bytes_per_exchange(16) == 16 * p.n_send,
                "sizes")
        ck.that(p.send_idx.dtype == np.int32 and p.send_offsets.dtype == np.int64, "dtypes")
        tr = dd.MpiTransport(comm)
        y = DA.matvec(mine(xg, DA), tr)
        ck.that(np.allclose(y, mine(A @ xg, DA), rtol=1e-14, atol=1e-14), "matvec")
        ck.that(tr.stats.halo_calls == 1 and tr.stats.bytes_sent == 16 * p.n_send, "stats")


@case("conj-transpose")
def _conj_transpose(ctx, ck):
    import dpsolve.distributed as dd
    A = nonsym("complex128") + sp.csr_array(sp.random(81, 81, density=0.05, random_state=2))
    A = sp.csr_array(A)
    for sizes in partitions_for(ctx.size, 81) + [None]:
        part = dd.Partition.from_sizes(sizes) if sizes else None
        DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm,
                                              partition=part)
        AH = DA.conj_transpose()
        G = AH.to_global()
        if ctx.rank == 0:
            want = sp.csr_array(A.conj().T)
            want.sum_duplicates()
            ck.that(np.array_equal(G.indptr, want.indptr)
                    and np.array_equal(G.indices, want.indices)
                    and np.array_equal(G.data, want.data), f"A^H differs ({sizes})")
        ck.that(AH.partition == DA.partition, "A^H keeps the partition")


@case("vectors")
def _vectors(ctx, ck):
    import dpsolve.distributed as dd
    comm = ctx.comm
    DA = dd.DistributedMatrix.laplace3d(4, 3, 2, comm,
                                        partition=dd.Partition.from_sizes(
                                            partitions_for(ctx.size, 24)[0]))
    v = np.arange(24.0) + 0.5j
    loc = dd.scatter(v if ctx.rank == 0 else None, DA)
    ck.that(np.array_equal(loc, mine(v, DA)), "scatter")
    back = dd.gather(loc, DA)
    ck.that(np.array_equal(back, v) if ctx.rank == 0 else back is None, "gather")
    expect_error(comm, ck, ValueError,
                 lambda: dd.gather(np.zeros(DA.n_local + (ctx.rank == ctx.size - 1)), DA),
                 f"rank {ctx.size - 1}")
    expect_error(comm, ck, ValueError,
                 lambda: dd.scatter(np.zeros(23) if ctx.rank == 0 else None, DA), "23")


@case("transport")
def _transport(ctx, ck):
    """The deterministic all-reduce (rank order, the same bits everywhere, complex too), the
    statistics, and the staging of device-like arrays (``get``/``set``)."""
    import dpsolve.distributed as dd
    comm = ctx.comm
    tr = dd.MpiTransport(comm)
    for dtype in (np.float64, np.complex128, np.float32):
        vals = np.array([0.1 * (ctx.rank + 1), 1e16 * (-1) ** ctx.rank, 3.0], dtype=dtype)
        if np.dtype(dtype).kind == "c":
            vals = vals + 1j * np.arange(3)
        buf = vals.copy()
        tr.allreduce(buf)
        every = comm.allgather(vals)
        want = every[0].copy()
        for v in every[1:]:
            want += v
        ck.that(np.array_equal(buf, want), f"allreduce {np.dtype(dtype).name}")
        ck.that(same_everywhere(comm, buf.tobytes()), "allreduce bits differ by rank")
    ck.that(tr.stats.allreduce_calls == 3, "allreduce count")

    class FakeDevice:
        """A device array stand-in: ``get``/``set`` and ``__cuda_array_interface__``."""
        __cuda_array_interface__ = {}

        def __init__(self, a):
            self.a, self.shape, self.dtype = np.array(a), np.shape(a), np.asarray(a).dtype

        def get(self):
            return self.a.copy()

        def set(self, host):
            self.a[...] = host
    d = FakeDevice([1.0, 2.0])
    tr.allreduce(d)
    ck.that(np.array_equal(d.a, np.array([1.0, 2.0]) * ctx.size), "device allreduce")
    DA = dd.DistributedMatrix.laplace3d(4, 4, 3, comm)
    xg = np.arange(48.0)
    p = DA.halo
    send = FakeDevice(mine(xg, DA)[p.send_idx])
    recv = FakeDevice(np.zeros(p.n_ghost))
    h = tr.halo_start(p, send, recv)
    tr.halo_finish(h)
    ck.that(np.array_equal(recv.a, xg[DA.ghosts]), "device halo")
    tr.barrier()
    tr.close()


@case("dot-accurate")
def _dot_accurate(ctx, ck):
    """A global inner product whose exact value is 0 across the ranks while a plain sum in rank
    order is not: dot_accurate sees the 0; and an exact nonzero value is correctly rounded."""
    import dpsolve.distributed as dd
    terms = [1e100, 1.0, -1e100, -1.0, 2.0 ** -70, 3.0, -3.0, 1e-300]
    for case_terms, exact in ((terms[:4], 0.0), (terms, 2.0 ** -70 + 1e-300)):
        a = np.array([t for i, t in enumerate(case_terms) if i % ctx.size == ctx.rank])
        b = np.ones_like(a)
        tr = dd.MpiTransport(ctx.comm)
        space = dd.DistributedSpace(tr, ctx.rank, ctx.size, np.float64)
        got = space.dot_accurate(a, b)
        ck.that(got == exact, f"dot_accurate gave {got!r}, exact {exact!r}")
        za = a.astype(complex) * (1 - 2j)
        gotc = space.dot_accurate(za, b.astype(complex))
        ck.that(gotc == complex(exact, 2 * exact), f"complex dot_accurate gave {gotc!r}")
    if ctx.size == 4:
        plain = space.dot(np.array([terms[ctx.rank]]), np.ones(1))
        ck.that(plain != 0, "the plain sum cancels too: the case tests nothing")


# --------------------------------------------------------------------------- cases: errors
@case("bad-b-length")
def _bad_b_length(ctx, ck):
    import dpsolve.distributed as dd
    DA = dd.DistributedMatrix.laplace3d(3, 3, 3, ctx.comm)
    last = ctx.size - 1
    b = np.ones(DA.n_local + (1 if ctx.rank == last else 0))
    expect_error(ctx.comm, ck, ValueError, lambda: dd.cg(DA, b), f"rank {last}: b has shape")
    still_works(ctx.comm, ck)


@case("bad-nan")
def _bad_nan(ctx, ck):
    import dpsolve.distributed as dd
    DA = dd.DistributedMatrix.laplace3d(3, 3, 3, ctx.comm)
    last = ctx.size - 1
    b = np.ones(DA.n_local)
    if ctx.rank == last:
        b[-1] = np.nan
    x0 = np.zeros(DA.n_local)
    if ctx.rank == 0:
        x0[0] = np.inf
    want = ([f"rank {last}: b contains NaN or Inf", "rank 0: x0 contains NaN or Inf"]
            if last else ["rank 0: b contains NaN or Inf; x0 contains NaN or Inf"])
    expect_error(ctx.comm, ck, ValueError, lambda: dd.bicgstab(DA, b, x0), *want)
    still_works(ctx.comm, ck)


@case("bad-method-mix", min_ranks=2)
def _bad_method_mix(ctx, ck):
    import dpsolve.distributed as dd
    DA = dd.DistributedMatrix.laplace3d(3, 3, 3, ctx.comm)
    method = "cg" if ctx.rank == 0 else "bicg"
    expect_error(ctx.comm, ck, ValueError,
                 lambda: getattr(dd, method)(DA, np.ones(DA.n_local)),
                 "ranks disagree on method", "rank 0: 'cg'")
    still_works(ctx.comm, ck)


@case("bad-options-mix", min_ranks=2)
def _bad_options_mix(ctx, ck):
    import dpsolve.distributed as dd
    DA = dd.DistributedMatrix.laplace3d(3, 3, 3, ctx.comm)
    b = np.ones(DA.n_local)
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.cg(DA, b, rtol=1e-5 if ctx.rank else 1e-6),
                 "ranks disagree on rtol")
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.cg(DA, b, maxiter=None if ctx.rank else 5),
                 "ranks disagree on maxiter")
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.cg(DA, b.astype(np.complex128 if ctx.rank else np.float64)),
                 "ranks disagree on the working dtype")
    still_works(ctx.comm, ck)


@case("bad-values")
def _bad_values(ctx, ck):
    import dpsolve.distributed as dd
    comm = ctx.comm
    DA = dd.DistributedMatrix.laplace3d(3, 3, 3, comm)
    b = np.ones(DA.n_local)
    expect_error(comm, ck, ValueError, lambda: dd.cg(DA, b, variant="cublas"),
                 "unknown distributed variant 'cublas'", "host")
    expect_error(comm, ck, ValueError, lambda: dd.cg(DA, b, transport="ucx"),
                 "unknown transport 'ucx'", "mpi")
    expect_error(comm, ck, ValueError, lambda: dd.cg(DA, b, transport="nccl"),
                 "transport 'nccl' moves device arrays", "variant 'cuda'")
    if not _has_gpu():                 # the same answer on every rank of one machine
        expect_error(comm, ck, ValueError, lambda: dd.cg(DA, b, variant="cuda"),
                     "variant 'cuda' needs a GPU on every rank")
    expect_error(comm, ck, ValueError,
                 lambda: dd.cg(DA, b, atol=-1.0 if ctx.rank == 0 else 0.0), "rank 0",
                 "`atol`")
    expect_error(comm, ck, ValueError, lambda: dd.cg(DA, b, maxiter=0), "maxiter")
    expect_error(comm, ck, ValueError, lambda: dd.cg(DA, b, M="ilu"), "M='ilu'")
    # a zero diagonal entry: Jacobi names the global row, on every rank
    A = sp.csr_array(nonsym("float64"))
    A = sp.lil_array(A)
    A[40, 40] = 0.0
    A = sp.csr_array(A)
    DZ = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, comm)
    owner = DZ.partition.owner(40)
    expect_error(comm, ck, ValueError,
                 lambda: dd.bicgstab(DZ, np.ones(DZ.n_local), M="jacobi"),
                 f"rank {owner}: Jacobi", "global row 40")
    # a float32 diagonal entry whose reciprocal is past the largest float32: named the same way
    A = sp.lil_array(nonsym("float32"))
    A[40, 40] = 1e-39
    DR = dd.DistributedMatrix.from_global(sp.csr_array(A) if ctx.rank == 0 else None, comm)
    owner = DR.partition.owner(40)
    expect_error(comm, ck, ValueError,
                 lambda: dd.bicgstab(DR, np.ones(DR.n_local, np.float32), M="jacobi"),
                 f"rank {owner}: Jacobi", "reciprocal is past the largest float32",
                 "global row 40")
    still_works(comm, ck)


@case("bad-constructors")
def _bad_constructors(ctx, ck):
    import dpsolve.distributed as dd
    from dpsolve.matrices import laplace_2d
    comm = ctx.comm
    last = ctx.size - 1
    G = sp.csr_array(laplace_2d(5))
    part = dd.Partition.even(25, ctx.size)
    rows = G[slice(*part.rows(ctx.rank))]
    # one rank with a different n
    wide = sp.csr_array((rows.data, rows.indices, rows.indptr), shape=(rows.shape[0], 26)) \
        if ctx.rank == last else rows
    if ctx.size > 1:
        expect_error(comm, ck, ValueError, lambda: dd.DistributedMatrix.from_rows(wide, comm),
                     "ranks disagree on the number of columns n", f"rank {last}: 26")
    else:
        expect_error(comm, ck, ValueError, lambda: dd.DistributedMatrix.from_rows(wide, comm),
                     "rows add up to 25", "n = 26")
    # a column index >= n (a raw CSR SciPy does not check)
    bad = rows
    if ctx.rank == last and rows.nnz:
        idx = rows.indices.copy()
        idx[-1] = 25
        bad = sp.csr_array((rows.data.copy(), idx, rows.indptr.copy()), shape=rows.shape)
    expect_error(comm, ck, ValueError, lambda: dd.DistributedMatrix.from_rows(bad, comm),
                 f"rank {last}: rows: CSR column index 25", "out of range [0, 25)")
    # n given and not matching
    expect_error(comm, ck, ValueError, lambda: dd.DistributedMatrix.from_rows(rows, comm, n=24),
                 "n = 24")
    # ranks passing different partitions to from_global
    if ctx.size > 1:
        other = dd.Partition.from_sizes([25] + [0] * (ctx.size - 1))
        expect_error(comm, ck, ValueError,
                     lambda: dd.DistributedMatrix.from_global(
                         G if ctx.rank == 0 else None, comm,
                         partition=other if ctx.rank == last else None),
                     "ranks disagree on the partition")
    expect_error(comm, ck, ValueError,
                 lambda: dd.DistributedMatrix.from_global(
                     sp.csr_array(np.ones((3, 4))) if ctx.rank == 0 else None, comm),
                 "rank 0: expected a square matrix")
    expect_error(comm, ck, ValueError,
                 lambda: dd.DistributedMatrix.laplace3d(
                     3, 3, 0 if ctx.rank == last else 3, comm), f"rank {last}", "nz=0")
    still_works(comm, ck)


def _raiser(ctx, at_call, on_rank, make=None, then=None):
    """A callback (with ``then``: a preconditioner returning ``then(v)``) raising ``make()``
    (default: RuntimeError "boom on call N") on ``on_rank`` at its ``at_call``-th call;
    ``.calls`` counts the calls on this rank, ``.raised`` is what it raised."""
    def fn(v):
        fn.calls += 1
        if ctx.rank == on_rank and fn.calls == at_call:
            fn.raised = make() if make else RuntimeError(f"boom on call {at_call}")
            raise fn.raised
        return then(v) if then else None
    fn.calls, fn.raised = 0, None
    return fn


@case("callback-raises")
def _callback_raises(ctx, ck):
    """A callback raising on one rank mid-solve: DistributedError on every rank naming the rank
    and the exception; the raising rank's has the original as its cause."""
    import dpsolve.distributed as dd
    from dpsolve.distributed import DistributedError
    comm = ctx.comm
    on = ctx.size - 1
    A, b = problem("bicgstab", "float64")
    DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, comm)
    for method in ("cg", "bicg", "bicgstab"):
        A2, b2 = problem(method, "float64")
        D2 = DA if method != "cg" else dd.DistributedMatrix.from_global(
            A2 if ctx.rank == 0 else None, comm)
        cb = _raiser(ctx, 3, on)
        e = expect_error(comm, ck, DistributedError,
                         lambda: getattr(dd, method)(D2, mine(b2, D2), rtol=1e-10, callback=cb),
                         f"rank {on}: raised in the callback: RuntimeError: boom on call 3")
        # the error flag stopped every rank at the next all-reduce, not at the end of the solve
        ck.that(cb.calls == 3, f"{method}: the callback was called {cb.calls} times on rank "
                f"{ctx.rank}; every rank should stop after the third")
        if ctx.rank == on:
            ck.that(isinstance(getattr(e, "__cause__", None), RuntimeError),
                    "the raising rank's error has the original as its cause")
        else:
            ck.that(e is not None and e.__cause__ is None, "other ranks: no cause")
        ck.that(e is not None and getattr(e, "ranks", None) == (on,), "DistributedError.ranks")
    still_works(comm, ck)


@case("callback-raises-last")
def _callback_raises_last(ctx, ck):
    """The callback raises in the very iteration that converges (no all-reduce follows inside
    the solver): the final status all-gather still stops every rank."""
    import dpsolve.distributed as dd
    from dpsolve.distributed import DistributedError
    comm = ctx.comm
    DA = dd.DistributedMatrix.laplace3d(4, 3, 3, comm)
    b = np.ones(DA.n_local)
    _, info, rep = dd.cg(DA, b, rtol=1e-8, full_output=True)
    on = 0
    expect_error(comm, ck, DistributedError,
                 lambda: dd.cg(DA, b, rtol=1e-8, callback=_raiser(ctx, rep.iterations, on)),
                 f"rank {on}: raised in the callback", f"boom on call {rep.iterations}")
    still_works(comm, ck)


@case("M-raises")
def _m_raises(ctx, ck):
    import dpsolve.distributed as dd
    from dpsolve.distributed import DistributedError
    comm = ctx.comm
    DA = dd.DistributedMatrix.laplace3d(4, 3, 3, comm)
    calls = []

    def M(r):
        calls.append(1)
        if ctx.rank == 0 and len(calls) == 2:
            raise ZeroDivisionError("bad preconditioner")
        return r / 6.0

    def M_shape(r):
        return np.ones(r.size + 1) if ctx.rank == ctx.size - 1 else r
    expect_error(comm, ck, DistributedError, lambda: dd.bicgstab(DA, np.ones(DA.n_local), M=M),
                 "rank 0: raised in M: ZeroDivisionError: bad preconditioner")
    expect_error(comm, ck, DistributedError,
                 lambda: dd.cg(DA, np.ones(DA.n_local), M=M_shape),
                 f"rank {ctx.size - 1}: raised in M: ValueError: M returned shape")
    still_works(comm, ck)


@case("user-code-stops")
def _user_code_stops(ctx, ck):
    """KeyboardInterrupt or SystemExit from a callback, M or M^H on one rank: every rank stops at
    the next all-reduce (no callback is called again), that rank raises its own exception again,
    the others a DistributedError naming it. Before, that rank left the solve alone and the
    others waited in their next all-reduce forever."""
    import dpsolve.distributed as dd
    comm = ctx.comm
    on = ctx.size - 1
    systems = {}
    for m in ("cg", "bicgstab"):
        A, b = problem(m, "float64")
        systems[m] = (dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, comm), b)
    systems["bicg"] = systems["bicgstab"]
    for method, kw in (("cg", {}), ("cg", {"single_reduction": True}), ("bicg", {}),
                       ("bicgstab", {})):
        DA, b = systems[method]
        cb = _raiser(ctx, 3, on, KeyboardInterrupt)
        expect_stop(comm, ck,
                    lambda: dd.solve(method, DA, mine(b, DA), rtol=1e-10, callback=cb, **kw),
                    on, lambda e: e is cb.raised and e is not None,
                    f"dpsolve.distributed.{method}: rank {on}: stopped by KeyboardInterrupt in "
                    f"the callback")
        ck.that(cb.calls == 3, f"{method} {kw}: the callback was called {cb.calls} times on rank "
                f"{ctx.rank}; every rank should stop after the third")
    DA, b = systems["bicgstab"]
    M = _raiser(ctx, 2, 0, lambda: SystemExit(3), then=lambda r: r / 4.0)
    expect_stop(comm, ck, lambda: dd.bicgstab(DA, mine(b, DA), M=M), 0,
                lambda e: e is M.raised and e is not None and e.code == 3,
                "rank 0: stopped by SystemExit: 3 in M")
    rmatvec = _raiser(ctx, 2, on, KeyboardInterrupt, then=lambda r: r / 4.0)
    Op = SimpleNamespace(matvec=lambda r: r / 4.0, rmatvec=rmatvec)
    expect_stop(comm, ck, lambda: dd.bicg(DA, mine(b, DA), M=Op), on,
                lambda e: e is rmatvec.raised and e is not None,
                f"rank {on}: stopped by KeyboardInterrupt in M^H")
    still_works(comm, ck)


@contextmanager
def sigint_in(owner, name, rank, on, at):
    """While active, rank ``on`` (this process being ``rank``) sends itself a SIGINT from inside
    its ``at``-th call of the method ``owner.name`` (an all-reduce: dpsolve's own code, not user
    code). Also used by tests/test_distributed.py's command-line test."""
    import signal
    method, calls = getattr(owner, name), [0]

    def interrupt_then_call(obj, *args):
        calls[0] += 1
        if rank == on and calls[0] == at:
            os.kill(os.getpid(), signal.SIGINT)
        return method(obj, *args)
    setattr(owner, name, interrupt_then_call)
    try:
        yield
    finally:
        setattr(owner, name, method)


def sigint_in_reduce(rank, on, at):
    """:func:`sigint_in` the host variant's all-reduces (``DistributedSpace.reduce``)."""
    from dpsolve.distributed.solvers import DistributedSpace
    return sigint_in(DistributedSpace, "reduce", rank, on, at)


@case("sigint-one-rank")
def _sigint_one_rank(ctx, ck):
    """A SIGINT to one rank's process while dpsolve's own code runs there (sent from inside
    the rank's 5th all-reduce): Python's handler still runs, but its KeyboardInterrupt is
    deferred to that all-reduce, which stops every rank; that rank raises it, the others a
    DistributedError. Before, it left the solve on that rank alone, the others waited forever."""
    import signal

    import dpsolve.distributed as dd
    comm = ctx.comm
    on = ctx.size // 2
    DA = dd.DistributedMatrix.laplace3d(4, 3, 3, comm)
    tr = dd.MpiTransport(comm)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with sigint_in_reduce(ctx.rank, on, 5):
            expect_stop(comm, ck, lambda: dd.cg(DA, np.ones(DA.n_local), rtol=1e-12, transport=tr),
                        on, lambda e: type(e) is KeyboardInterrupt,
                        f"rank {on}: stopped by KeyboardInterrupt in a SIGINT handler")
        ck.that(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                "the solve did not restore the SIGINT handler")
    finally:
        signal.signal(signal.SIGINT, previous)
    n = tr.stats.allreduce_calls
    ck.that(same_everywhere(comm, n) and n in (5, 6),
            f"{n} all-reduces on rank {ctx.rank}: every rank should stop at the 5th (or 6th)")
    still_works(comm, ck)


# --------------------------------------------------------------------------- cases: cg1
# The single-reduction CG (dd.cg(..., single_reduction=True); dpsolve/methods/cg1), variant host.
def _cg1_solve(ctx, ck, dtype, M=None, partition=None):
    """Against the serial reference cg1 on the global system: info, iterations (+-2: other sums),
    x; bit for bit on one rank; one all-reduce per iteration (||b||, x0.any(), the set-up's dots,
    one per iteration, the true residual: iterations + 4, and 3 more per restart)."""
    import dpsolve.distributed as dd
    from dpsolve.methods.cg1.reference import cg1
    comm = ctx.comm
    A, b = problem("cg", dtype)
    part = dd.Partition.from_sizes(partition) if partition is not None else None
    DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, comm, partition=part)
    rtol = rtol_of(dtype)
    x, info, rep = dd.cg(DA, mine(b, DA), rtol=rtol, M=M, full_output=True,
                         single_reduction=True)
    inv = (1.0 / A.diagonal()).astype(dtype)
    xs, infos, its_s = cg1(A.__matmul__, b, np.zeros_like(b),
                           atol=rtol * float(np.linalg.norm(b)), maxiter=10 * A.shape[0],
                           psolve=(lambda r: inv * r) if M else None)
    ck.that(same_everywhere(comm, (info, rep.iterations, rep.residual_norm)),
            "info / iterations / residual differ by rank")
    ck.that(info == infos == 0, f"info {info}, serial cg1 {infos}")
    ck.that(abs(rep.iterations - its_s) <= 2, f"{rep.iterations} iterations, serial {its_s}")
    err = float(np.abs(x - mine(xs, DA)).max(initial=0.0)) / float(np.abs(xs).max())
    ck.that(err <= (1e-10 if np.dtype(dtype).char in "dD" else 1e-4),
            f"x differs from the serial cg1's by {err:.3g}")
    if ctx.size == 1 and partition is None:
        ck.that(np.array_equal(x, xs) and rep.iterations == its_s,
                "one rank is not bit for bit the serial cg1")
    ck.that(rep.single_reduction and rep.method == "cg", "the report does not say cg1")
    ck.that(rep.allreduce_calls == rep.iterations + 4 + 3 * rep.restarts,
            f"{rep.allreduce_calls} all-reduces for {rep.iterations} iterations "
            f"({rep.restarts} restarts)")
    ck.note(f"cg1 {np.dtype(dtype).name} M={M}: it={rep.iterations} (serial {its_s}) "
            f"allreduce={rep.allreduce_calls} err={err:.2g}")


@case("cg1")
def _cg1(ctx, ck):
    for dtype in ("float32", "float64", "complex128"):
        for M in (None, "jacobi"):
            _cg1_solve(ctx, ck, dtype, M)
    for sizes in partitions_for(ctx.size, 81):
        _cg1_solve(ctx, ck, "float64", "jacobi", partition=sizes)


@case("cg1-dots")
def _cg1_dots(ctx, ck):
    """DistributedSpace.dots over the ranks: one all-reduce, each value the bits of a separate
    dot (rank-order sums, slot by slot)."""
    import dpsolve.distributed as dd
    n = 1000
    part = dd.Partition.even(n, ctx.size)
    lo, hi = part.rows(ctx.rank)
    rng = np.random.default_rng(11)
    for dtype in ("float32", "float64", "complex128"):
        vs = []
        for _ in range(3):
            v = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
            if np.dtype(dtype).kind == "c":
                v = v + 1j * rng.standard_normal(n)
            vs.append(v.astype(dtype)[lo:hi])
        r, u, w = vs
        tr = dd.MpiTransport(ctx.comm)
        space = dd.DistributedSpace(tr, ctx.rank, ctx.size, dtype)
        got = space.dots([(r, u), (u, w), (r, r)])
        ck.that(tr.stats.allreduce_calls == 1, f"{dtype}: dots made "
                f"{tr.stats.allreduce_calls} all-reduces")
        want = [space.dot(r, u), space.dot(u, w), space.dot(r, r)]
        ck.that([g.tobytes() for g in got] == [v.tobytes() for v in want],
                f"{dtype}: dots {got} != dot {want}")
        ck.that(same_everywhere(ctx.comm, [g.tobytes() for g in got]),
                f"{dtype}: dots differ by rank")


@case("bad-cg1-mix", min_ranks=2)
def _bad_cg1_mix(ctx, ck):
    import dpsolve.distributed as dd
    DA = dd.DistributedMatrix.laplace3d(3, 3, 3, ctx.comm)
    b = np.ones(DA.n_local)
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.cg(DA, b, single_reduction=ctx.rank == 0),
                 "ranks disagree on single_reduction")
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.solve("bicg", DA, b, single_reduction=True),
                 "single_reduction is a keyword of cg only")
    still_works(ctx.comm, ck)


# --------------------------------------------------------------------------- the runner
def _has_gpu():
    from dpsolve._device import status
    return status().ok


# --------------------------------------------------------------------------- GPU cases
# Run only with --gpu (tests/test_distributed_gpu.py, on a GPU machine): variant "cuda" with the
# launch's transport (--transport), against the single-GPU solve (variant "cuda") of the same
# global system.
GPU_CASES = {}


def gpu_case(name, min_ranks=1):
    def deco(fn):
        GPU_CASES[name] = (fn, min_ranks)
        return fn
    return deco


def _gpu_system(ctx, method, dtype, *, laplace=None, partition=None):
    """(A, b, DA): the global system (every rank) and its distributed matrix: a 3-D Laplace of
    side ``laplace`` generated in place, or ``problem(method)`` scattered from rank 0 over
    ``partition`` (row counts; None: even)."""
    import dpsolve.distributed as dd
    from dpsolve.matrices import laplace_3d
    if laplace:
        A = sp.csr_array(laplace_3d(laplace).astype(dtype))
        b = (A @ np.ones(A.shape[0])).astype(dtype)
        DA = dd.DistributedMatrix.laplace3d(laplace, laplace, laplace, ctx.comm, dtype=dtype)
        return A, b, DA
    A, b = problem(method, dtype)
    part = dd.Partition.from_sizes(partition) if partition is not None else None
    DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm,
                                          partition=part)
    return A, b, DA


def _gpu_solve_case(ctx, ck, method, dtype, *, M=None, partition=None, laplace=None):
    import cupy

    import dpsolve
    import dpsolve.distributed as dd
    comm = ctx.comm
    A, b, DA = _gpu_system(ctx, method, dtype, laplace=laplace, partition=partition)
    b_loc = mine(b, DA).copy()
    b_keep = b_loc.copy()
    kw = dict(rtol=rtol_of(dtype), M=M)
    x, info, rep = getattr(dd, method)(DA, b_loc, full_output=True, variant="cuda",
                                       transport=ctx.transport, **kw)
    xs, infos, reps = getattr(dpsolve, method)(A, b, variant="cuda", full_output=True, **kw)
    infos_all = comm.allgather(info)
    ck.that(all(i == infos_all[0] for i in infos_all), f"info differs by rank: {infos_all}")
    ck.that(info == infos, f"info {info}, single GPU {infos}")
    ck.that(isinstance(x, np.ndarray) and x.dtype == np.dtype(dtype),
            f"x is {type(x).__name__} {getattr(x, 'dtype', '')}: NumPy in, NumPy out")
    ck.that(np.array_equal(b_loc, b_keep), "b was modified")
    ref = mine(xs, DA)
    scale = float(np.abs(xs).max())
    err = float(np.abs(x - ref).max()) / scale if x.size else 0.0
    f64 = np.dtype(dtype).char in "dD"
    ck.that(err <= (1e-9 if f64 else 2e-3), f"x differs from the single-GPU x by {err:.3g}")
    ck.that(abs(rep.iterations - reps.iterations) <= (1 if f64 else 3),
            f"{rep.iterations} iterations, single GPU {reps.iterations}")
    ck.that(info != 0 or rep.residual_norm <= rep.tolerance,
            f"true residual {rep.residual_norm:.3g} above {rep.tolerance:.3g}")
    ck.that(rep.transport == ctx.transport.name and rep.variant == "cuda", "report names")
    exchanges = DA.halo.n_send > 0 or DA.halo.n_ghost > 0      # this rank's own counts
    if ctx.size > 1:
        ck.that(rep.allreduce_calls >= rep.iterations
                and (rep.halo_calls >= rep.iterations or not exchanges),
                f"report counts {rep.allreduce_calls} / {rep.halo_calls}")
    ck.that(same_everywhere(comm, (rep.iterations, rep.residual_norm)), "report by rank")
    # the communication is part of the solve: timed as waits, not as the NCCL kernels' spans
    # (which counted their queueing behind the local SpMV: up to 1.4x the solve on two H200)
    ck.that(all(c <= w for c, w in zip(rep.comm_times, rep.wall_times)),
            f"communication {rep.comm_times} s over the calls' {rep.wall_times} s")
    cupy.cuda.Device().synchronize()
    ck.note(f"{method} {np.dtype(dtype).name}: info={info} it={rep.iterations} "
            f"(single GPU {reps.iterations}) restarts={rep.restarts} err={err:.2g} "
            f"comm={rep.comm_time:.3g}s")


for _m in ("cg", "bicg", "bicgstab"):
    for _dt in ("float32", "float64"):
        gpu_case(f"gpu-{_m}-{_dt}")(
            lambda ctx, ck, m=_m, dt=_dt: _gpu_solve_case(ctx, ck, m, dt))
    gpu_case(f"gpu-jacobi-{_m}")(
        lambda ctx, ck, m=_m: _gpu_solve_case(ctx, ck, m, "float64", M="jacobi"))
gpu_case("gpu-complex128-bicgstab")(
    lambda ctx, ck: _gpu_solve_case(ctx, ck, "bicgstab", "complex128"))
gpu_case("gpu-extreme-A")(
    lambda ctx, ck: _extreme_a(ctx, ck, variant="cuda", transport=ctx.transport))
gpu_case("gpu-laplace-cg")(
    lambda ctx, ck: _gpu_solve_case(ctx, ck, "cg", "float64", laplace=20))


@gpu_case("gpu-partitions")
def _gpu_partitions(ctx, ck):
    for sizes in partitions_for(ctx.size, 81):
        _gpu_solve_case(ctx, ck, "cg", "float64", partition=sizes)


def _graph_case(ctx, ck, dtype, M=None, laplace=None):
    """Variant graph (a conditional-WHILE CUDA graph per rank with the NCCL calls captured)
    against variant cuda on the same transport and the single-GPU solve: the same x within
    rounding, the same iterations, the same all-reduce and halo counts. With the mpi transport
    it must refuse, the same way on every rank."""
    import dpsolve
    import dpsolve.distributed as dd
    comm = ctx.comm
    A, b, DA = _gpu_system(ctx, "cg", dtype, laplace=laplace)
    b_loc = mine(b, DA).copy()
    kw = dict(rtol=rtol_of(dtype), M=M, transport=ctx.transport, full_output=True)
    if ctx.transport.name != "nccl":
        expect_error(comm, ck, ValueError, lambda: dd.cg(DA, b_loc, variant="graph", **kw),
                     "variant 'graph'", "transport 'nccl'")
        return
    xg, ig, rg = dd.cg(DA, b_loc, variant="graph", **kw)
    xc, ic, rc = dd.cg(DA, b_loc, variant="cuda", **kw)
    xs, infos, reps = dpsolve.cg(A, b, variant="cuda", full_output=True, rtol=rtol_of(dtype),
                                 M=M)
    f64 = np.dtype(dtype) == np.float64
    scale = float(np.abs(xs).max())
    err_c = float(np.abs(xg - xc).max()) / scale if xg.size else 0.0
    err_s = float(np.abs(xg - mine(xs, DA)).max()) / scale if xg.size else 0.0
    ck.that(ig == ic == infos == 0, f"info graph {ig}, cuda {ic}, single GPU {infos}")
    ck.that(isinstance(xg, np.ndarray) and xg.dtype == np.dtype(dtype), "NumPy in, NumPy out")
    ck.that(err_c <= (1e-12 if f64 else 1e-5), f"graph x differs from cuda's by {err_c:.3g}")
    ck.that(err_s <= (1e-9 if f64 else 2e-3), f"graph x differs from single GPU's by {err_s:.3g}")
    ck.that(rg.iterations == rc.iterations, f"graph {rg.iterations} it, cuda {rc.iterations}")
    ck.that(abs(rg.iterations - reps.iterations) <= (1 if f64 else 3),
            f"graph {rg.iterations} it, single GPU {reps.iterations}")
    ck.that(rg.residual_norm <= rg.tolerance, f"true residual {rg.residual_norm:.3g}")
    if rg.restarts == rc.restarts:
        ck.that((rg.allreduce_calls, rg.halo_calls) == (rc.allreduce_calls, rc.halo_calls),
                f"graph counts {rg.allreduce_calls}/{rg.halo_calls}, cuda "
                f"{rc.allreduce_calls}/{rc.halo_calls}")
    ck.that(rg.comm_time is None and rg.variant == "graph", "graph report: comm not timed")
    ck.note(f"graph {np.dtype(dtype).name} M={M}: it={rg.iterations} (cuda {rc.iterations}, "
            f"single {reps.iterations}) err={err_s:.2g} allreduce={rg.allreduce_calls} "
            f"wall graph {rg.wall_time * 1e3:.2f} ms, cuda {rc.wall_time * 1e3:.2f} ms")


gpu_case("gpu-graph-cg-float64")(lambda ctx, ck: _graph_case(ctx, ck, "float64"))
gpu_case("gpu-graph-cg-float32")(lambda ctx, ck: _graph_case(ctx, ck, "float32"))
gpu_case("gpu-graph-jacobi")(lambda ctx, ck: _graph_case(ctx, ck, "float64", M="jacobi"))
gpu_case("gpu-graph-laplace")(lambda ctx, ck: _graph_case(ctx, ck, "float64", laplace=20))


@gpu_case("gpu-prepared")
def _gpu_prepared(ctx, ck):
    """dd.prepare on the GPU variants (cuda; graph with NCCL): the rows, halo and graph kept
    between solves, each solve the one-shot call's x, info and counts bit for bit (b changing,
    b of another dtype, an x0); closed, nothing kept."""
    _, b, DA = _gpu_system(ctx, "cg", "float64", laplace=12)
    b1 = mine(b, DA).copy()
    b2 = np.cos(np.arange(DA.n_local, dtype=np.float64) + DA.partition.rows(ctx.rank)[0])
    kw = dict(rtol=1e-10)
    solves = [(b1, None, kw), (b2, None, kw), (b1.astype(np.float32), None, kw), (b2, b1, kw),
              (b1, None, kw)]
    variants = ["cuda"] + (["graph"] if ctx.transport.name == "nccl" else [])
    for variant in variants:
        for M in (None, "jacobi"):
            P = _prepared_against_one_shot(ctx, ck, DA, "cg", solves, M=M, variant=variant,
                                           transport=ctx.transport)
            ck.that(not P.cache.states, f"{variant}: closed, yet states are kept")
    P = _prepared_against_one_shot(ctx, ck, DA, "bicgstab", solves[:2], variant="cuda",
                                   transport=ctx.transport)
    D32 = DA.astype(np.float32)                   # the working dtype from b: float32, then 64
    for variant in variants:
        _prepared_against_one_shot(ctx, ck, D32, "cg", [(b1.astype(np.float32), None, {}),
                                                        (b1, None, kw)],
                                   variant=variant, transport=ctx.transport)
    ck.note(f"variants {variants}")


@gpu_case("gpu-device-vectors")
def _gpu_device_vectors(ctx, ck):
    """CuPy b and x0 on the GPU variants (one-shot and prepared): solved where they are, x
    comes back as CuPy, bit for bit the NumPy call's x, the caller's arrays untouched; a float16
    CuPy b (solved in float32 on a float32 A); a NaN in one rank's CuPy b or x0 is the same
    error on every rank; the host variant takes a CuPy b too (x as CuPy)."""
    import cupy

    import dpsolve.distributed as dd
    from dpsolve.distributed import gpu
    gpu.select_device(ctx.comm)
    _, b, DA = _gpu_system(ctx, "cg", "float64", laplace=10)
    b1 = mine(b, DA).copy()
    x0 = np.cos(np.arange(DA.n_local, dtype=np.float64) + DA.partition.rows(ctx.rank)[0])
    bd, x0d = cupy.asarray(b1), cupy.asarray(x0)
    keep = (bd.copy(), x0d.copy())
    variants = ["cuda"] + (["graph"] if ctx.transport.name == "nccl" else [])
    for variant in variants:
        kw = dict(rtol=1e-10, variant=variant, transport=ctx.transport, full_output=True)
        with dd.prepare(DA, "cg", variant=variant, transport=ctx.transport) as P:
            for guess_h, guess_d in ((None, None), (x0, x0d)):
                xh, ih, rh = dd.cg(DA, b1, guess_h, **kw)
                xd, i_d, rd = dd.cg(DA, bd, guess_d, **kw)
                xp, ip, rp = P.solve(bd, guess_d, rtol=1e-10, full_output=True)
                what = f"{variant} x0={'given' if guess_d is not None else None}"
                ck.that(isinstance(xd, cupy.ndarray) and isinstance(xp, cupy.ndarray)
                        and isinstance(xh, np.ndarray), f"{what}: CuPy in, CuPy out")
                ck.that(ih == i_d == ip == 0 and rh.iterations == rd.iterations
                        == rp.iterations, f"{what}: info {ih}/{i_d}/{ip}, iterations "
                        f"{rh.iterations}/{rd.iterations}/{rp.iterations}")
                ck.that(np.array_equal(xh, xd.get()) and np.array_equal(xh, xp.get()),
                        f"{what}: the CuPy b's x differs from the NumPy b's")
                ck.that(bool((bd == keep[0]).all()) and bool((x0d == keep[1]).all()),
                        f"{what}: the caller's CuPy b or x0 was modified")
    D32, half = DA.astype(np.float32), b1.astype(np.float16)
    xf, info, rep = dd.cg(D32, cupy.asarray(half), variant="cuda", transport=ctx.transport,
                          full_output=True)
    xn, info_n, rep_n = dd.cg(D32, half, variant="cuda", transport=ctx.transport,
                              full_output=True)
    ck.that(isinstance(xf, cupy.ndarray) and info == info_n == 0 and rep.dtype == rep_n.dtype
            and xf.dtype == xn.dtype and np.array_equal(xf.get(), xn),
            f"float16 b: CuPy {xf.dtype} info {info} ({rep.dtype}), NumPy {xn.dtype} info "
            f"{info_n} ({rep_n.dtype})")
    for name in ("b", "x0"):
        bad = (bd if name == "b" else x0d).copy()
        if ctx.rank == ctx.size - 1 and bad.size:
            bad[0] = cupy.nan
        args = (bad, None) if name == "b" else (bd, bad)
        expect_error(ctx.comm, ck, ValueError,
                     lambda a=args: dd.cg(DA, *a, variant="cuda", transport=ctx.transport),
                     f"{name} contains NaN or Inf", f"rank {ctx.size - 1}")
    if ctx.transport.name == "mpi":
        xh = dd.cg(DA, bd, rtol=1e-10)[0]
        ck.that(isinstance(xh, cupy.ndarray)
                and np.array_equal(xh.get(), dd.cg(DA, b1, rtol=1e-10)[0]),
                "host variant: a CuPy b gives the NumPy b's x, as CuPy")
    ck.note(f"variants {variants}")


@gpu_case("gpu-block")
def _gpu_block(ctx, ck):
    """A block b (n_local, 3) on the GPU variants (cuda; graph with NCCL), NumPy and CuPy: each
    column the one-shot solve of that column bit for bit, X of b's kind, one set-up."""
    import cupy

    import dpsolve.distributed as dd
    from dpsolve.distributed import gpu
    gpu.select_device(ctx.comm)
    _, b, DA = _gpu_system(ctx, "cg", "float64", laplace=10)
    rows = np.arange(DA.n_local, dtype=np.float64) + DA.partition.rows(ctx.rank)[0]
    B = np.stack([mine(b, DA), np.cos(rows), np.ones(DA.n_local)], axis=1)
    variants = ["cuda"] + (["graph"] if ctx.transport.name == "nccl" else [])
    for variant in variants:
        kw = dict(rtol=1e-10, variant=variant, transport=ctx.transport)
        for kind, rhs in (("numpy", B), ("cupy", cupy.asarray(B))):
            X, info, rep = dd.cg(DA, rhs, full_output=True, **kw)
            ck.that(type(X) is type(rhs) and X.shape == B.shape and (info == 0).all()
                    and rep.k == 3, f"{variant} {kind}: {type(X).__name__} {X.shape} {info}")
            Xh = X.get() if kind == "cupy" else X
            for j in range(3):
                xj = dd.cg(DA, B[:, j].copy(), **kw)[0]
                ck.that(np.array_equal(Xh[:, j], xj), f"{variant} {kind}: column {j} differs "
                                                      f"from its one-shot solve")
    ck.note(f"variants {variants}")


@gpu_case("gpu-graph-refuses")
def _graph_refuses(ctx, ck):
    """bicgstab, a callback: variant graph says what to use instead, on every rank."""
    import dpsolve.distributed as dd
    A, b = problem("cg", "float64")
    DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm)
    b_loc = mine(b, DA).copy()
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.bicgstab(DA, b_loc, variant="graph", transport=ctx.transport),
                 "variant 'graph' runs cg")
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.cg(DA, b_loc, variant="graph", transport=ctx.transport,
                               callback=lambda x: None), "callback")


@gpu_case("gpu-energy")
def _gpu_energy(ctx, ck):
    """energy=True on the GPU: NVML's counter read per rank, each physical GPU counted once
    (ranks sharing this machine's GPUs), and a mean power a GPU can draw."""
    import cupy

    import dpsolve.distributed as dd
    DA = dd.DistributedMatrix.laplace3d(60, 60, 60, ctx.comm)
    b = np.ones(DA.n_local)
    _, info, rep = dd.cg(DA, b, rtol=1e-30, maxiter=3000, variant="cuda",
                         transport=ctx.transport, energy=True, full_output=True)
    gpus = min(ctx.size, cupy.cuda.runtime.getDeviceCount())
    ck.that(rep.energy_joules is not None, f"no energy figure: {rep.energy_note}")
    ck.that(len(rep.energy_per_gpu) == gpus, f"{len(rep.energy_per_gpu)} GPUs in the report "
                                             f"for {ctx.size} ranks on {gpus} GPU(s)")
    if rep.energy_joules is not None:
        watts = rep.energy_joules / rep.wall_time / gpus
        ck.that(20 < watts < 1200, f"mean power {watts:.0f} W per GPU over the solve")
        ck.note(f"{rep.energy_joules:.2f} J over {rep.wall_time:.2f} s on {gpus} GPU(s): "
                f"{watts:.0f} W; it={rep.iterations}")


@gpu_case("gpu-halo-spmv")
def _gpu_halo_spmv(ctx, ck):
    """The GPU halo SpMV (HaloMatrix over the launch's transport) against the host one
    (DistributedMatrix.matvec over MPI) on the irregular partitions, every local format, 20
    random vectors each, and the same x twice gives the same bits (a race would not)."""
    import cupy

    import dpsolve.distributed as dd
    from dpsolve.backends.cuda import CudaBackend
    from dpsolve.cuda import ops
    from dpsolve.distributed.gpu import DistributedExecutor, HaloMatrix
    from dpsolve.formats.csr import to_csr
    A, _ = problem("cg", "float64")
    host_tr = dd.MpiTransport(ctx.comm)
    stream = cupy.cuda.Stream(non_blocking=True)
    for sizes in partitions_for(ctx.size, A.shape[0]):
        DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm,
                                              partition=dd.Partition.from_sizes(sizes))
        for fmt in CudaBackend.formats:
            with stream:
                local = ops.DeviceMatrix.build(to_csr(DA.local.tocsr(), np.float64), fmt)
                H = HaloMatrix(local, DA, np.float64, ctx.transport)
            ex = DistributedExecutor(stream, np.float64, ctx.transport)
            worst, unstable = 0.0, 0
            rng = np.random.default_rng(11 + ctx.rank)
            for _ in range(20):
                xh = rng.standard_normal(DA.n_local)
                want = DA.matvec(xh, host_tr)
                with stream:
                    x = cupy.asarray(xh)
                    y1 = cupy.full(DA.n_local, np.nan)
                    y2 = cupy.full(DA.n_local, np.nan)
                with ex:
                    ex.spmv(H, x, y1)
                    ex.spmv(H, x, y2)
                stream.synchronize()
                g1, g2 = y1.get(), y2.get()
                unstable += not np.array_equal(g1, g2)
                if g1.size:
                    scale = max(1.0, float(np.abs(want).max()))
                    worst = max(worst, float(np.nan_to_num(np.abs(g1 - want), nan=np.inf).max())
                                / scale)
            ck.that(worst <= 1e-13, f"partition {sizes} {fmt}: GPU halo SpMV differs from the "
                                    f"host one by {worst:.3g}")
            ck.that(unstable == 0, f"partition {sizes} {fmt}: {unstable} of 20 repeated SpMVs "
                                   f"gave other bits")
    ck.note(f"{len(partitions_for(ctx.size, A.shape[0]))} partitions x "
            f"{len(CudaBackend.formats)} formats ok")


@gpu_case("gpu-bad-nan")
def _gpu_bad_nan(ctx, ck):
    import dpsolve.distributed as dd
    A, b = problem("cg", "float64")
    DA = dd.DistributedMatrix.from_global(A if ctx.rank == 0 else None, ctx.comm)
    b_loc = mine(b, DA).copy()
    if ctx.rank == ctx.size - 1 and b_loc.size:
        b_loc[0] = np.nan
    expect_error(ctx.comm, ck, ValueError,
                 lambda: dd.cg(DA, b_loc, variant="cuda", transport=ctx.transport), "NaN")


# ---- the single-reduction CG (dd.cg(..., single_reduction=True), dpsolve/methods/cg1/gpu.py)
# on variant cuda: against the single-GPU CG (dpsolve.cg, variant cuda) of the same system, which
# it equals in exact arithmetic; ONE all-reduce per iteration: ||b|| (host), the set-up's one,
# one per iteration, the true residual (host) -- iterations + 3, and 2 more per restart -- where
# the standard CG makes 2 per iteration (its <r, z> and <r, r> share one with Jacobi).
def _gpu_cg1_case(ctx, ck, dtype, *, M=None, partition=None, laplace=None):
    import cupy

    import dpsolve
    import dpsolve.distributed as dd
    comm = ctx.comm
    A, b, DA = _gpu_system(ctx, "cg", dtype, laplace=laplace, partition=partition)
    b_loc = mine(b, DA).copy()
    kw = dict(rtol=rtol_of(dtype), M=M)
    x, info, rep = dd.cg(DA, b_loc, full_output=True, variant="cuda", transport=ctx.transport,
                         single_reduction=True, **kw)
    _, _, std = dd.cg(DA, b_loc, full_output=True, variant="cuda", transport=ctx.transport,
                      **kw)
    xs, infos, reps = dpsolve.cg(A, b, variant="cuda", full_output=True, **kw)
    ck.that(same_everywhere(comm, (info, rep.iterations, rep.residual_norm)), "report by rank")
    ck.that(info == infos == 0, f"info {info}, single GPU {infos}")
    ck.that(isinstance(x, np.ndarray) and x.dtype == np.dtype(dtype), "NumPy in, NumPy out")
    scale = float(np.abs(xs).max())
    err = float(np.abs(x - mine(xs, DA)).max(initial=0.0)) / scale
    f64 = np.dtype(dtype).char in "dD"
    # one iteration more or fewer moves x by its last correction, ~ cond * rtol
    bound = (1e-9 if rep.iterations == reps.iterations else 1e-6) if f64 else 2e-3
    ck.that(err <= bound, f"x differs from the single-GPU CG's by {err:.3g}")
    ck.that(abs(rep.iterations - reps.iterations) <= (1 if f64 else 3),
            f"{rep.iterations} iterations, single-GPU CG {reps.iterations}")
    ck.that(rep.residual_norm <= rep.tolerance,
            f"true residual {rep.residual_norm:.3g} above {rep.tolerance:.3g}")
    ck.that(rep.single_reduction and rep.variant == "cuda" and rep.method == "cg",
            "report names")
    want = rep.iterations + 3 + 2 * rep.restarts
    ck.that(rep.allreduce_calls == want,
            f"{rep.allreduce_calls} all-reduces, expected {want} (iterations + 3, "
            f"{rep.restarts} restarts)")
    ck.that(std.iterations < 3 or std.allreduce_calls > rep.allreduce_calls,
            f"standard CG: {std.allreduce_calls} all-reduces, cg1: {rep.allreduce_calls}")
    # the standard CG: 2 per iteration, with or without Jacobi (<r, z> and <r, r> in one)
    want_std = 2 * std.iterations + 3 + 2 * std.restarts
    ck.that(std.allreduce_calls == want_std,
            f"standard CG: {std.allreduce_calls} all-reduces, expected {want_std}")
    cupy.cuda.Device().synchronize()
    ck.note(f"cg1 {np.dtype(dtype).name} M={M}: it={rep.iterations} (single GPU "
            f"{reps.iterations}) allreduce={rep.allreduce_calls} (standard "
            f"{std.allreduce_calls} for {std.iterations} it) err={err:.2g}")


for _dt in ("float32", "float64"):
    gpu_case(f"gpu-cg1-{_dt}")(lambda ctx, ck, dt=_dt: _gpu_cg1_case(ctx, ck, dt))
    gpu_case(f"gpu-cg1-jacobi-{_dt}")(
        lambda ctx, ck, dt=_dt: _gpu_cg1_case(ctx, ck, dt, M="jacobi"))
gpu_case("gpu-cg1-laplace")(
    lambda ctx, ck: _gpu_cg1_case(ctx, ck, "float64", M="jacobi", laplace=20))


@gpu_case("gpu-cg1-partitions")
def _gpu_cg1_partitions(ctx, ck):
    for sizes in partitions_for(ctx.size, 81):
        _gpu_cg1_case(ctx, ck, "float64", M="jacobi", partition=sizes)


@gpu_case("gpu-user-code-stops")
def _gpu_user_code_stops(ctx, ck):
    """Variant cuda: a callback raising at its 3rd call on one rank (KeyboardInterrupt on the
    last rank; ValueError on rank 0): that rank's next all-reduce sends NaN, so every rank's
    loop ends within the next iteration (no callback is called more than once more) and the
    true residual's all-reduce stops every rank; the KeyboardInterrupt is raised again on its
    rank, the others raise DistributedError naming it (for the ValueError: every rank). Before,
    a KeyboardInterrupt left the others waiting forever and a ValueError let every rank run the
    whole solve."""
    import dpsolve.distributed as dd
    from dpsolve.distributed import DistributedError
    comm = ctx.comm
    on = ctx.size - 1
    for method, kw in (("cg", {}), ("cg", {"single_reduction": True}), ("bicg", {}),
                       ("bicgstab", {})):
        A, b, DA = _gpu_system(ctx, method, "float64")
        b_loc = mine(b, DA).copy()

        def solve(callback):
            return dd.solve(method, DA, b_loc, rtol=1e-10, variant="cuda",
                            transport=ctx.transport, callback=callback, **kw)
        stop = _raiser(ctx, 3, on, KeyboardInterrupt)
        expect_stop(comm, ck, lambda: solve(stop), on,
                    lambda e: e is stop.raised and e is not None,
                    f"rank {on}: stopped by KeyboardInterrupt in the callback")
        bad = _raiser(ctx, 3, 0, lambda: ValueError("bad callback"))
        expect_error(comm, ck, DistributedError, lambda: solve(bad),
                     "rank 0: raised in the callback: ValueError: bad callback")
        for cb in (stop, bad):
            ck.that(cb.calls <= 4, f"{method} {kw}: the callback was called {cb.calls} times on "
                    f"rank {ctx.rank}; every rank should stop after the 3rd or 4th")
    still_works(comm, ck)


@gpu_case("gpu-sigint-one-rank")
def _gpu_sigint_one_rank(ctx, ck):
    """Variant cuda: a SIGINT to one rank from inside its 5th device all-reduce (dpsolve's own
    code): deferred, that rank's all-reduces send NaN, every rank stops; that rank raises
    KeyboardInterrupt, the others DistributedError naming it, after the same number of
    all-reduces everywhere. Before, the others waited forever."""
    import signal

    import dpsolve.distributed as dd
    from dpsolve.distributed.gpu import DistributedExecutor
    comm = ctx.comm
    on = ctx.size // 2
    _, b, DA = _gpu_system(ctx, "cg", "float64", laplace=12)
    b_loc = mine(b, DA).copy()
    before = ctx.transport.stats.copy()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with sigint_in(DistributedExecutor, "allreduce", ctx.rank, on, 5):
            expect_stop(comm, ck, lambda: dd.cg(DA, b_loc, rtol=1e-12, variant="cuda",
                                                transport=ctx.transport),
                        on, lambda e: type(e) is KeyboardInterrupt,
                        f"rank {on}: stopped by KeyboardInterrupt in a SIGINT handler")
    finally:
        signal.signal(signal.SIGINT, previous)
    n = ctx.transport.stats.since(before).allreduce_calls
    ck.that(same_everywhere(comm, n), f"{n} all-reduces on rank {ctx.rank}: not the same on "
                                      f"every rank")
    ck.note(f"stopped after {n} all-reduces")
    still_works(comm, ck)


class Ctx:
    def __init__(self, comm):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.transport = None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", help="case names (default: all)")
    p.add_argument("--out", default=os.environ.get("DPSOLVE_MPI_CASES_OUT"),
                   help="JSON-lines output file (default $DPSOLVE_MPI_CASES_OUT)")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    p.add_argument("--gpu", action="store_true", help="the GPU cases (variant cuda) instead")
    p.add_argument("--transport", default="mpi", help="the GPU cases' transport (mpi, nccl)")
    args = p.parse_args(argv)
    cases = GPU_CASES if args.gpu else CASES
    if args.list:
        print("\n".join(cases))
        return 0
    if not args.out:
        p.error("--out FILE (or $DPSOLVE_MPI_CASES_OUT) is required")
    unknown = [c for c in args.cases if c not in cases]
    if unknown:
        p.error(f"unknown case(s): {', '.join(unknown)}")
    from mpi4py import MPI
    ctx = Ctx(MPI.COMM_WORLD)
    if args.gpu:                       # one transport for the launch (NCCL's set-up is slow)
        from dpsolve.distributed.transport import TRANSPORTS
        ctx.transport = TRANSPORTS[args.transport](ctx.comm)
    fd = os.open(args.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for name in args.cases or list(cases):
            fn, min_ranks = cases[name]
            t0 = time.perf_counter()
            ck = Check()
            if ctx.size < min_ranks:
                ck.note(f"needs {min_ranks} ranks: nothing to check with {ctx.size}")
            else:
                try:
                    fn(ctx, ck)
                except Exception:          # noqa: BLE001 - reported as the case's failure
                    ck.fails.append("raised: " + traceback.format_exc(limit=6))
            rec = {"case": name, "rank": ctx.rank, "size": ctx.size, "ok": not ck.fails,
                   "detail": "; ".join(ck.fails) if ck.fails else "; ".join(ck.notes),
                   "seconds": round(time.perf_counter() - t0, 4)}
            os.write(fd, (json.dumps(rec) + "\n").encode())      # one write: one whole line
            ctx.comm.Barrier()
    finally:
        os.close(fd)
        if ctx.transport is not None:
            ctx.transport.close()      # NCCL's communicator: a run that skips this can hang
    return 0


if __name__ == "__main__":
    sys.exit(main())
