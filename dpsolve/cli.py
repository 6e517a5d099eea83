"""The ``dpsolve`` command line.

    dpsolve info                  device, driver and CUDA versions, NVML energy support, variants
    dpsolve solve MATRIX          solve A x = b (x* = ones, b = A x*, x0 = 0) and print the report
    dpsolve study                 the paper's energy study (Table 2, Figure 7) on the default set
    dpsolve study --paper         ... on the paper's six SuiteSparse matrices and A252
    dpsolve fetch GROUP/NAME      download a SuiteSparse matrix into the local cache
    dpsolve warm                  compile every kernel now, side by side (first calls then wait
                                  for none)

`dpsolve COMMAND --help` describes each command. Errors are one line on stderr, exit status 1
(2 for a malformed command line); `solve` exits 0 when the solve converged, 3 when it did not,
4 on a breakdown; Ctrl-C at any point, start-up included, is one line and exit status 130.
So that this holds while modules are still being imported, this module imports only os and sys
at its top: everything else is imported inside main().
"""
from __future__ import annotations

import os
import sys


def _parser_class():
    import argparse

    class _Parser(argparse.ArgumentParser):
        """argparse, but a malformed command line is one line on stderr (and exit status 2)."""

        def error(self, message):
            self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
    return _Parser


DTYPES = ("float64", "float32", "complex128", "complex64")
FORCE_HELP = ("build a generated problem, or read a matrix file, even when its estimated memory "
              "exceeds what this machine has available (also: DPSOLVE_NO_SIZE_GUARD=1)")

# exit statuses; solve's tell its result (SciPy's info: 0, > 0, < 0)
CONVERGED, ERROR, USAGE, NOT_CONVERGED, BREAKDOWN, INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_STATUS_HELP = f"""exit status:
  {CONVERGED:<4} converged (info = 0)
  {ERROR:<4} an error (one line on stderr)
  {USAGE:<4} a malformed command line
  {NOT_CONVERGED:<4} not converged (info > 0: maxiter reached)
  {BREAKDOWN:<4} a breakdown (info < 0)
  {INTERRUPTED:<4} interrupted (Ctrl-C)"""


def exit_status(info: int) -> int:
    """solve's exit status for the solver's info."""
    return CONVERGED if info == 0 else NOT_CONVERGED if info > 0 else BREAKDOWN


