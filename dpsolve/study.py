"""The energy study of the paper's Section 3: matrices x methods x variants x sync modes x dtypes.

Each configuration gets ``warmup`` solves, then repeated solves until a measurement window of at
least ``window`` seconds is filled (:func:`dpsolve.measure.measure_window`: time, host CPU, GPU
and host energy per solve), then an idle gap of ``gap`` seconds so that the next window starts from
an idle GPU. The set-up is the paper's: x* = ones, b = A x*, x0 = 0.

Outputs, in ``out`` (default ``study-out/``), written as the study goes:

    results.csv     one row per configuration (the resume index; key: matrix, method, variant,
                    sync, dtype, format); status ok / failed (with the error) / skipped (with why)
    raw.csv         one row per repetition (solve) inside every window
    table2.md       the paper's Table 2: min / max / avg % variation of time and energy per
                    variant x sync against cublas + polling
    absolute.md     absolute figures per matrix: time, iterations, energy, power, host CPU, RAPL
    figure7_<method>_<dtype>_<format>.png   the paper's Figure 7: per-matrix % variation bars
    study.json      the settings (a re-run with other settings refuses to mix them)

A re-run skips configurations already in results.csv (ok or failed; skipped ones are looked at
again, as the machine may have changed) unless told to start over.
"""
from __future__ import annotations

import csv
import datetime
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import matrices as _m
from .backends import VARIANT_NAMES, get_backend, variant_info

BASELINE = ("cublas", "polling")
SYNC_MODES = ("polling", "blocking")
METHODS = ("cg", "bicg", "bicgstab")
NO_SYNC = "-"                      # the host variant has no sync mode and no device format

KEY = ("matrix", "method", "variant", "sync", "dtype", "format")
RESULT_FIELDS = KEY + (
    "status", "error", "format_used", "n", "nnz", "source", "reps", "window_s", "time_s",
    "time_min_s", "time_max_s", "iterations", "info", "rel_residual", "solve_time_s",
    "gpu_time_s", "gpu_energy_j", "gpu_power_w", "host_cpu_s", "host_energy_j", "device",
    "finished")
RAW_FIELDS = KEY + ("rep", "wall_s", "cpu_s", "iterations", "info", "rel_residual",
                    "solve_time_s", "gpu_time_s")

DEFAULT_OUT = "study-out"
DEFAULT_GENERATED = ("laplace2d-256", "laplace3d-64")
DEFAULT_GENERATED_GPU = ("laplace3d-128",)           # added where a GPU variant runs
GPU_WINDOW, CPU_WINDOW = 2.0, 0.5                    # seconds; CPU: the host variant only
GPU_GAP, CPU_GAP = 0.5, 0.1
DEFAULT_BUDGET_S = 480           # the default study on a GPU: ~8 min of windows and overheads
PER_CONFIG_OVERHEAD_S = 1.0      # warm-up solve, gap and the last solve's overshoot, roughly
MIN_WINDOW = 1.0


def default_window(n_configs: int) -> float:
    """The default study's window on a GPU: 2 s, shortened (to no less than 1 s) if the plan
    would not fit the budget; the default plan (13 matrices x 8) keeps 2 s."""
    fit = DEFAULT_BUDGET_S / max(1, n_configs) - PER_CONFIG_OVERHEAD_S
    return max(MIN_WINDOW, min(GPU_WINDOW, round(fit, 1)))
PAPER_MAXITER = 20000


# --------------------------------------------------------------------------- problems
@dataclass
class Problem:
    """One matrix of the study: how to build it (float64 CSR) and whether CG applies."""
    name: str
    source: str
    spd: bool | None                     # None: unknown (CG is run and reports what happens)
    build: Callable
    header_field: Callable = lambda: None    # its Matrix Market file's field, where it has one

    def own_dtype(self) -> str:
        """The dtype it runs in unless told: complex128 for a complex file, else float64."""
        return _m.own_dtype(self.header_field())

    def load(self):
        """The matrix (:attr:`build`), checked to be square: an error naming the source, not
        a matmul shape mismatch when b = A x* is formed."""
        A = self.build()
        if A.shape[0] != A.shape[1]:
            raise ValueError(f"{self.source}: expected a square matrix, got "
                             f"{A.shape[0]:,} x {A.shape[1]:,}")
        return A


