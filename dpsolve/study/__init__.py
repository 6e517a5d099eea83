"""The energy study of the paper's Section 3: matrices x methods x variants x sync modes x dtypes.

Each configuration gets ``warmup`` solves, then repeated solves until a measurement window of at
least ``window`` seconds is filled (:func:`dpsolve.measure.measure_window`: time, host CPU, GPU
and host energy per solve), then an idle gap of ``gap`` seconds so that the next window starts from
an idle GPU. The set-up is the paper's: x* = ones, b = A x*, x0 = 0. Without a preconditioner a
solve is one ``dpsolve`` call (the paper's); with one (``Settings.preconds``: "jacobi", "amg",
...) the system is prepared once, the set-up timed apart, and a solve is ``P.solve(b)``.

Outputs, in ``out`` (default ``study-out/``), written as the study goes:

    results.csv     one row per configuration (the resume index; key: matrix, method, precond,
                    variant, sync, dtype, format); status ok / failed (with the error) / skipped
                    (with why); a preconditioned configuration's set-up apart (setup_s)
    raw.csv         one row per repetition (solve) inside every window
    table2.md       the paper's Table 2: min / max / avg % variation of time and energy per
                    variant x sync against cublas + polling
    absolute.md     absolute figures per matrix: time, iterations, energy, power, host CPU, RAPL
    figure7_<method>_<dtype>_<format>.png   the paper's Figure 7: per-matrix % variation bars
    host_time_energy.png    the host variant's time and energy per solve per matrix (energy
                    only where RAPL was read)
    study.json      the settings (a re-run with other settings refuses to mix them)

A re-run skips configurations already in results.csv (ok or failed; skipped ones are looked at
again, as the machine may have changed) unless told to start over. It checks the files first: an
incomplete last line (a run killed while writing it, a full disk) is dropped with a warning and
its configuration runs again; a file of another version, or a damaged one, is an error that
names the file and the line.

The package, in the order a study runs (each module imports only those above it):

    plan.py         the matrices (Problem, resolve_problem), Settings, Config, make_plan, and
                    the constants (METHODS, SYNC_MODES, BASELINE, KEY, the CSV fields, defaults)
    files.py        results.csv, raw.csv, study.json: read and checked (StudyFileError names the
                    file and line), appended a configuration at a time, repaired on resume
    tables.py       Table 2 and the absolute table from results.csv rows (variations, table2,
                    table2_markdown, absolute_markdown)
    figures.py      Figure 7 (plot_figure7) and the host figure (host_figure, plot_host),
                    write_figures
    run.py          run_config, prepare_out, run_study, the progress bar, write_reports

Every public name is importable from here: ``from dpsolve.study import run_study``. To replace a
name for a test, patch it where it is looked up: ``dpsolve.study.plan.DEFAULT_GENERATED`` for
default_problems, the package's name for the command line (dpsolve/cli.py imports from here).
"""
from __future__ import annotations

from .figures import host_figure, plot_figure7, plot_host, write_figures
from .files import StudyFileError
from .plan import (BASELINE, CPU_GAP, CPU_WINDOW, DEFAULT_BUDGET_S, DEFAULT_GENERATED,
                   DEFAULT_GENERATED_GPU, DEFAULT_OUT, FIGURE_GLOBS, GPU_GAP, GPU_WINDOW,
                   HOST_FIGURE, KEY, METHODS, MIN_WINDOW, NO_PRECOND, NO_SYNC,
                   NUMBER_FIELDS, PAPER_MAXITER, PER_CONFIG_OVERHEAD_S,
                   RAW_FIELDS, RESULT_FIELDS, STATUSES, SYNC_MODES, TEXT_FIELDS, Config,
                   Problem, Settings, default_problems, default_window, make_plan,
                   paper_problems, prefetch, resolve_problem)
from .run import prepare_out, read_results, run_config, run_study, write_reports
from .run import _done_line  # noqa: F401  (tests/test_study.py checks the per-config line)
from .tables import (SYNC_ORDER, VARIANT_ORDER, absolute_markdown, energy_of, host_series,
                     paper_min_max_avg, table2, table2_markdown, variations)

__all__ = [
    # plan
    "BASELINE", "SYNC_MODES", "METHODS", "NO_SYNC", "NO_PRECOND", "KEY", "RESULT_FIELDS",
    "RAW_FIELDS",
    "TEXT_FIELDS", "NUMBER_FIELDS", "STATUSES",
    "DEFAULT_OUT", "HOST_FIGURE", "FIGURE_GLOBS", "DEFAULT_GENERATED", "DEFAULT_GENERATED_GPU",
    "GPU_WINDOW", "CPU_WINDOW",
    "GPU_GAP", "CPU_GAP", "DEFAULT_BUDGET_S", "PER_CONFIG_OVERHEAD_S", "MIN_WINDOW",
    "PAPER_MAXITER", "default_window", "Problem", "resolve_problem", "default_problems",
    "prefetch", "paper_problems", "Config", "Settings", "make_plan",
    # files
    "StudyFileError",
    # run
    "read_results", "run_config", "prepare_out", "run_study", "write_reports",
    # tables
    "VARIANT_ORDER", "SYNC_ORDER", "energy_of", "variations", "paper_min_max_avg", "table2",
    "table2_markdown", "absolute_markdown", "host_series",
    # figures
    "plot_figure7", "host_figure", "plot_host", "write_figures",
]