def _count(n: int, one: str, many: str | None = None) -> str:
    """"1 matrix", "2 matrices", "0 warm-up solves"."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _oneline(text) -> str:
    return " ".join(str(text).split())


def _show_warning(message, category, filename, lineno, file=None, line=None):
    text = _oneline(message)
    text = text[len("dpsolve: "):] if text.startswith("dpsolve: ") else text
    _stderr_line(f"dpsolve: warning: {text}")


def _number(kind, low, *, strict=False):
    """An argparse type: an int (kind int) or a finite float >= low (> low when ``strict``),
    checked before any work starts; a bad one is a malformed command line (exit status 2)."""
    if kind is int:
        what = f"an integer >= {low}"
    else:
        what = "a positive finite number" if (strict and low == 0) else \
            f"a finite number {'>' if strict else '>='} {low:g}"

    def parse(text):
        import argparse
        import math
        try:
            v = int(text) if kind is int else float(text)
        except ValueError:
            v = None
        if v is None or (kind is float and not math.isfinite(v)) or v < low or \
                (strict and v == low):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v
    parse.__name__ = kind.__name__     # argparse's fallback message names the type
    return parse


def _csv_list(choices=None):
    """A comma-separated list (``cg,bicg``), each item checked against ``choices``."""
    def parse(text):
        import argparse
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected a comma-separated list")
        if choices is not None:
            bad = [t for t in items if t not in choices]
            if bad:
                raise argparse.ArgumentTypeError(
                    f"unknown {', '.join(map(repr, bad))}; choose from {', '.join(choices)}")
        return tuple(items)
    return parse


# --------------------------------------------------------------------------- info
def cmd_info(args) -> int:
    import platform

    import numpy as np
    import scipy

    from . import __version__, variants
    from ._device import status
    from .measure import RaplMeter, nvml_energy_support

    dev = status()
    print(f"dpsolve {__version__}  (Python {platform.python_version()}, NumPy {np.__version__}, "
          f"SciPy {scipy.__version__}, CuPy {dev.cupy_version or 'not installed'})")
    if dev.ok:
        cc = dev.compute_capability
        print(f"device        : {dev.name} (compute capability {cc[0]}.{cc[1]}, "
              f"{dev.multiprocessors} SMs)")
    else:
        print(f"device        : none usable - {dev.reason}")
    print(f"driver CUDA   : {dev.driver_cuda_version or 'n/a'}")
    print(f"runtime CUDA  : {dev.runtime_cuda_version or 'n/a'}")
    ok, detail = nvml_energy_support()
    print(f"GPU energy    : {'yes' if ok else 'no'} - {detail}")
    rapl = RaplMeter()
    host_energy = ("RAPL (" + str(len(rapl.domains)) + " package domains)" if rapl.available
                   else "no - RAPL not present or not readable")
    print(f"host energy   : {host_energy}")
    print("variants:")
    for v in variants():
        state = "available" if v.available else f"unavailable: {v.reason}"
        print(f"  {v.name:<11} {state}")
        print(f"  {'':<11} {v.description}")
    return 0


# --------------------------------------------------------------------------- warm
def cmd_warm(args) -> int:
    from .warm import warm
    threads = args.threads or min(32, os.cpu_count() or 1)
    failed = warm(args.dtypes, threads=threads, samples=not args.no_samples,
                  say=lambda line: print(line, flush=True))
    return ERROR if failed else 0


# --------------------------------------------------------------------------- solve
def _jsonable(v):
    import numpy as np
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


def _summary(rep) -> str:
    """The report in one line, times in human units (report.summary()'s fields); the host
    variant has no sync mode, shown as "-"."""
    from ._units import human_time

    def num(v, unit="", spec=".3g"):
        return "n/a" if v is None else f"{v:{spec}}{unit}"
    sync = "-" if rep.variant == "host" else rep.sync
    return (f"{rep.method}/{rep.variant}/{rep.format or '-'}/{sync} {rep.dtype} n={rep.n} "
            f"nnz={rep.nnz}: info={rep.info} it={rep.iterations} |r|={num(rep.residual_norm)} "
            f"wall={human_time(rep.wall_time)} gpu={human_time(rep.gpu_time)} "
            f"E_gpu={num(rep.gpu_energy, ' J')} cpu={human_time(rep.host_cpu_time)}")


# the registered preconditioner names (dpsolve.precond.names(); a test keeps them equal, so that
# importing the CLI does not import NumPy)
PRECONDS = ("jacobi", "amg", "chebyshev")


def _precond_text(name) -> str:
    return {"jacobi": ", Jacobi", "amg": ", AMG", "chebyshev": ", Chebyshev"}.get(name, "")


def _study_precond_text(names) -> str:
    """The study header's preconditioners: none of them for the paper's plain CG."""
    shown = [_precond_text(n)[2:] or "no preconditioner" for n in names]
    return "" if list(names) == ["none"] else f", {' / '.join(shown)}"


def hierarchy_lines(info: dict) -> list:
    """The AMG hierarchy as AmgX prints it: a line per level, then the complexities and the
    set-up split (``report.preconditioner`` of an AMG solve)."""
    levels = info.get("levels") or []
    if not levels:
        return []
    cycle = info.get("vcycle_dtype")
    values = info.get("vcycle_values")          # float16 matrices (precision "half")
    lines = [f"AMG      : smoothed aggregation, {info.get('smoother')} smoother, theta = "
             f"{info.get('theta'):g}, {len(levels)} levels"
             + (f", V-cycle in {cycle}" if cycle else "")
             + (f", {values} matrices" if values else ""),
             "           level        rows         nnz   nnz/row  restriction"]
    smoothed = set(info.get("smoothed_restriction") or ())
    for i, (n, z) in enumerate(levels):
        down = ("(dense solve)" if i == len(levels) - 1 else "R (I - A S)" if i in smoothed
                else "R")
        lines.append(f"           {i:5d} {n:11,d} {z:11,d} {z / max(n, 1):9.1f}  {down}")
    lines.append(f"           grid complexity {info.get('grid_complexity', 0):.3f}, operator "
                 f"complexity {info.get('operator_complexity', 0):.3f}")
    times = info.get("setup_times")
    if times:
        parts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in times.items() if k != "total")
        vc = info.get("vcycle_time")
        lines.append(f"           set-up {times.get('total', 0) * 1e3:.1f} ms ({parts})"
                     + (f"; V-cycle {vc * 1e3:.3f} ms" if vc else ""))
    return lines


def cmd_solve(args) -> int:
    if args.distributed:
        return cmd_solve_distributed(args)
    import json

    import numpy as np

    from . import _solvers
    from .matrices import check_dtype_keeps, paper_rhs
    from .study import resolve_problem

    prob = resolve_problem(args.matrix, progress=not args.json, force=args.force,
                           dtype=args.dtype or "float64")
    if args.dtype:                      # a complex file asked for in a real dtype: say so at once
        check_dtype_keeps(prob.header_field() == "complex", args.dtype, prob.source, "--dtype")
    A = prob.load()
    dtype = args.dtype or ("complex128" if np.iscomplexobj(A) else "float64")
    check_dtype_keeps(np.iscomplexobj(A), dtype, prob.source, "--dtype")
    A = A.astype(dtype, copy=False)
    _warn_if_not_hermitian(A, args.method, prob.source)
    if args.rhs:
        return _solve_rhs_file(args, prob, A, dtype)
    b, x_star = paper_rhs(A)
    solver = getattr(_solvers, args.method)
    x, info, rep = solver(A, b, rtol=args.rtol, atol=args.atol, maxiter=args.maxiter,
                          M=args.precond, variant=args.variant, sync=args.sync,
                          format=args.format, full_output=True)
    bnorm = float(np.linalg.norm(b))
    rel_res = rep.residual_norm / bnorm if bnorm and rep.residual_norm is not None else None
    rel_err = float(np.linalg.norm(np.asarray(x) - x_star) / np.linalg.norm(x_star))
    if args.json:
        doc = {"matrix": prob.name, "source": prob.source, "n": int(A.shape[0]),
               "nnz": int(A.nnz), "setup": "x* = ones, b = A x*, x0 = 0",
               "precond": args.precond, "relative_residual": rel_res,
               "relative_error": rel_err, "report": rep.as_dict(),
               "preconditioner": rep.preconditioner}
        if rep.variant == "host":       # no sync mode on the host (SI numbers stay as they are)
            doc["report"]["sync"] = None
        print(json.dumps(doc, indent=2, default=_jsonable))
        return exit_status(info)
    _print_head(f"{prob.name} ({prob.source}): n = {A.shape[0]:,}, nnz = {A.nnz:,}, {dtype}",
                args, "", _summary(rep))
    for line in hierarchy_lines(rep.preconditioner or {}):
        print(line)
    return _print_result(info, rel_res, rel_err)


def load_rhs(path, n: int, dtype):
    """The right-hand sides of ``solve --rhs``: a .npy array or a Matrix Market file (array or
    coordinate), of shape (n,) or (n, k); a MatrixFileError / ValueError naming the file."""
    import numpy as np

    from .matrices import MatrixFileError, read_matrix
    path = str(path)
    if path.endswith(".npy"):
        try:
            B = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise MatrixFileError(path, f"not a readable .npy array ({e})") from None
    else:
        B = read_matrix(path).toarray()
    if B.ndim == 1:
        B = B[:, None]
    if B.ndim != 2 or B.shape[0] != n:
        raise ValueError(f"{path}: the right-hand sides have shape {B.shape}; the matrix has {n} "
                         f"rows (expected ({n},) or ({n}, k))")
    if B.dtype.kind == "c" and np.dtype(dtype).kind != "c":
        raise ValueError(f"{path}: complex right-hand sides for a {dtype} matrix; pass "
                         f"--dtype complex128")
    return B.astype(dtype)


def _solve_rhs_file(args, prob, A, dtype) -> int:
    """``solve MATRIX --rhs FILE``: every column of the file solved (a block, dpsolve._block);
    one line per column; the exit status is the worst column's (a breakdown over a miss over
    convergence)."""
    import json

    import numpy as np

    from . import _solvers
    B = load_rhs(args.rhs, A.shape[0], dtype)
    solver = getattr(_solvers, args.method)
    X, info, rep = solver(A, B, rtol=args.rtol, atol=args.atol, maxiter=args.maxiter,
                          M=args.precond, variant=args.variant, sync=args.sync,
                          format=args.format, full_output=True)
    info = np.atleast_1d(info)
    reports = rep.columns if hasattr(rep, "columns") else [rep]
    bnorms = np.linalg.norm(B, axis=0)
    rel = [r.residual_norm / bn if bn and r.residual_norm is not None else None
           for r, bn in zip(reports, bnorms)]
    worst = (BREAKDOWN if (info < 0).any() else NOT_CONVERGED if (info > 0).any()
             else CONVERGED)
    if args.json:
        doc = {"matrix": prob.name, "source": prob.source, "n": int(A.shape[0]),
               "nnz": int(A.nnz), "rhs": str(args.rhs), "k": int(B.shape[1]),
               "precond": args.precond,
               "columns": [{"info": int(i), "relative_residual": rr, "report": r.as_dict()}
                           for i, rr, r in zip(info, rel, reports)]}
        print(json.dumps(doc, indent=2, default=_jsonable))
        return worst
    print(f"matrix   : {prob.name} ({prob.source}): n = {A.shape[0]:,}, nnz = {A.nnz:,}, {dtype}")
    print(f"set-up   : b = the {B.shape[1]} column(s) of {args.rhs}, x0 = 0; {args.method}, "
          f"rtol = {args.rtol:g}{_precond_text(args.precond)}")
    for j, (i, rr, r) in enumerate(zip(info, rel, reports)):
        state = ("converged" if i == 0 else f"not converged after {i} iterations" if i > 0
                 else f"breakdown ({i})")
        print(f"column {j:<3}: {state}; {r.iterations} iterations; ||b - A x|| / ||b|| = "
              f"{'n/a' if rr is None else f'{rr:.3e}'}")
    return worst


def _warn_if_not_hermitian(A, method: str, source: str) -> None:
    """CG is for a symmetric (Hermitian) positive definite matrix: a DpsolveWarning when A is
    not symmetric (dpsolve.matrices.hermitian_defect), which the solve would not tell."""
    if method != "cg":
        return
    import warnings

    from ._errors import DpsolveWarning
    from .matrices import HERMITIAN_TOL, hermitian_defect
    defect = hermitian_defect(A)
    if not defect <= HERMITIAN_TOL:
        warnings.warn(f"{source}: the matrix is not symmetric (max|A - A^H| / max|A| = "
                      f"{defect:.1e}); CG is for symmetric (Hermitian) positive definite "
                      f"matrices, its result here means little (bicgstab and gmres take any)",
                      DpsolveWarning, stacklevel=2)


def _print_head(matrix: str, args, extra: str, summary: str) -> None:
    """The first lines of ``solve``'s text output (single-GPU and distributed)."""
    print(f"matrix   : {matrix}")
    print(f"set-up   : x* = ones, b = A x*, x0 = 0; {args.method}, rtol = {args.rtol:g}"
          f"{_precond_text(args.precond)}{extra}")
    print(f"report   : {summary}")