def _is(path: Path, test: str) -> bool:
    """path.is_file() / is_dir(), False where the name cannot be a path at all (too long)."""
    try:
        return getattr(path, test)()
    except (OSError, ValueError):
        return False


def resolve_problem(spec: str, matrix_dir=None, progress=True, *, force=False,
                    dtype="float64") -> Problem:
    """A matrix named on the command line: a .mtx / .mtx.gz / .tar.gz file, a generated problem
    (``laplace3d-64``, ``convdiff2d-256-pe100``, ``A252``), one of the paper's matrices by its name
    or acronym (``LDOOR``, ``audi``), or any SuiteSparse matrix as ``GROUP/NAME``.

    A generated problem is checked against the memory available here at once (in ``dtype``,
    :func:`dpsolve.matrices.check_size`; ``force`` skips that), before anything is built."""
    from . import catalog, fetch
    p = Path(spec).expanduser()
    if _is(p, "is_file"):
        return Problem(_m.matrix_name(p), str(p), None, lambda: _m.read_matrix(p),
                       lambda: _m.mtx_field(p))
    entry = catalog.lookup(spec)
    if _m.is_generated(spec) or spec.upper() == "A252" or (entry and not entry.suitesparse):
        name = entry.source if entry else spec
        label = entry.paper_name if entry else name
        _m.check_size(name, dtype, force=force, override="--force")
        return Problem(label, f"generated {name}", not name.startswith("convdiff"),
                       lambda: _m.generate(name, force=True))
    if entry is None and _is(p, "is_dir"):
        raise IsADirectoryError(f"{spec} is a directory, not a matrix file (.mtx, .mtx.gz or "
                                f".tar.gz)")
    if entry is not None or ("/" in spec and not spec.endswith((".mtx", ".gz"))):
        src = entry.source if entry else spec
        fetch.split_name(src)               # a clear error for a malformed GROUP/NAME
        label = entry.paper_name if entry else src.split("/")[1]
        return Problem(label, f"SuiteSparse {src}", True if entry else None,
                       lambda: fetch.load(src, matrix_dir, progress=progress),
                       lambda: _m.mtx_field(fetch.cached_path(src, matrix_dir)))
    if spec.endswith((".mtx", ".gz", ".tgz")) or "/" in spec:
        raise FileNotFoundError(f"no matrix file at {spec}")
    raise ValueError(f"unknown matrix {spec!r}: expected a .mtx/.mtx.gz file, a generated problem "
                     f"(laplace1d-N, laplace2d-N, laplace3d-N, convdiff2d-N[-peP], A252), a paper "
                     f"matrix ({', '.join(e.paper_name for e in catalog.PAPER)}) or GROUP/NAME")


def default_problems(gpu: bool, *, force=False, dtype="float64") -> list[Problem]:
    """Generated Laplace problems, plus every SPD matrix of the shared folder when there is one."""
    names = DEFAULT_GENERATED + (DEFAULT_GENERATED_GPU if gpu else ())
    probs = [resolve_problem(n, force=force, dtype=dtype) for n in names]
    d = _m.shared_matrix_dir()
    for path in (_m.shared_spd_matrices(d) if d else []):
        probs.append(Problem(_m.matrix_name(path), f"shared {path}", True,
                             lambda p=path: _m.read_matrix(p), lambda p=path: _m.mtx_field(p)))
    return probs


def prefetch(problems, matrix_dir=None, progress=True, log=print) -> None:
    """Download the SuiteSparse matrices of ``problems`` before the study starts, so that no
    download runs between measurements. A failure is reported and left to the study, which
    records it against that matrix's configurations and goes on with the others."""
    from . import fetch
    for p in problems:
        if p.source.startswith("SuiteSparse "):
            try:
                fetch.fetch(p.source.split(" ", 1)[1], matrix_dir, progress=progress)
            except Exception as e:
                log(f"could not download {p.name}: {e}")


def paper_problems(matrix_dir=None, progress=True, *, force=False,
                   dtype="float32") -> list[Problem]:
    from .catalog import PAPER
    return [resolve_problem(e.paper_name, matrix_dir, progress, force=force, dtype=dtype)
            for e in PAPER]


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Config:
    matrix: str
    method: str
    variant: str
    sync: str
    dtype: str
    format: str

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, k) for k in KEY)

    def label(self) -> str:
        s = f"{self.matrix} {self.method} {self.dtype} {self.variant}"
        if self.sync != NO_SYNC:
            s += f"/{self.sync}"
        if self.format not in (NO_SYNC, "auto"):
            s += f" {self.format}"
        return s


