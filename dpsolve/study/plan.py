"""The study's plan: the matrices (:class:`Problem`, :func:`resolve_problem`), the settings
(:class:`Settings`), the configurations they expand to (:class:`Config`, :func:`make_plan`), and
the constants that name them: methods, sync modes, the baseline, the CSV fields, the defaults."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import matrices as _m
from .. import methods as method_table

BASELINE = ("cublas", "polling")
SYNC_MODES = ("polling", "blocking")
METHODS = method_table.names()     # the method table's (dpsolve/methods)
NO_SYNC = "-"                      # the host variant has no sync mode and no device format
NO_PRECOND = "none"                # the paper's plain CG (a one-shot call per solve)

KEY = ("matrix", "method", "precond", "variant", "sync", "dtype", "format")
RESULT_FIELDS = KEY + (
    "status", "error", "format_used", "n", "nnz", "source", "setup_s", "reps", "window_s",
    "time_s",
    "time_min_s", "time_max_s", "iterations", "info", "rel_residual", "solve_time_s",
    "gpu_time_s", "gpu_energy_j", "gpu_power_w", "host_cpu_s", "host_energy_j", "device",
    "finished")
RAW_FIELDS = KEY + ("rep", "wall_s", "cpu_s", "iterations", "info", "rel_residual",
                    "solve_time_s", "gpu_time_s")
TEXT_FIELDS = KEY + ("status", "error", "format_used", "source", "device", "finished")
NUMBER_FIELDS = frozenset(RESULT_FIELDS + RAW_FIELDS) - set(TEXT_FIELDS)   # "" or a number
STATUSES = ("ok", "failed", "skipped")

DEFAULT_OUT = "study-out"
HOST_FIGURE = "host_time_energy.png"                 # the host variant's results, drawn
FIGURE_GLOBS = ("figure7_*.png", HOST_FIGURE)        # what write_figures replaces
DEFAULT_GENERATED = ("laplace2d-256", "laplace3d-64")
DEFAULT_GENERATED_GPU = ("laplace3d-128",)           # added where a GPU variant runs
GPU_WINDOW, CPU_WINDOW = 2.0, 0.5                    # seconds; CPU: the host variant only
GPU_GAP, CPU_GAP = 0.5, 0.1
DEFAULT_BUDGET_S = 480           # the default study on a GPU: ~8 min of windows and overheads
PER_CONFIG_OVERHEAD_S = 1.0      # warm-up solve, gap and the last solve's overshoot, roughly
MIN_WINDOW = 1.0
PAPER_MAXITER = 20000


def default_window(n_configs: int) -> float:
    """The default study's window on a GPU: 2 s, shortened (to no less than 1 s) if the plan
    would not fit the budget; the default plan (13 matrices x 8) keeps 2 s."""
    fit = DEFAULT_BUDGET_S / max(1, n_configs) - PER_CONFIG_OVERHEAD_S
    return max(MIN_WINDOW, min(GPU_WINDOW, round(fit, 1)))


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
    from .. import catalog, fetch
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


def default_problems(gpu: bool, *, force=False, dtype="float64", log=print) -> list[Problem]:
    """Generated Laplace problems, plus every SPD matrix of the shared folder when there is one
    (where there is none, one line says where it was looked for, and the variable to set)."""
    names = DEFAULT_GENERATED + (DEFAULT_GENERATED_GPU if gpu else ())
    probs = [resolve_problem(n, force=force, dtype=dtype) for n in names]
    d = _m.shared_matrix_dir()
    if d is None:
        looked = dict.fromkeys(str(p) for base in (_m.ROOT, Path.cwd().resolve())
                               for p in (base / ".matrices", base.parent / "shared" / "matrices"))
        log(f"no shared matrices (no *.mtx.gz in {' or '.join(looked)}): "
            f"running the generated problems only; to add a folder's SPD matrices, set "
            f"DPSOLVE_SHARED_MATRICES=/path/to/folder")
    for path in (_m.shared_spd_matrices(d) if d else []):
        probs.append(Problem(_m.matrix_name(path), f"shared {path}", True,
                             lambda p=path: _m.read_matrix(p), lambda p=path: _m.mtx_field(p)))
    return probs


def prefetch(problems, matrix_dir=None, progress=True, log=print) -> None:
    """Download the SuiteSparse matrices of ``problems`` before the study starts, so that no
    download runs between measurements. A failure is reported and left to the study, which
    records it against that matrix's configurations and goes on with the others."""
    from .. import fetch
    for p in problems:
        if p.source.startswith("SuiteSparse "):
            try:
                fetch.fetch(p.source.split(" ", 1)[1], matrix_dir, progress=progress)
            except Exception as e:
                log(f"could not download {p.name}: {e}")


def paper_problems(matrix_dir=None, progress=True, *, force=False,
                   dtype="float32") -> list[Problem]:
    from ..catalog import PAPER
    return [resolve_problem(e.paper_name, matrix_dir, progress, force=force, dtype=dtype)
            for e in PAPER]


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Config:
    matrix: str
    method: str
    precond: str                       # NO_PRECOND, or a name of dpsolve.precond
    variant: str
    sync: str
    dtype: str
    format: str

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, k) for k in KEY)

    def label(self) -> str:
        s = f"{self.matrix} {self.method} {self.dtype} {self.variant}"
        if self.precond != NO_PRECOND:
            s = f"{self.matrix} {self.method} M={self.precond} {self.dtype} {self.variant}"
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
    preconds: tuple = (NO_PRECOND,)      # NO_PRECOND and / or names of dpsolve.precond
    window: float = GPU_WINDOW
    gap: float = GPU_GAP
    warmup: int = 1

    def fingerprint(self) -> dict:
        """What must agree for results of two runs to be mixed in one output folder."""
        return {"rtol": self.rtol, "maxiter": self.maxiter}


def make_plan(problems, settings: Settings) -> list[tuple[Problem, Config]]:
    """The configurations, in run order: (method, variant) pairs that the method table holds
    (a variant that does not run a method is not planned)."""
    from .. import backends  # noqa: F401  (the GPU variants enter the table when imported)
    plan, seen = [], set()
    for prob in problems:
        for dtype in settings.dtypes or (prob.own_dtype(),):
            for method in settings.methods:
                for precond in settings.preconds:
                    for fmt in settings.formats:
                        for variant in settings.variants:
                            if not method_table.implemented(method, variant):
                                continue
                            host = variant == "host"
                            for sync in ((NO_SYNC,) if host else settings.syncs):
                                c = Config(prob.name, method, precond, variant, sync, dtype,
                                           NO_SYNC if host else fmt)
                                if c.key not in seen:
                                    seen.add(c.key)
                                    plan.append((prob, c))
    return plan