def _print_result(info, rel_res, rel_err) -> int:
    """The last line of ``solve``'s text output (single-GPU and distributed)."""
    state = ("converged" if info == 0 else
             f"not converged after {info} iterations" if info > 0 else f"breakdown ({info})")
    print(f"result   : {state}; ||b - A x|| / ||b|| = "
          f"{'n/a' if rel_res is None else f'{rel_res:.3e}'}; ||x - x*|| / ||x*|| = {rel_err:.3e}")
    return exit_status(info)


def _mpi_rank():
    """This process's rank in MPI_COMM_WORLD when mpi4py is in use, else None (without
    importing mpi4py)."""
    MPI = sys.modules.get("mpi4py.MPI")
    try:
        return MPI.COMM_WORLD.Get_rank() if MPI is not None and MPI.Is_initialized() else None
    except Exception:
        return None


def cmd_solve_distributed(args) -> int:
    """``solve --distributed`` under ``mpirun -n K``: rank 0 reads (or generates) the matrix and
    scatters its rows (a generated laplace3d-N is built in place, each rank its own rows), b = A
    x* with x* = ones, x0 = 0, the distributed solver, and rank 0 prints the report."""
    import json

    import numpy as np

    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError):      # RuntimeError: mpi4py without its MPI library
        raise RuntimeError("--distributed needs mpi4py and an MPI library: pip install -e "
                           "'.[mpi]' (mpi4py and Open MPI), then run it under mpirun -n K") \
            from None
    from . import distributed as dd
    from .distributed._collective import everywhere
    from .matrices import check_dtype_keeps
    from .study import resolve_problem

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    A_global, meta, failure = None, None, None
    if rank == 0:
        try:
            prob = resolve_problem(args.matrix, progress=False, force=args.force,
                                   dtype=args.dtype or "float64")
            grid = (int(prob.source.rsplit("-", 1)[1])
                    if prob.source.startswith("generated laplace3d-") else None)
            if grid is not None:
                dtype = args.dtype or "float64"
            else:
                if args.dtype:
                    check_dtype_keeps(prob.header_field() == "complex", args.dtype, prob.source,
                                      "--dtype")
                A_global = prob.load()
                dtype = args.dtype or ("complex128" if np.iscomplexobj(A_global) else "float64")
                check_dtype_keeps(np.iscomplexobj(A_global), dtype, prob.source, "--dtype")
                A_global = A_global.astype(dtype, copy=False)
                _warn_if_not_hermitian(A_global, args.method, prob.source)
            meta = {"name": prob.name, "source": prob.source, "grid": grid, "dtype": dtype}
        except Exception as e:
            failure = e
    err, meta = comm.bcast((None if failure is None else (str(failure) or type(failure).__name__),
                            meta), root=0)
    if failure is not None:
        raise everywhere(failure)
    if err is not None:
        raise everywhere(RuntimeError(err))
    dtype = meta["dtype"]
    if meta["grid"] is not None:
        k = meta["grid"]
        A = dd.DistributedMatrix.laplace3d(k, k, k, comm, dtype=dtype)
    else:
        A = dd.DistributedMatrix.from_global(A_global, comm)
        A_global = None
    x_star = np.ones(A.n_local, dtype=dtype)
    b = A.matvec(x_star, dd.MpiTransport(comm))
    variant = "host" if args.variant == "auto" else args.variant
    solver = getattr(dd, args.method)
    x, info, rep = solver(A, b, rtol=args.rtol, atol=args.atol, maxiter=args.maxiter,
                          M=args.precond, variant=variant, transport=args.transport,
                          full_output=True)
    # global norms for what is printed: partial sums gathered, added in rank order
    parts = comm.allgather((float(np.vdot(b, b).real),
                            float(np.vdot(x - x_star, x - x_star).real)))
    bnorm = float(np.sqrt(sum(p[0] for p in parts)))
    rel_err = float(np.sqrt(sum(p[1] for p in parts)) / np.sqrt(A.n))
    rel_res = rep.residual_norm / bnorm if bnorm and rep.residual_norm is not None else None
    if rank != 0:
        return exit_status(info)
    where = ("generated in place on each rank" if meta["grid"] is not None
             else "read by rank 0, rows scattered")
    if args.json:
        doc = {"matrix": meta["name"], "source": meta["source"], "n": rep.n, "nnz": rep.nnz,
               "setup": "x* = ones, b = A x*, x0 = 0", "precond": args.precond,
               "distributed": {"ranks": size, "transport": rep.transport, "matrix": where},
               "relative_residual": rel_res, "relative_error": rel_err,
               "report": rep.as_dict()}
        print(json.dumps(doc, indent=2, default=_jsonable))
        return exit_status(info)
    from ._units import human_time
    _print_head(f"{meta['name']} ({meta['source']}, {where}): n = {rep.n:,}, "
                f"nnz = {rep.nnz:,}, {dtype}", args,
                f"; {_count(size, 'rank')} over {rep.transport}", rep.summary())
    print(f"ranks    : rows {', '.join(f'{r:,}' for r in rep.rows_per_rank)}; wall "
          f"{', '.join(human_time(t) for t in rep.wall_times)}; comm "
          f"{', '.join(human_time(t) for t in rep.comm_times)}")
    return _print_result(info, rel_res, rel_err)


