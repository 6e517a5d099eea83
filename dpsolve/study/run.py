"""Running the study: the matrix loaded once for its configurations (:class:`_Loaded`), one
configuration measured over its window (:func:`run_config`), the output folder
(:func:`prepare_out`, which readies results.csv and raw.csv for a resume), the progress bar, and
:func:`run_study`, which ties them together and ends with :func:`write_reports` (the tables and
figures from results.csv)."""
from __future__ import annotations

import datetime
import functools
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .. import matrices as _m
from ..backends import get_backend, variant_info
from .figures import write_figures
from .files import (append_rows, drop_rows_without_result, read_rows, read_settings, repair,
                    write_whole)
from .plan import (DEFAULT_OUT, FIGURE_GLOBS, KEY, NO_PRECOND, NO_SYNC, RAW_FIELDS,
                   RESULT_FIELDS, Config, Problem, Settings, make_plan)
from .tables import _cell, absolute_markdown, table2_markdown


def read_results(out) -> list[dict]:
    """results.csv as dicts, checked (:class:`StudyFileError` naming the file and line), the
    last row of each key winning (a re-run may add one)."""
    last = {}
    for r in read_rows(Path(out) / "results.csv", RESULT_FIELDS):
        last[tuple(r[k] for k in KEY)] = r
    return list(last.values())


