"""Table 2 and the absolute table, from results.csv rows: the % variation of time and energy per
solve against cublas + polling (:func:`variations`, :func:`table2`, the paper's min / max / avg)
and their Markdown (:func:`table2_markdown`, :func:`absolute_markdown`)."""
from __future__ import annotations

import math

from ..backends import VARIANT_NAMES, variant_info
from .plan import BASELINE, HOST_FIGURE, NO_PRECOND, NO_SYNC


# --------------------------------------------------------------------------- reading results rows
def _num(v):
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def method_label(row) -> str:
    """A results row's method with its preconditioner where it has one ("cg+amg"): Jacobi-CG and
    AMG-PCG are separate groups of the tables and figures, each against its own baseline."""
    p = row.get("precond") or NO_PRECOND
    return row["method"] if p == NO_PRECOND else f"{row['method']}+{p}"


def _group(row) -> tuple:
    return (method_label(row), row["dtype"], row["format"])


# --------------------------------------------------------------------------- Table 2
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
    the GPU variants (the host variant is left out: it is not one of the paper's); ``method`` is
    :func:`method_label`'s ("cg", "cg+amg"); energy_pct is None where energy was not measured.
    Groups without a successful baseline are absent.
    """
    ok = [r for r in results if r.get("status") == "ok" and r.get("variant") != "host"]
    base = {(*_group(r), r["matrix"]): r for r in ok if (r["variant"], r["sync"]) == BASELINE}
    out = {}
    for r in ok:
        b = base.get((*_group(r), r["matrix"]))
        if b is None:
            continue
        t, tb = _num(r["time_s"]), _num(b["time_s"])
        e, eb = energy_of(r, metric), energy_of(b, metric)
        if t is None or not tb:
            continue
        tp = 100.0 * (t / tb - 1.0)
        ep = 100.0 * (e / eb - 1.0) if (e is not None and eb) else None
        grp = out.setdefault(_group(r), {})
        grp.setdefault((r["variant"], r["sync"]), {})[r["matrix"]] = (tp, ep)
    return out


def host_series(results) -> dict:
    """The host variant's results, per solve: {(method, dtype): {matrix: (time s, host energy J
    or None where RAPL was not read)}}, over its ok rows (method: :func:`method_label`'s)."""
    out = {}
    for r in results:
        t = _num(r.get("time_s"))
        if r.get("variant") == "host" and r.get("status") == "ok" and t is not None:
            out.setdefault((method_label(r), r["dtype"]), {})[r["matrix"]] = \
                (t, _num(r.get("host_energy_j")))
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
    return sorted({_group(r) for r in results if r.get("variant") != "host"})


def _link(name) -> str:
    return f"[{name}]({name})"


def _host_figure_note(figures) -> list:
    if HOST_FIGURE not in figures:
        return []
    return [f"The host variant (the NumPy reference solvers on the CPU; not one of the paper's "
            f"variants, so not in Table 2) is drawn in {_link(HOST_FIGURE)}: time and energy "
            f"per solve, per matrix.", ""]


def table2_markdown(results, figures=()) -> str:
    """Table 2 in Markdown; ``figures``: the names of the figures written beside it (linked)."""
    figures = [str(f) for f in figures]
    seen = [_link("absolute.md")] + [_link(f) for f in figures if f != HOST_FIGURE]
    lines = ["# Table 2: variation (%) of time and energy per solve against cublas + polling", "",
             "As in the paper's Table 2: for every variant x sync mode, the % variation of the "
             "time and of the energy of one solve with respect to `cublas` (the paper's CUBLASL) "
             "in polling mode on the same matrix, summarised over the matrices: **min** and "
             "**max** are the variations of smallest and largest *absolute value* (the paper's "
             "convention, so both can be negative), **avg** the mean. Negative is better. Time is "
             "the wall time of one `dpsolve` call (inputs already on the device; for a "
             "preconditioned method, `solve` on a prepared system, its set-up apart in "
             "absolute.md); energy is the "
             "GPU's (NVML) over the measurement window, per solve. Per-matrix values are in "
             f"{' and '.join(seen)}.", "", *_host_figure_note(figures)]
    tables = table2(results)
    groups = _groups(results) or [None]
    for grp in groups:
        if grp is None or grp not in tables:
            what = "" if grp is None else f" for {grp[0]}, {grp[1]}, format {grp[2]}"
            lines += [f"## No table{what}", "", _why_no_baseline(results, grp), ""]
            continue
        method, dtype, fmt = grp
        nmat = len({r["matrix"] for r in results if r.get("status") == "ok"
                    and _group(r) == grp and r["variant"] == "cublas"
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
            and _group(r) == grp and (r["variant"], r["sync"]) == BASELINE]
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


# --------------------------------------------------------------------------- the absolute table
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


def absolute_markdown(results, figures=()) -> str:
    """The absolute table in Markdown; ``figures``: the names of the figures written beside it."""
    lines = ["# Absolute figures per matrix", "",
             "Per solve, averaged over each configuration's measurement window: wall time of one "
             "`dpsolve` call, iterations (of the last solve), time per iteration, GPU energy "
             "(NVML, J) and mean GPU power (W) over the window, host process CPU seconds, host "
             "package energy (RAPL, J; n/a where not readable). A preconditioned method "
             "(cg+jacobi, cg+amg, ...) is measured on a prepared system: its set-up "
             "(`dpsolve.prepare`, an AMG hierarchy included) is timed once, apart (set-up ms), "
             "and a solve is `P.solve(b)`. The problem is the paper's: "
             "x* = ones, b = A x*, x0 = 0. `info` is SciPy's (0: converged; > 0: iterations "
             "run without converging; < 0: breakdown).", "",
             *_host_figure_note([str(f) for f in figures])]
    ok = [r for r in results if r.get("status") == "ok"]
    if ok and all(_num(r.get("host_energy_j")) is None for r in ok):
        lines += ["Host energy was not measured on this machine (no readable RAPL counter under "
                  "/sys/class/powercap): host J / solve is n/a.", ""]
    by_matrix = {}
    for r in results:
        by_matrix.setdefault(r["matrix"], []).append(r)
    if not by_matrix:
        lines.append("No configuration has run yet.")
    head = ("| method | dtype | format | variant | sync | status | info | iterations | "
            "ms / solve | us / iteration | GPU J / solve | GPU W | host CPU s / solve | "
            "host J / solve | set-up ms | reps | note |")
    for name, rows in by_matrix.items():
        n, nnz = _num(rows[0].get("n")), _num(rows[0].get("nnz"))
        size = f"n = {int(n):,}, nnz = {int(nnz):,}" if n is not None and nnz is not None else ""
        lines += [f"## {name}", "", f"{size}{'; ' if size else ''}{rows[0].get('source', '')}", "",
                  head,
                  "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
                  "---|"]
        rows.sort(key=lambda r: (method_label(r), r["dtype"], r["format"],
                                 _series_key((r["variant"], r["sync"]))))
        for r in rows:
            t, its = _num(r.get("time_s")), _num(r.get("iterations"))
            fmt = r["format"] if r.get("format_used") in (None, "", r["format"]) else \
                f"{r['format']} ({r['format_used']})"
            note = (r.get("error") or "").replace("|", "/").replace("\n", " ")
            lines.append("| " + " | ".join([
                method_label(r), r["dtype"], fmt, r["variant"], r["sync"], r["status"],
                r.get("info") or "", r.get("iterations") or "", _cell(t, 1e3),
                _cell(t / its if t is not None and its else None, 1e6),
                _cell(_num(r.get("gpu_energy_j"))), _cell(_num(r.get("gpu_power_w"))),
                _cell(_num(r.get("host_cpu_s"))), _cell(_num(r.get("host_energy_j"))),
                "-" if _num(r.get("setup_s")) is None else _cell(_num(r.get("setup_s")), 1e3),
                r.get("reps") or "", note[:160]]) + " |")
        lines.append("")
    return "\n".join(lines)