# --------------------------------------------------------------------------- study
def cmd_study(args) -> int:
    import platform

    import numpy as np

    from . import variants
    from .backends import VARIANT_NAMES
    from .study import (CPU_GAP, CPU_WINDOW, GPU_GAP, GPU_WINDOW, PAPER_MAXITER, Settings,
                        default_problems, default_window, make_plan, paper_problems,
                        prefetch, resolve_problem, run_study)

    info = {v.name: v for v in variants()}
    gpu_names = [n for n in VARIANT_NAMES if n != "host"]
    if args.variants is None:
        chosen = tuple(n for n in gpu_names if info[n].available) or ("host",)
    elif args.variants == ("all",):
        chosen = VARIANT_NAMES
    else:
        chosen = args.variants
    gpu = any(n != "host" and info[n].available for n in chosen)
    # the GPU variants the study tried: all of them by default (and for "all"), else those named
    tried = gpu_names if args.variants in (None, ("all",)) else [n for n in chosen if n != "host"]
    reasons = {}
    for n in tried:
        if not info[n].available:
            reasons.setdefault(info[n].reason, []).append(n)
    for reason, names in reasons.items():
        one = len(names) == 1
        need = ((f"need{'s' if one else ''} a usable CUDA device, and this machine has none")
                if "not implemented" not in (reason or "") else
                f"{'is' if one else 'are'} not part of this build")
        print(f"GPU variant{'' if one else 's'} {', '.join(names)} {need}: {reason} - "
              f"{'skipped' if args.variants is None else 'recorded as skipped'}")
    if not gpu and args.variants is None:
        print("running the host variant (the NumPy reference solvers on the CPU) instead")
    elif not gpu and "host" not in chosen:
        print("none of the variants asked for can run here: every configuration is recorded as "
              "skipped")

    # the size guard checks generated problems in the widest dtype asked for
    widest = max(args.dtypes or (("float32",) if args.paper else ("float64",)),
                 key=lambda d: np.dtype(d).itemsize)
    if args.matrices:
        problems = [resolve_problem(m, args.matrix_dir, progress=not args.no_progress,
                                    force=args.force, dtype=widest)
                    for m in args.matrices]
    elif args.paper:
        problems = paper_problems(args.matrix_dir, progress=not args.no_progress,
                                  force=args.force, dtype=widest)
    else:
        problems = default_problems(gpu, force=args.force, dtype=widest)
    if args.paper and not gpu:
        print("note: the paper's matrices on the host variant take hours; the study is meant for "
              "a GPU machine")
    s = Settings(
        methods=args.methods, variants=chosen, syncs=args.syncs,
        dtypes=args.dtypes or (("float32",) if args.paper else None),
        formats=args.formats or (("csr-vector",) if args.paper else ("auto",)),
        rtol=args.rtol, maxiter=args.maxiter if args.maxiter is not None else
        (PAPER_MAXITER if args.paper else None),
        preconds=args.precond,
        window=args.window if args.window is not None else (GPU_WINDOW if gpu else CPU_WINDOW),
        gap=args.gap if args.gap is not None else (GPU_GAP if gpu else CPU_GAP),
        warmup=args.warmup)
    if args.window is None and gpu and not (args.matrices or args.paper):
        s.window = default_window(len(make_plan(problems, s)))
    print(f"study: {_count(len(problems), 'matrix', 'matrices')} x {', '.join(s.methods)} x "
          f"{', '.join(s.variants)} x "
          f"{', '.join(s.syncs) if any(v != 'host' for v in s.variants) else 'no sync (host)'} x "
          f"{', '.join(s.dtypes) if s.dtypes else 'float64 (complex128 for a complex file)'}; "
          f"rtol = {s.rtol:g}"
          f"{f', maxiter = {s.maxiter}' if s.maxiter else ''}"
          f"{_study_precond_text(s.preconds)}; x* = ones, b = A x*, x0 = 0; "
          f"{_count(s.warmup, 'warm-up solve')}, then a {s.window:g} s window, "
          f"then a {s.gap:g} s gap; "
          f"output in {args.out}/")
    from . import _device
    dev = _device.status()
    meta = {"machine": {"python": platform.python_version(), "platform": platform.platform(),
                        "device": dev.name,               # the GPU's name, or null
                        "device_unavailable": None if dev.ok else dev.reason},
            "matrices": [{"name": p.name, "source": p.source} for p in problems]}
    prefetch(problems, args.matrix_dir, progress=not args.no_progress)
    try:
        run_study(problems, s, args.out, restart=args.restart, retry_failed=args.retry_failed,
                  progress=not args.no_progress, extra_meta=meta)
    except KeyboardInterrupt:
        print(f"\ninterrupted: what finished is in {args.out}/; run the same command again to "
              f"resume", file=sys.stderr)
        return INTERRUPTED
    out = args.out
    print(f"\n{open(os.path.join(out, 'table2.md')).read().rstrip()}\n")
    from .study import HOST_FIGURE
    figs = sorted(f for f in os.listdir(out) if f.startswith("figure7_") or f == HOST_FIGURE)
    print(f"written to {out}/: results.csv (one row per configuration), raw.csv (one row per "
          f"solve), table2.md, absolute.md (per-matrix absolute figures), study.json"
          + (", " + ", ".join(figs) if figs else
             " (no figures: matplotlib is not installed, or no configuration ran)"))
    return 0