@dataclass
class Settings:
    methods: tuple = ("cg",)
    variants: tuple = ("host",)
    syncs: tuple = SYNC_MODES
    dtypes: tuple | None = ("float64",)  # None: each matrix's own (Problem.own_dtype)
    formats: tuple = ("auto",)
    rtol: float = 1e-6
    maxiter: int | None = None
    precond: str | None = None
    window: float = GPU_WINDOW
    gap: float = GPU_GAP
    warmup: int = 1

    def fingerprint(self) -> dict:
        """What must agree for results of two runs to be mixed in one output folder."""
        return {"rtol": self.rtol, "maxiter": self.maxiter, "precond": self.precond}


def make_plan(problems, settings: Settings) -> list[tuple[Problem, Config]]:
    plan, seen = [], set()
    for prob in problems:
        for dtype in settings.dtypes or (prob.own_dtype(),):
            for method in settings.methods:
                for fmt in settings.formats:
                    for variant in settings.variants:
                        host = variant == "host"
                        for sync in ((NO_SYNC,) if host else settings.syncs):
                            c = Config(prob.name, method, variant, sync, dtype,
                                       NO_SYNC if host else fmt)
                            if c.key not in seen:
                                seen.add(c.key)
                                plan.append((prob, c))
    return plan


# --------------------------------------------------------------------------- CSV
def _fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return str(v)


def _append(path: Path, fields, rows):
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fields, extrasaction="ignore", lineterminator="\n")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r.get(k)) for k in fields})
        f.flush()


def read_results(out) -> list[dict]:
    """results.csv as dicts, the last row of each key winning (a re-run may add one)."""
    path = Path(out) / "results.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    last = {}
    for r in rows:
        last[tuple(r.get(k, "") for k in KEY)] = r
    return list(last.values())


def _num(v):
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


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
    from . import _solvers
    return getattr(_solvers, method)


def _why_unsupported(variant, method, A, b, M):
    """The reason a variant cannot take this system, or None (also None if it cannot be told)."""
    backend = get_backend(variant)
    if backend is None:
        return None
    try:
        from ._system import make_system
        system = make_system(method, A, b, None, M)
    except Exception:
        return None                      # the solve itself will raise, and be recorded
    if backend.supports(system):
        return None
    why = getattr(backend, "why_not", None)
    return (why(system) if why else None) or f"variant {variant!r} does not support {method} here"


def run_config(cfg: Config, loaded: _Loaded, s: Settings) -> tuple[dict, list[dict]]:
    """Measure one configuration; return its results.csv row and its raw.csv rows."""
    from ._errors import BackendUnavailableError, FormatError
    row = {k: getattr(cfg, k) for k in KEY}
    row.update(source=loaded.prob.source,
               finished=datetime.datetime.now().isoformat(timespec="seconds"))
    if loaded.error:
        row.update(status="failed", error=f"loading the matrix: {loaded.error}")
        return row, []
    row.update(n=loaded.n, nnz=loaded.nnz)
    if cfg.method == "cg" and loaded.prob.spd is False:
        row.update(status="skipped", error="the matrix is not SPD: CG is run on SPD matrices only")
        return row, []
    vi = variant_info(cfg.variant)
    if not vi.available:
        row.update(status="skipped", error=vi.reason)
        return row, []
    device = cfg.variant != "host"
    M = s.precond
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
    from ._system import vector_norm
    bnorm = vector_norm(loaded.by_dtype[cfg.dtype]["host"][1])
    solver = _solver(cfg.method)
    kw = dict(rtol=s.rtol, maxiter=s.maxiter, M=M, variant=cfg.variant,
              sync="polling" if cfg.sync == NO_SYNC else cfg.sync,
              format="auto" if cfg.format == NO_SYNC else cfg.format, full_output=True)
    raw = []

    def solve():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return solver(A, b, **kw)

    def on_solve(rep, wall, cpu, result):
        _, info, rep_ = result
        raw.append({**{k: getattr(cfg, k) for k in KEY}, "rep": rep, "wall_s": wall,
                    "cpu_s": cpu, "iterations": rep_.iterations, "info": info,
                    "rel_residual": _rel(rep_.residual_norm, bnorm),
                    "solve_time_s": rep_.solve_time, "gpu_time_s": rep_.gpu_time})

    sync = None
    if device:
        try:
            import cupy
            sync = cupy.cuda.Device().synchronize
        except Exception:
            pass
    from .measure import measure_window
    try:
        m = measure_window(solve, seconds=s.window, warmup=s.warmup, sync=sync, on_solve=on_solve)
    except (BackendUnavailableError, FormatError) as e:
        row.update(status="skipped", error=str(e))
        return row, []
    except Exception as e:
        row.update(status="failed", error=f"{type(e).__name__}: {e}")
        return row, []
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