# --------------------------------------------------------------------------- running
class _Bar:
    """tqdm over the plan when installed and wanted, else plain "[i/N]" lines: the progress, on
    stderr. Each finished configuration's line is a result: it goes to stdout (tqdm clears and
    redraws its bar around it), so that ``> file`` keeps it with the tables."""

    def __init__(self, total, initial, enabled):
        self.i, self.total, self.enabled, self.bar = initial, total, enabled, None
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, initial=initial, unit="cfg", file=sys.stderr,
                                dynamic_ncols=True, smoothing=0.1)
            except ImportError:
                pass

    def start(self, label):
        if self.bar is not None:
            self.bar.set_description_str(label[:60])
        elif self.enabled:
            print(f"[{self.i + 1}/{self.total}] {label} ...", file=sys.stderr, flush=True)

    def done(self, line):
        self.i += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(f"  {line}", file=sys.stdout)
        else:                            # without a bar too: one line per configuration
            print(f"  {line}", file=sys.stdout, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class _Loaded:
    """The current matrix in each dtype: host CSR, b, and device copies for GPU variants.
    ``A64`` is the matrix as read: float64, or complex128 for a complex file."""

    def __init__(self, prob: Problem):
        self.prob, self.error, self.by_dtype = prob, None, {}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.A64 = prob.load()
            self.warnings = [str(w.message) for w in caught]
        except Exception as e:           # recorded against every configuration of the matrix
            self.error = f"{type(e).__name__}: {e}"
            return
        self.n, self.nnz = int(self.A64.shape[0]), int(self.A64.nnz)

    def why_not_cg(self) -> str | None:
        """Why CG is not run on this matrix, or None: it is not SPD by construction, or, where
        that is not known in advance (a file), not Hermitian (symmetric)."""
        if self.prob.spd is False:
            return "the matrix is not SPD: CG is run on SPD matrices only"
        if self.prob.spd is None and self.hermitian_defect > _m.HERMITIAN_TOL:
            return (f"the matrix is not symmetric (max|A - A^H| / max|A| = "
                    f"{self.hermitian_defect:.2g} > {_m.HERMITIAN_TOL:g}): CG is run on "
                    f"symmetric (Hermitian) positive definite matrices only")
        return None

    @functools.cached_property
    def hermitian_defect(self) -> float:
        """:func:`dpsolve.matrices.hermitian_defect` of the matrix as read, once per matrix."""
        return _m.hermitian_defect(self.A64)

    def inputs(self, dtype, device):
        if dtype not in self.by_dtype:
            _m.check_dtype_keeps(np.iscomplexobj(self.A64), dtype, self.prob.source, "dtype")
            A = self.A64.astype(dtype)
            b, _ = _m.paper_rhs(A)
            self.by_dtype[dtype] = {"host": (A, b)}
        d = self.by_dtype[dtype]
        if device and "device" not in d:
            try:
                import cupy
                import cupyx.scipy.sparse as csp
                A, b = d["host"]
                d["device"] = (csp.csr_matrix(_scipy_csr_matrix(A)), cupy.asarray(b))
                self.on_device = True
            except Exception:            # dpsolve moves host inputs itself
                d["device"] = d["host"]
        return d["device" if device else "host"]

    def release(self):
        self.by_dtype.clear()
        self.A64 = None
        if getattr(self, "on_device", False):
            try:
                import cupy
                cupy.get_default_memory_pool().free_all_blocks()
            except Exception:
                pass


def _scipy_csr_matrix(A):
    import scipy.sparse as sp
    return sp.csr_matrix(A)


def _solver(method):
    from .. import _solvers
    return getattr(_solvers, method)


def _why_unsupported(variant, method, A, b, M):
    """The reason a variant cannot take this system, or None (also None if it cannot be told)."""
    backend = get_backend(variant)
    if backend is None:
        return None
    try:
        from .._system import make_system
        system = make_system(method, A, b, None, M)
    except Exception:
        return None                      # the solve itself will raise, and be recorded
    if backend.supports(system):
        return None
    why = getattr(backend, "why_not", None)
    return (why(system) if why else None) or f"variant {variant!r} does not support {method} here"


def run_config(cfg: Config, loaded: _Loaded, s: Settings) -> tuple[dict, list[dict]]:
    """Measure one configuration; return its results.csv row and its raw.csv rows.

    Without a preconditioner a solve is the paper's: one ``dpsolve`` call with the inputs on the
    device (its validation and set-up included). With one, the system is prepared once
    (``dpsolve.prepare``: the preconditioner's set-up, an AMG hierarchy, is paid there and
    timed apart as ``setup_s``) and a solve is ``P.solve(b)``: the time and joules per solve of
    Jacobi-CG and AMG-PCG side by side, set-up apart."""
    row = {k: getattr(cfg, k) for k in KEY}
    row.update(source=loaded.prob.source,
               finished=datetime.datetime.now().isoformat(timespec="seconds"))
    if loaded.error:
        row.update(status="failed", error=f"loading the matrix: {loaded.error}")
        return row, []
    row.update(n=loaded.n, nnz=loaded.nnz)
    why = loaded.why_not_cg() if cfg.method == "cg" else None
    if why:
        row.update(status="skipped", error=why)
        return row, []
    vi = variant_info(cfg.variant)
    if not vi.available:
        row.update(status="skipped", error=vi.reason)
        return row, []
    device = cfg.variant != "host"
    M = None if cfg.precond == NO_PRECOND else cfg.precond
    try:
        A, b = loaded.inputs(cfg.dtype, device)
        why = _why_unsupported(cfg.variant, cfg.method, A, b, M)
    except Exception as e:
        row.update(status="failed", error=f"{type(e).__name__}: {e}")
        return row, []
    if why:
        row.update(status="skipped", error=why)
        return row, []
    # ||b|| without BLAS: OpenBLAS's worker threads spin for a while after a large dot, and that
    # spinning would be billed to the measurement window as host CPU (seen on the H100: 30
    # threads at 0.13 s each in a 1.5 s window; scripts/cpu-threads)
    from .._system import vector_norm
    bnorm = vector_norm(loaded.by_dtype[cfg.dtype]["host"][1])
    solver = _solver(cfg.method)
    kw = dict(rtol=s.rtol, maxiter=s.maxiter, M=M, variant=cfg.variant,
              sync="polling" if cfg.sync == NO_SYNC else cfg.sync,
              format="auto" if cfg.format == NO_SYNC else cfg.format, full_output=True)
    raw = []

    sync = None
    if device:
        try:
            import cupy
            sync = cupy.cuda.Device().synchronize
        except Exception:
            pass
    prepared = None
    if M is not None:                     # the set-up, once and apart
        from .._prepared import prepare
        try:
            if sync:
                sync()
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prepared = prepare(A, cfg.method, M=M, variant=kw["variant"], sync=kw["sync"],
                                   format=kw["format"])
            if sync:
                sync()
            row["setup_s"] = time.perf_counter() - t0
        except Exception as e:
            return _not_run(row, e, "set-up: "), []
        solve_kw = {k: kw[k] for k in ("rtol", "maxiter", "full_output")}

    def solve():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if prepared is not None:
                return prepared.solve(b, **solve_kw)
            return solver(A, b, **kw)

    def on_solve(rep, wall, cpu, result):
        _, info, rep_ = result
        raw.append({**{k: getattr(cfg, k) for k in KEY}, "rep": rep, "wall_s": wall,
                    "cpu_s": cpu, "iterations": rep_.iterations, "info": info,
                    "rel_residual": _rel(rep_.residual_norm, bnorm),
                    "solve_time_s": rep_.solve_time, "gpu_time_s": rep_.gpu_time})

    from ..measure import measure_window
    try:
        m = measure_window(solve, seconds=s.window, warmup=s.warmup, sync=sync, on_solve=on_solve)
    except Exception as e:
        return _not_run(row, e), []
    _, info, rep = m["result"]
    walls = [r["wall_s"] for r in raw]
    row.update(status="ok", error="", format_used=rep.format or NO_SYNC, reps=m["reps"],
               window_s=m["wall"] * m["reps"], time_s=m["wall"],
               time_min_s=min(walls) if walls else None, time_max_s=max(walls) if walls else None,
               iterations=rep.iterations, info=info, rel_residual=_rel(rep.residual_norm, bnorm),
               solve_time_s=_mean(r["solve_time_s"] for r in raw),
               gpu_time_s=_mean(r["gpu_time_s"] for r in raw),
               gpu_energy_j=m["gpu_energy"], gpu_power_w=m["gpu_power"], host_cpu_s=m["cpu"],
               host_energy_j=m["host_energy"], device=rep.device)
    if info != 0:
        row["error"] = (f"not converged: info = {info}" if info > 0 else
                        f"breakdown: info = {info}")
    return row, raw


def _not_run(row, e, what=""):
    """The row of a configuration that raised: skipped where its variant or format cannot run
    here, failed (with the error) otherwise."""
    from .._errors import BackendUnavailableError, FormatError
    if isinstance(e, (BackendUnavailableError, FormatError)):
        row.update(status="skipped", error=str(e))
    else:
        row.update(status="failed", error=f"{what}{type(e).__name__}: {e}")
    return row


def _rel(r, bnorm):
    return None if r is None or not bnorm else r / bnorm


def _mean(values):
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _done_line(row):
    label = Config(*(row[k] for k in KEY)).label()
    if row["status"] != "ok":
        return f"{label}: {row['status']} - {row.get('error', '')}"
    from .._units import human_time
    e = row.get("gpu_energy_j")
    setup = row.get("setup_s")
    line = (f"{label}: {human_time(row['time_s'])}/solve, {row['iterations']} it, "
            f"{_cell(e) + ' J/solve' if e is not None else 'GPU energy n/a'}, {row['reps']} "
            f"rep{'' if row['reps'] == 1 else 's'}"
            f"{f', set-up {human_time(setup)}' if setup not in (None, '') else ''}")
    return line + (f" ({row['error']})" if row.get("error") else "")


def prepare_out(out, settings: Settings, restart=False, extra_meta=None, log=print) -> Path:
    """Create ``out``; on ``restart`` delete the study's own files there; refuse to mix settings;
    make results.csv and raw.csv ready to be appended to (:func:`_ready_to_resume`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = out / "study.json"
    if restart:
        for f in ("results.csv", "raw.csv", "table2.md", "absolute.md", "study.json"):
            (out / f).unlink(missing_ok=True)
        for pattern in FIGURE_GLOBS:
            for f in out.glob(pattern):
                f.unlink()
    if meta.exists() and (out / "results.csv").exists():
        old = read_settings(meta)
        if old and old != settings.fingerprint():
            raise ValueError(f"{out} holds a study run with {old}, not {settings.fingerprint()}; "
                             f"pass --restart to start over, or another --out")
    _ready_to_resume(out, log)
    doc = {"settings": settings.fingerprint(), "plan": {
        "methods": settings.methods, "variants": settings.variants, "syncs": settings.syncs,
        "dtypes": settings.dtypes or "own (float64; complex128 for a complex matrix)",
        "formats": settings.formats, "window_s": settings.window,
        "gap_s": settings.gap, "warmup": settings.warmup}}
    doc.update(extra_meta or {})
    write_whole(meta, (json.dumps(doc, indent=2, default=str) + "\n").encode())
    return out


def _ready_to_resume(out: Path, log) -> None:
    """Check both CSV files, drop an incomplete last line of each (a run killed while writing,
    a full disk) and raw.csv's rows of a configuration without a result: a configuration's
    result is whole or it runs again."""
    results = repair(out / "results.csv", RESULT_FIELDS, log)
    raw = out / "raw.csv"
    drop_rows_without_result(raw, RAW_FIELDS, repair(raw, RAW_FIELDS, log), results, log)


def run_study(problems, settings: Settings, out=DEFAULT_OUT, *, restart=False,
              retry_failed=False, progress=True, log=print, extra_meta=None) -> list[dict]:
    """Run every configuration not yet in ``out/results.csv``; write the reports; return the
    results (all rows of the folder, this run's and earlier ones)."""
    out = prepare_out(out, settings, restart, extra_meta, log)
    plan = make_plan(problems, settings)
    keep = {"ok"} if retry_failed else {"ok", "failed"}
    done = {tuple(r[k] for k in KEY) for r in read_results(out) if r.get("status") in keep}
    todo = [(p, c) for p, c in plan if c.key not in done]
    if len(todo) < len(plan):
        log(f"resuming in {out}: {len(plan) - len(todo)} of {len(plan)} configurations already "
            f"done (--restart to start over)")
    try:
        _run_plan(todo, settings, out, _Bar(len(plan), len(plan) - len(todo), progress), log)
    except BaseException:
        try:                             # the reports of what finished; the error comes first
            write_reports(out, log=log)
        except Exception as e:
            log(f"could not write the reports: {e}")
        raise
    write_reports(out, log=log)
    return read_results(out)


def _run_plan(todo, settings: Settings, out: Path, bar: _Bar, log) -> None:
    """Run the configurations ``todo``, appending each one's rows as it finishes."""
    loaded = None
    try:
        for prob, cfg in todo:
            bar.start(cfg.label())
            if loaded is None or loaded.prob is not prob:
                if loaded is not None:
                    loaded.release()
                loaded = _Loaded(prob)
                for w in getattr(loaded, "warnings", []):
                    log(f"warning: {prob.name}: {w}")
            row, raw = run_config(cfg, loaded, settings)
            append_rows(out / "raw.csv", RAW_FIELDS, raw)        # raw first: see _ready_to_resume
            append_rows(out / "results.csv", RESULT_FIELDS, [row])
            bar.done(_done_line(row))
            if row["status"] == "ok" and settings.gap > 0:
                time.sleep(settings.gap)
    finally:
        bar.close()
        if loaded is not None:
            loaded.release()


# --------------------------------------------------------------------------- reports
def write_reports(out, log=print) -> dict:
    """The figures, then table2.md and absolute.md (which link the figures written), from
    results.csv. Returns their paths."""
    out = Path(out)
    results = read_results(out)
    figs = write_figures(out, results, log)
    names = [f.name for f in figs]
    write_whole(out / "table2.md", (table2_markdown(results, names) + "\n").encode())
    write_whole(out / "absolute.md", (absolute_markdown(results, names) + "\n").encode())
    return {"table2": out / "table2.md", "absolute": out / "absolute.md", "figures": figs,
            "results": out / "results.csv", "raw": out / "raw.csv"}