# --------------------------------------------------------------------------- fetch
def cmd_fetch(args) -> int:
    from . import catalog, fetch

    if args.url:
        os.environ["DPSOLVE_SUITESPARSE_URL"] = args.url
    spec = args.name
    entry = catalog.lookup(spec)
    if entry is not None and not entry.suitesparse:
        raise ValueError(f"{entry.paper_name} is generated ({entry.source}), not downloaded: "
                         f"dpsolve solve {entry.source} or dpsolve study --paper")
    if entry is not None:
        spec = entry.source
    group, name = fetch.split_name(spec)
    cached = fetch.cached_path(spec, args.dir).is_file()
    path = fetch.fetch(spec, args.dir, progress=not args.quiet, deadline=args.deadline)
    line = f"{group}/{name}: {path}{' (already cached)' if cached else ''}"
    if not args.no_check:
        A = fetch.read(path)
        mismatch = fetch.check(A, group, name)
        ref = catalog.lookup_source(group, name)
        verdict = ("; not in the paper's catalog" if ref is None else
                   "; differs from the paper's Table 1" if mismatch else
                   "; matches the paper's Table 1")
        line += f"\n  n = {A.shape[0]:,}, nnz = {A.nnz:,}{verdict}"
    print(line)
    return 0


# --------------------------------------------------------------------------- main
def build_parser():
    import argparse
    import textwrap
    from ._frontend import SYNC_MODES
    from .backends import VARIANT_NAMES
    from .distributed.transport import TRANSPORTS
    from .fetch import DEADLINE
    from .formats import FORMATS
    from .study import DEFAULT_OUT, METHODS

    _Parser = _parser_class()
    p = _Parser(prog="dpsolve", description=__doc__.split("\nSo that this holds")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_Parser)

    sub.add_parser("info", help="device, driver, NVML energy support and available variants",
                   description="Print the device, driver and CUDA versions, whether GPU (NVML) "
                               "and host (RAPL) energy can be measured, and which variants can "
                               "run here (and why not).")

    s = sub.add_parser("solve", help="solve one system and print the report",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=EXIT_STATUS_HELP,      # a table, as written; the text wrapped
                       description=textwrap.fill(
                           "Solve A x = b with the paper's set-up (x* = ones, b = A x*, x0 = 0) "
                           "and print the solve report: iterations, residual, time, GPU energy, "
                           "host CPU. MATRIX is a .mtx / .mtx.gz file, a generated problem "
                           "(laplace3d-64, convdiff2d-256-pe100, A252), a paper matrix name "
                           "(LDOOR) or a SuiteSparse GROUP/NAME (downloaded into the cache). CG "
                           "on a matrix that is not symmetric warns.", 79))
    s.add_argument("matrix", metavar="MATRIX", help="FILE.mtx[.gz], generated name, or GROUP/NAME")
    s.add_argument("--method", choices=METHODS, default="cg", help="default cg")
    s.add_argument("--variant", choices=("auto",) + VARIANT_NAMES, default="auto",
                   help="back end (default auto: the fastest GPU variant, or host without a GPU)")
    s.add_argument("--sync", choices=SYNC_MODES, default="polling", help="default polling")
    s.add_argument("--format", choices=("auto",) + FORMATS, default="auto",
                   help="SpMV format on the GPU (default auto)")
    s.add_argument("--dtype", choices=DTYPES, default=None,
                   help="default: the file's own (float64; complex128 for a complex file); a "
                        "real dtype for a complex file is an error")
    s.add_argument("--rtol", type=_number(float, 0), default=1e-5,
                   help="relative tolerance (default 1e-5, SciPy's)")
    s.add_argument("--atol", type=_number(float, 0), default=0.0,
                   help="absolute tolerance (default 0)")
    s.add_argument("--maxiter", type=_number(int, 1), default=None, help="default 10 n")
    s.add_argument("--precond", choices=PRECONDS, default=None,
                   help="preconditioner (default none); amg prints its hierarchy")
    s.add_argument("--rhs", default=None, metavar="FILE",
                   help="right-hand sides: a .npy array or a Matrix Market file of shape (n,) or "
                        "(n, k), each column solved (default: the paper's b = A ones); the exit "
                        "status is the worst column's")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--force", action="store_true", help=FORCE_HELP)
    s.add_argument("--distributed", action="store_true",
                   help="solve over MPI (cg, bicg or bicgstab): run as mpirun -n K python3 -m "
                        "dpsolve solve MATRIX --distributed; rows are partitioned over the K "
                        "ranks (rank 0 reads the matrix and scatters it; laplace3d-N and A252 are "
                        "generated in place), the host variant (auto means host), --sync and "
                        "--format ignored; rank 0 prints the report. Needs the mpi extra: pip "
                        "install -e '.[mpi]'")
    s.add_argument("--transport", choices=tuple(TRANSPORTS), default="mpi",
                   help="with --distributed: how the ranks exchange data (default mpi)")

    st = sub.add_parser(
        "study", help="the paper's energy study: Table 2 and Figure 7",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run matrices x methods x variants x sync modes x dtypes. Each configuration "
                    "gets a warm-up, then repeated solves over a measurement window, then an idle "
                    "gap. Writes results.csv, raw.csv, table2.md, absolute.md, "
                    "figure7_*.png (GPU variants) and host_time_energy.png (the host variant) "
                    "into --out as it goes; a re-run resumes.",
        epilog="Defaults: generated Laplace problems plus every SPD matrix of ../shared/matrices "
               "(when present); CG; every available GPU variant (the host variant on a machine "
               "without a GPU); polling and blocking; float64; a 2 s window (0.5 s when only the "
               "host variant runs). --paper: the paper's six SuiteSparse matrices (downloaded) "
               "and A252, float32 and CSR-vector as in the paper, maxiter 20000.")
    st.add_argument("--paper", action="store_true",
                    help="the paper's set: BMWCRA1_1, CRANKSEG_2, F1, INLINE_1, LDOOR, AUDIKW_1, "
                         "A252")
    st.add_argument("--matrices", type=_csv_list(), default=None, metavar="M1,M2,...",
                    help="files, generated names, paper names or GROUP/NAME (instead of the "
                         "default set)")
    st.add_argument("--methods", type=_csv_list(METHODS), default=("cg",), metavar="cg,...",
                    help="default cg (CG runs on SPD matrices only)")
    st.add_argument("--variants", type=_csv_list(VARIANT_NAMES + ("all",)), default=None,
                    metavar="V1,...", help="default: every available GPU variant, else host; "
                                           "'all' records unavailable ones as skipped")
    st.add_argument("--syncs", type=_csv_list(SYNC_MODES), default=SYNC_MODES, metavar="S1,...",
                    help="default polling,blocking")
    st.add_argument("--dtypes", type=_csv_list(DTYPES), default=None,
                    metavar="float64,...", help="default: each matrix's own (float64; "
                    "complex128 for a complex file; --paper: float32); a complex matrix in a "
                    "real dtype is recorded as failed")
    st.add_argument("--formats", type=_csv_list(("auto",) + FORMATS), default=None,
                    metavar="F1,...", help="default auto (--paper: csr-vector)")
    st.add_argument("--rtol", type=_number(float, 0, strict=True), default=1e-6,
                    help="default 1e-6 (the study has no atol: rtol must be positive)")
    st.add_argument("--maxiter", type=_number(int, 1), default=None,
                    help="iteration cap per solve (default 10 n; --paper: 20000)")
    st.add_argument("--precond", type=_csv_list(("none",) + PRECONDS), default=("none",),
                    metavar="none,jacobi,amg", help="default none (the paper's plain CG, one call "
                    "a solve); a list runs each, side by side: a preconditioned method is measured "
                    "on a prepared system, its set-up apart; amg and chebyshev skip the variants "
                    "that cannot run them")
    st.add_argument("--window", type=_number(float, 0), default=None,
                    help="seconds of repeated solves per configuration (default 2; 0.5 when only "
                         "the host variant runs)")
    st.add_argument("--gap", type=_number(float, 0), default=None,
                    help="idle seconds after each configuration (default 0.5; 0.1 host only)")
    st.add_argument("--warmup", type=_number(int, 0), default=1, help="warm-up solves (default 1)")
    st.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    st.add_argument("--restart", action="store_true",
                    help="start over: delete the study's files in --out first")
    st.add_argument("--retry-failed", action="store_true",
                    help="run failed configurations again when resuming")
    st.add_argument("--matrix-dir", default=None,
                    help="download cache "
                         "(default $DPSOLVE_MATRIX_DIR or ~/.cache/dpsolve/matrices)")
    st.add_argument("--no-progress", action="store_true", help="no progress bar")
    st.add_argument("--force", action="store_true", help=FORCE_HELP)

    w = sub.add_parser("warm", help="compile every kernel now, side by side",
                       description="Compile every kernel of dpsolve for the dtypes asked, each "
                                   "module in a pool of threads, then run a few small solves "
                                   "that compile CuPy's own kernels; all of it kept in CuPy's "
                                   "kernel cache (~/.cupy/kernel_cache or CUPY_CACHE_DIR), so "
                                   "that first calls wait for no compile. Exit status 1 when a "
                                   "step failed (each named).")
    w.add_argument("--dtypes", type=_csv_list(DTYPES), default=("float64", "float32"),
                   metavar="LIST", help="comma-separated, of " + ", ".join(DTYPES)
                                        + " (default float64,float32)")
    w.add_argument("--threads", type=_number(int, 1), default=None,
                   help="modules compiled at once (default: the CPU count, at most 32)")
    w.add_argument("--no-samples", action="store_true",
                   help="compile dpsolve's modules only (no small solves)")

    f = sub.add_parser("fetch", help="download a SuiteSparse matrix into the cache",
                       description="Download GROUP/NAME (e.g. GHS_psdef/ldoor, or a paper name "
                                   "such as LDOOR) from the SuiteSparse collection as Matrix "
                                   "Market into the cache ($DPSOLVE_MATRIX_DIR, default "
                                   "~/.cache/dpsolve/matrices), unless it is there already; then "
                                   "read it and compare n and nnz with the paper's Table 1. The "
                                   "collection's base URL is $DPSOLVE_SUITESPARSE_URL (default "
                                   "https://sparse.tamu.edu/MM, then its herokuapp mirror).")
    f.add_argument("name", metavar="GROUP/NAME")
    f.add_argument("--dir", default=None, help="cache folder (default $DPSOLVE_MATRIX_DIR)")
    f.add_argument("--url", default=None, help="base URL (default $DPSOLVE_SUITESPARSE_URL)")
    f.add_argument("--deadline", type=_number(float, 0, strict=True), default=None,
                   metavar="SECONDS", help="give up after this long in all, every attempt "
                                           f"included (default {DEADLINE:g})")
    f.add_argument("--no-check", action="store_true", help="do not read the matrix to check it")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


