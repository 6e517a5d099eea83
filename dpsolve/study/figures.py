"""The paper's Figure 7: per-matrix bars of the % variation of time and energy against cublas +
polling, one PNG per method x dtype x format (matplotlib, imported when a figure is drawn)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .plan import BASELINE
from .tables import SYNC_ORDER, VARIANT_ORDER, _series_key, variations


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
