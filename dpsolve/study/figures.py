"""The figures, per matrix (matplotlib, imported when a figure is drawn): the paper's Figure 7,
bars of the % variation of time and energy against cublas + polling, one PNG per method x dtype
x format; and the host variant's time and energy per solve (:data:`HOST_FIGURE`), which has no
baseline to vary from."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .plan import BASELINE, FIGURE_GLOBS, HOST_FIGURE
from .tables import SYNC_ORDER, VARIANT_ORDER, _cell, _series_key, host_series, variations


_COLORS = {"cublas": "#4c72b0", "cuda": "#dd8452", "merge": "#55a868", "dynamic": "#c44e52",
           "graph": "#8172b3", "persistent": "#937860"}


def plot_figure7(series: dict, path, title: str) -> Path:
    """The paper's Figure 7: for each matrix, one bar per variant x sync (the baseline left out)
    of the % variation of time (left / top) and energy (right / bottom) against cublas + polling.

    ``series`` is one group of :func:`variations`: {(variant, sync): {matrix: (time%, energy%)}}.
    """
    from matplotlib.patches import Patch

    keys = [vs for vs in sorted(series, key=lambda vs: (VARIANT_ORDER.get(vs[0], 99), vs[0],
                                                        SYNC_ORDER.get(vs[1], 9)))
            if vs != BASELINE]
    matrices = []
    for vs in sorted(series, key=_series_key):
        for m in series[vs]:
            if m not in matrices:
                matrices.append(m)
    fig, axes = _two_panels(len(matrices))
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
        _matrix_axis(ax, matrices, f"variation of {what} (%)",
                     f"{what.capitalize()} vs cublas + polling")
        if not any_bar:
            _not_measured(ax, f"{what} not measured here (no NVML energy counter)")
    handles = [Patch(facecolor=_COLORS.get(v, "#777777"), edgecolor="black",
                     hatch="///" if s == "blocking" else None, label=f"{v} {s}")
               for v, s in keys]
    _finish(fig, handles, title)
    return _save(fig, path)


def _two_panels(n_matrices):
    """A figure of two panels over the matrices: side by side, or one above the other for
    more than 8 matrices."""
    from matplotlib.figure import Figure
    wide = n_matrices <= 8
    per = max(5.0, 0.9 * n_matrices + 2.0)
    fig = Figure(figsize=(2 * per, 4.8) if wide else (per, 8.5), layout="constrained")
    return fig, (fig.subplots(1, 2) if wide else fig.subplots(2, 1))


def _matrix_axis(ax, matrices, ylabel, title):
    """One panel's matrix names on x, its label and title, a light grid."""
    ax.set_xlim(-0.6, len(matrices) - 0.4)
    ax.set_xticks(np.arange(len(matrices)), matrices, rotation=30 if len(matrices) > 5 else 0,
                  ha="right" if len(matrices) > 5 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", linewidth=0.4, alpha=0.6)
    ax.set_axisbelow(True)


def _not_measured(ax, text):
    """A panel with nothing to draw says why, in its middle."""
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", wrap=True,
            bbox={"facecolor": "white", "edgecolor": "none"})


def _finish(fig, handles, title):
    """The legend below the panels, the title above."""
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8),
                   fontsize="small")
    fig.suptitle(title)


def _save(fig, path) -> Path:
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path


# --------------------------------------------------------------------------- the host variant
_HOST_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")
HOST_TITLE = ("Host variant (NumPy reference solvers on the CPU): time and energy per solve "
              "(x* = ones, b = A x*, x0 = 0)")


def host_figure(series: dict, title: str = HOST_TITLE):
    """The host variant's results: for each matrix, one bar per method x dtype of the time per
    solve (ms; left / top) and of the host energy per solve (J, RAPL; right / bottom). Energy
    is drawn only where it was measured; a panel without any says so. Returns the Figure.

    ``series`` is :func:`dpsolve.study.tables.host_series`: {(method, dtype): {matrix: (time s,
    energy J or None)}}."""
    from matplotlib.patches import Patch

    keys = sorted(series)
    matrices = list(dict.fromkeys(m for k in keys for m in series[k]))
    fig, axes = _two_panels(len(matrices))
    width = 0.8 / max(1, len(keys))
    for ax, idx, scale, ylabel, what in (
            (axes[0], 0, 1e3, "time per solve (ms)", "Time per solve"),
            (axes[1], 1, 1.0, "host energy per solve (J, RAPL package)",
             "Host energy per solve")):
        drawn, missing = [], []
        for j, key in enumerate(keys):
            xs, hs = [], []
            for i, m in enumerate(matrices):
                if m in series[key]:
                    v = series[key][m][idx]
                    (missing if v is None else xs).append(i - 0.4 + width * (j + 0.5))
                    hs += [] if v is None else [v * scale]
            if hs:
                bars = ax.bar(xs, hs, width, color=_HOST_COLORS[j % len(_HOST_COLORS)],
                              edgecolor="black", linewidth=0.4)
                ax.bar_label(bars, [_cell(h) for h in hs], fontsize="x-small", padding=1,
                             rotation=90 if len(matrices) * len(keys) > 12 else 0)
                drawn += hs
        _matrix_axis(ax, matrices, ylabel, what)
        if not drawn:
            _not_measured(ax, "Energy not measured on this machine: no readable RAPL counter "
                              "(/sys/class/powercap)")
            continue
        for x in missing:                # measured for some configurations, not for these
            ax.text(x, 0.01, "n/a", transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize="x-small")
        if max(drawn) > 30 * min(drawn):
            ax.set_yscale("log")
            ax.set_ylabel(ylabel.replace(")", ", log scale)", 1))
        ax.margins(y=0.15)
    _finish(fig, [Patch(facecolor=_HOST_COLORS[j % len(_HOST_COLORS)], edgecolor="black",
                        label=f"{m.upper()} {d}") for j, (m, d) in enumerate(keys)], title)
    return fig


def plot_host(series: dict, path, title: str = HOST_TITLE) -> Path:
    """:func:`host_figure`, saved to ``path``."""
    return _save(host_figure(series, title), path)


def write_figures(out, results, log=print) -> list[Path]:
    """Figure 7 for each method x dtype x format with a baseline, and the host figure where the
    host variant ran; the figures of an earlier call are replaced. Returns their paths."""
    out = Path(out)
    for pattern in FIGURE_GLOBS:
        for old in out.glob(pattern):
            old.unlink()
    groups, host = variations(results), host_series(results)
    if not (groups or host):
        return []
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("matplotlib is not installed: no figures (pip install 'dpsolve[study]')")
        return []
    paths = [plot_host(host, out / HOST_FIGURE)] if host else []
    for (method, dtype, fmt), series in sorted(groups.items()):
        if not any(vs != BASELINE for vs in series):
            continue
        name = f"figure7_{method}_{dtype}_{fmt}.png".replace("/", "-")
        title = (f"{method.upper()} {dtype}, format {fmt}: variation (%) per solve vs "
                 f"cublas + polling (negative is better)")
        paths.append(plot_figure7(series, out / name, title))
    return paths