def _rel(r, bnorm):
    return None if r is None or not bnorm else r / bnorm


def _mean(values):
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _done_line(row):
    label = Config(*(row[k] for k in KEY)).label()
    if row["status"] != "ok":
        return f"{label}: {row['status']} - {row.get('error', '')}"
    from ._units import human_time
    e = row.get("gpu_energy_j")
    line = (f"{label}: {human_time(row['time_s'])}/solve, {row['iterations']} it, "
            f"{_cell(e) + ' J/solve' if e is not None else 'GPU energy n/a'}, {row['reps']} "
            f"rep{'' if row['reps'] == 1 else 's'}")
    return line + (f" ({row['error']})" if row.get("error") else "")


def prepare_out(out, settings: Settings, restart=False, extra_meta=None) -> Path:
    """Create ``out``; on ``restart`` delete the study's own files there; refuse to mix settings."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = out / "study.json"
    if restart:
        for f in ("results.csv", "raw.csv", "table2.md", "absolute.md", "study.json"):
            (out / f).unlink(missing_ok=True)
        for f in out.glob("figure7_*.png"):
            f.unlink()
    if meta.exists() and (out / "results.csv").exists():
        old = json.loads(meta.read_text()).get("settings", {})
        if old and old != settings.fingerprint():
            raise ValueError(f"{out} holds a study run with {old}, not {settings.fingerprint()}; "
                             f"pass --restart to start over, or another --out")
    doc = {"settings": settings.fingerprint(), "plan": {
        "methods": settings.methods, "variants": settings.variants, "syncs": settings.syncs,
        "dtypes": settings.dtypes or "own (float64; complex128 for a complex matrix)",
        "formats": settings.formats, "window_s": settings.window,
        "gap_s": settings.gap, "warmup": settings.warmup}}
    doc.update(extra_meta or {})
    meta.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return out


def run_study(problems, settings: Settings, out=DEFAULT_OUT, *, restart=False,
              retry_failed=False, progress=True, log=print, extra_meta=None) -> list[dict]:
    """Run every configuration not yet in ``out/results.csv``; write the reports; return the
    results (all rows of the folder, this run's and earlier ones)."""
    out = prepare_out(out, settings, restart, extra_meta)
    plan = make_plan(problems, settings)
    keep = {"ok"} if retry_failed else {"ok", "failed"}
    done = {tuple(r[k] for k in KEY) for r in read_results(out) if r.get("status") in keep}
    todo = [(p, c) for p, c in plan if c.key not in done]
    if len(todo) < len(plan):
        log(f"resuming in {out}: {len(plan) - len(todo)} of {len(plan)} configurations already "
            f"done (--restart to start over)")
    bar = _Bar(len(plan), len(plan) - len(todo), progress)
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
            _append(out / "raw.csv", RAW_FIELDS, raw)
            _append(out / "results.csv", RESULT_FIELDS, [row])
            bar.done(_done_line(row))
            if row["status"] == "ok" and settings.gap > 0:
                time.sleep(settings.gap)
    finally:
        bar.close()
        if loaded is not None:
            loaded.release()
        write_reports(out, log=log)
    return read_results(out)


# --------------------------------------------------------------------------- Table 2 / Figure 7
VARIANT_ORDER = {v: i for i, v in enumerate(VARIANT_NAMES)}
SYNC_ORDER = {"polling": 0, "blocking": 1, NO_SYNC: 2}


def _series_key(vs):
    variant, sync = vs
    return (SYNC_ORDER.get(sync, 9), VARIANT_ORDER.get(variant, 99), variant)


def energy_of(row, metric="gpu"):
    """Energy per solve: "gpu" (NVML), or "total" (GPU + RAPL host) where both were measured."""
    g = _num(row.get("gpu_energy_j"))
    if metric == "gpu":
        return g
    h = _num(row.get("host_energy_j"))
    return None if g is None or h is None else g + h


def variations(results, metric="gpu") -> dict:
    """% variation of time and energy per solve against cublas + polling, per matrix.

    Returns {(method, dtype, format): {(variant, sync): {matrix: (time_pct, energy_pct)}}}, over
    the GPU variants (the host variant is left out: it is not one of the paper's); energy_pct is
    None where energy was not measured. Groups without a successful baseline are absent.
    """
    ok = [r for r in results if r.get("status") == "ok" and r.get("variant") != "host"]
    base = {(r["method"], r["dtype"], r["format"], r["matrix"]): r for r in ok
            if (r["variant"], r["sync"]) == BASELINE}
    out = {}
    for r in ok:
        b = base.get((r["method"], r["dtype"], r["format"], r["matrix"]))
        if b is None:
            continue
        t, tb = _num(r["time_s"]), _num(b["time_s"])
        e, eb = energy_of(r, metric), energy_of(b, metric)
        if t is None or not tb:
            continue
        tp = 100.0 * (t / tb - 1.0)
        ep = 100.0 * (e / eb - 1.0) if (e is not None and eb) else None
        grp = out.setdefault((r["method"], r["dtype"], r["format"]), {})
        grp.setdefault((r["variant"], r["sync"]), {})[r["matrix"]] = (tp, ep)
    return out


def paper_min_max_avg(values):
    """The paper's Table 2 convention: min and max are the variations of smallest and largest
    *absolute value* (so both may be negative), avg the plain mean. None for no values."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return (min(vals, key=abs), max(vals, key=abs), sum(vals) / len(vals))


def table2(results, metric="gpu") -> dict:
    """{(method, dtype, format): [(sync, variant, time_stats, energy_stats, matrices), ...]}."""
    out = {}
    for grp, series in variations(results, metric).items():
        rows = []
        for vs in sorted(series, key=_series_key):
            per = series[vs]
            rows.append((vs[1], vs[0], paper_min_max_avg(v[0] for v in per.values()),
                         paper_min_max_avg(v[1] for v in per.values()), len(per)))
        out[grp] = rows
    return out


def _stats_cells(st):
    return ["n/a"] * 3 if st is None else [f"{v:.2f}" for v in st]


def _groups(results):
    return sorted({(r["method"], r["dtype"], r["format"]) for r in results
                   if r.get("variant") != "host"})


def table2_markdown(results) -> str:
    lines = ["# Table 2: variation (%) of time and energy per solve against cublas + polling", "",
             "As in the paper's Table 2: for every variant x sync mode, the % variation of the "
             "time and of the energy of one solve with respect to `cublas` (the paper's CUBLASL) "
             "in polling mode on the same matrix, summarised over the matrices: **min** and "
             "**max** are the variations of smallest and largest *absolute value* (the paper's "
             "convention, so both can be negative), **avg** the mean. Negative is better. Time is "
             "the wall time of one `dpsolve` call (inputs already on the device); energy is the "
             "GPU's (NVML) over the measurement window, per solve. Per-matrix values are in "
             "the figure7_*.png files and absolute.md.", ""]
    tables = table2(results)
    groups = _groups(results) or [None]
    for grp in groups:
        if grp is None or grp not in tables:
            what = "" if grp is None else f" for {grp[0]}, {grp[1]}, format {grp[2]}"
            lines += [f"## No table{what}", "", _why_no_baseline(results, grp), ""]
            continue
        method, dtype, fmt = grp
        nmat = len({r["matrix"] for r in results if r.get("status") == "ok"
                    and (r["method"], r["dtype"], r["format"]) == grp and r["variant"] == "cublas"
                    and r["sync"] == "polling"})
        lines += [f"## {method.upper()}, {dtype}, format {fmt} ({nmat} matri"
                  f"{'x' if nmat == 1 else 'ces'} with a baseline)", ""]
        for metric, title in (("gpu", "GPU energy"), ("total", "GPU + host (RAPL) energy")):
            rows = table2(results, metric).get(grp, [])
            if metric == "total" and not any(r[3] for r in rows):
                continue                     # host energy was not readable here
            if metric == "total":
                lines += ["Energy here is GPU + host package energy (RAPL), closer to the paper's "
                          "measurement of the GPU and motherboard power lines:", ""]
            lines += [f"| sync | variant | time min | time max | time avg | {title} min | "
                      f"{title} max | {title} avg | matrices |",
                      "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
            for sync, variant, ts, es, n in rows:
                lines.append("| " + " | ".join([sync, variant, *_stats_cells(ts),
                                                *_stats_cells(es), str(n)]) + " |")
            lines.append("")
    return "\n".join(lines)


def _why_no_baseline(results, grp) -> str:
    base = [r for r in results if grp is not None
            and (r["method"], r["dtype"], r["format"]) == grp
            and (r["variant"], r["sync"]) == BASELINE]
    if base:
        errs = sorted({f"{r.get('status')}: {r.get('error', '')}" for r in base})
        return "Table 2 cannot be formed: `cublas` + polling did not run: " + "; ".join(errs)
    vi = variant_info("cublas")
    if not vi.available:
        return (f"Table 2 cannot be formed: its baseline is `cublas` + polling, and the GPU "
                f"variants cannot run on this machine ({vi.reason}). The absolute figures per "
                f"matrix are in absolute.md.")
    if grp is None:
        return ("Table 2 cannot be formed: no GPU variant ran (its baseline is `cublas` + "
                "polling; add it to --variants). The absolute figures are in absolute.md.")
    return "Table 2 cannot be formed: `cublas` + polling was not in the plan (add it)."


def _cell(v, scale=1.0):
    """3 significant digits, without exponents for the magnitudes a study produces."""
    if v is None:
        return "n/a"
    v *= scale
    if v == 0 or abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 1e-3:
        return f"{v:.{max(0, 2 - math.floor(math.log10(abs(v))))}f}"
    return f"{v:.2e}"


def absolute_markdown(results) -> str:
    lines = ["# Absolute figures per matrix", "",
             "Per solve, averaged over each configuration's measurement window: wall time of one "
             "`dpsolve` call, iterations (of the last solve), time per iteration, GPU energy "
             "(NVML, J) and mean GPU power (W) over the window, host process CPU seconds, host "
             "package energy (RAPL, J; n/a where not readable). The set-up is the paper's: "
             "x* = ones, b = A x*, x0 = 0. `info` is SciPy's (0: converged; > 0: iterations "
             "run without converging; < 0: breakdown).", ""]
    by_matrix = {}
    for r in results:
        by_matrix.setdefault(r["matrix"], []).append(r)
    if not by_matrix:
        lines.append("No configuration has run yet.")
    head = ("| method | dtype | format | variant | sync | status | info | iterations | "
            "ms / solve | us / iteration | GPU J / solve | GPU W | host CPU s / solve | "
            "host J / solve | reps | note |")
    for name, rows in by_matrix.items():
        n, nnz = _num(rows[0].get("n")), _num(rows[0].get("nnz"))
        size = f"n = {int(n):,}, nnz = {int(nnz):,}" if n is not None and nnz is not None else ""
        lines += [f"## {name}", "", f"{size}{'; ' if size else ''}{rows[0].get('source', '')}", "",
                  head,
                  "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        rows.sort(key=lambda r: (r["method"], r["dtype"], r["format"],
                                 _series_key((r["variant"], r["sync"]))))
        for r in rows:
            t, its = _num(r.get("time_s")), _num(r.get("iterations"))
            fmt = r["format"] if r.get("format_used") in (None, "", r["format"]) else \
                f"{r['format']} ({r['format_used']})"
            note = (r.get("error") or "").replace("|", "/").replace("\n", " ")
            lines.append("| " + " | ".join([
                r["method"], r["dtype"], fmt, r["variant"], r["sync"], r["status"],
                r.get("info") or "", r.get("iterations") or "", _cell(t, 1e3),
                _cell(t / its if t is not None and its else None, 1e6),
                _cell(_num(r.get("gpu_energy_j"))), _cell(_num(r.get("gpu_power_w"))),
                _cell(_num(r.get("host_cpu_s"))), _cell(_num(r.get("host_energy_j"))),
                r.get("reps") or "", note[:160]]) + " |")
        lines.append("")
    return "\n".join(lines)


_COLORS = {"cublas": "#4c72b0", "cuda": "#dd8452", "merge": "#55a868", "dynamic": "#c44e52",
           "graph": "#8172b3", "persistent": "#937860"}


def plot_figure7(series: dict, path, title: str) -> Path:
    """The paper's Figure 7: for each matrix, one bar per variant x sync (the baseline left out)
    of the % variation of time (left / top) and energy (right / bottom) against cublas + polling.

    ``series`` is one group of :func:`variations`: {(variant, sync): {matrix: (time%, energy%)}}.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    keys = [vs for vs in sorted(series, key=lambda vs: (VARIANT_ORDER.get(vs[0], 99), vs[0],
                                                        SYNC_ORDER.get(vs[1], 9)))
            if vs != BASELINE]
    matrices = []
    for vs in sorted(series, key=_series_key):
        for m in series[vs]:
            if m not in matrices:
                matrices.append(m)
    wide = len(matrices) <= 8
    per = max(5.0, 0.9 * len(matrices) + 2.0)
    fig = Figure(figsize=(2 * per, 4.8) if wide else (per, 8.5), layout="constrained")
    axes = fig.subplots(1, 2) if wide else fig.subplots(2, 1)
    x = np.arange(len(matrices))
    width = 0.8 / max(1, len(keys))
    for ax, idx, what in ((axes[0], 0, "execution time"), (axes[1], 1, "energy")):
        any_bar = False
        for j, (variant, sync) in enumerate(keys):
            vals = [series[(variant, sync)].get(m, (None, None))[idx] for m in matrices]
            h = [np.nan if v is None else v for v in vals]
            any_bar |= any(v is not None for v in vals)
            ax.bar(x - 0.4 + width * (j + 0.5), h, width, color=_COLORS.get(variant, "#777777"),
                   hatch="///" if sync == "blocking" else None, edgecolor="black", linewidth=0.4)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xlim(-0.6, len(matrices) - 0.4)
        ax.set_xticks(x, matrices, rotation=30 if len(matrices) > 5 else 0,
                      ha="right" if len(matrices) > 5 else "center")
        ax.set_ylabel(f"variation of {what} (%)")
        ax.set_title(f"{what.capitalize()} vs cublas + polling")
        ax.grid(axis="y", linewidth=0.4, alpha=0.6)
        ax.set_axisbelow(True)
        if not any_bar:
            ax.set_yticks([])
            ax.text(0.5, 0.5, f"{what} not measured here (no NVML energy counter)",
                    transform=ax.transAxes, ha="center", va="center",
                    bbox={"facecolor": "white", "edgecolor": "none"})
    handles = [Patch(facecolor=_COLORS.get(v, "#777777"), edgecolor="black",
                     hatch="///" if s == "blocking" else None, label=f"{v} {s}")
               for v, s in keys]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8),
                   fontsize="small")
    fig.suptitle(title)
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path


def write_figures(out, results, log=print) -> list[Path]:
    out = Path(out)
    groups = variations(results)
    for old in out.glob("figure7_*.png"):
        old.unlink()
    if not groups:
        return []
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("matplotlib is not installed: no figures (pip install 'dpsolve[study]')")
        return []
    paths = []
    for (method, dtype, fmt), series in sorted(groups.items()):
        if not any(vs != BASELINE for vs in series):
            continue
        name = f"figure7_{method}_{dtype}_{fmt}.png".replace("/", "-")
        title = (f"{method.upper()} {dtype}, format {fmt}: variation (%) per solve vs "
                 f"cublas + polling (negative is better)")
        paths.append(plot_figure7(series, out / name, title))
    return paths


def write_reports(out, log=print) -> dict:
    """table2.md, absolute.md and the figures from results.csv. Returns their paths."""
    out = Path(out)
    results = read_results(out)
    (out / "table2.md").write_text(table2_markdown(results) + "\n")
    (out / "absolute.md").write_text(absolute_markdown(results) + "\n")
    figs = write_figures(out, results, log)
    return {"table2": out / "table2.md", "absolute": out / "absolute.md", "figures": figs,
            "results": out / "results.csv", "raw": out / "raw.csv"}