_interrupted = []                      # a SIGINT arrived (main's handler), for what hides it


def _on_sigint(signum, frame):
    _interrupted.append(signum)
    raise KeyboardInterrupt


def main(argv=None) -> int:
    """The command line; returns the exit status. Ctrl-C anywhere (argument parsing, the imports
    done on first use, the command) is "dpsolve: interrupted" and 130, also where an extension
    module turned the KeyboardInterrupt into another error (NumPy's import does: "PyCapsule_Import
    could not import module 'datetime'"): a SIGINT handler of our own records that it came."""
    import signal
    try:
        previous = signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:                  # not the main thread: leave signals alone
        previous = None
    _interrupted.clear()
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return _say_interrupted()
    except Exception:
        if _interrupted:
            return _say_interrupted()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _say_interrupted() -> int:
    _stderr_line("dpsolve: interrupted")
    return INTERRUPTED


def _stderr_line(text: str) -> None:
    """One line to standard error in one write: under mpirun several ranks share the stream,
    and print()'s text and newline, written apart when Python runs unbuffered, interleaved with
    another rank's line (seen on the H100: "dpsolve: interrupteddpsolve solve: error: ...")."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _size_guard(force: bool):
    """--force, for the whole command: DPSOLVE_NO_SIZE_GUARD=1 while it runs (matrix files are
    read later, by the study's problems too, through calls that take no force argument)."""
    import contextlib

    @contextlib.contextmanager
    def off():
        from .matrices import SIZE_GUARD_ENV
        before = os.environ.get(SIZE_GUARD_ENV)
        os.environ[SIZE_GUARD_ENV] = "1"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(SIZE_GUARD_ENV, None)
            else:
                os.environ[SIZE_GUARD_ENV] = before
    return off() if force else contextlib.nullcontext()


def _main(argv=None) -> int:
    import warnings
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd == "solve" and args.distributed and args.rhs:
        parser.error("--rhs (several right-hand sides) runs on one GPU; --distributed takes the "
                     "paper's b for now")
    if args.cmd == "solve" and args.distributed:
        from .distributed import METHODS as DISTRIBUTED
        if args.method not in DISTRIBUTED:
            parser.error(f"--method {args.method} has no distributed solver (--distributed "
                         f"takes {', '.join(DISTRIBUTED)})")
    cmd = {"info": cmd_info, "solve": cmd_solve, "study": cmd_study, "fetch": cmd_fetch,
           "warm": cmd_warm}[args.cmd]
    try:
        with warnings.catch_warnings(), _size_guard(getattr(args, "force", False)):
            warnings.showwarning = _show_warning
            return cmd(args)
    except BrokenPipeError:             # stdout closed early (| head): not an error to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ERROR
    except Exception as e:
        if os.environ.get("DPSOLVE_DEBUG") or _interrupted:
            raise
        if getattr(e, "everywhere", False) and _mpi_rank() not in (None, 0):
            return 1                    # raised on every rank: rank 0 says it once
        msg = str(e) or type(e).__name__   # the message alone; DPSOLVE_DEBUG=1: the traceback
        if isinstance(e, FileNotFoundError) and e.filename:
            msg = f"no such file: {e.filename}"
        _stderr_line(f"dpsolve {args.cmd}: error: {_oneline(msg)}")
        return ERROR


if __name__ == "__main__":
    sys.exit(main())
