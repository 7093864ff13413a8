"""Several statistics against depth in one figure: small multiples, one panel per statistic.

Each statistic keeps its own y axis (a cosine and a norm ratio share no scale) and every panel shares the
x axis, so a feature at one depth lines up down a column. Every model has its look of every other figure
(plotting.colours) and one legend serves all panels. `tlm plot PROBE -s A -s B` draws this; the report
draws its depth statistics this way instead of one full-size figure each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.plotting.arms import entries, style_for, titled_entries
from tlm_probe.plotting.checks import (
    DRAWN_COLUMNS,
    models_in_order,
    per_layer,
    require_columns,
    select_statistic,
)
from tlm_probe.plotting.depth import X_AXES, draw_entry
from tlm_probe.plotting.panel_fit import PanelFit
from tlm_probe.plotting.style import (
    DEFAULT_DPI,
    DEFAULT_SIZE,
    figure_style,
    new_figure,
    split_suffix,
    stat_label,
    title_with_provenance,
)


def plot_depth_panels(
    results: pd.DataFrame,
    statistics: Sequence[str],
    *,
    x: str = "depth",
    size: Sequence[int] = DEFAULT_SIZE,
    dpi: int = DEFAULT_DPI,
    title: str | None = None,
    colours: Mapping[str, tuple] | None = None,
) -> Figure:
    """One panel per statistic in `statistics`, each a plotting.depth figure in small (lines, bands, seeds,
    marker areas as there); the figure grows taller where its rows would be too short for their text."""
    results = require_columns(results, DRAWN_COLUMNS, "result")
    if x not in X_AXES:
        raise UserError(f"x axis must be one of {', '.join(X_AXES)}, got {x!r}")
    if not statistics:
        raise UserError("name at least one statistic to draw")
    frames = [per_layer(select_statistic(results, s), s) for s in statistics]
    groups = entries(models_in_order(pd.concat(frames)))
    with figure_style():
        fit = PanelFit(size, dpi, statistics, 1)  # columns, font, wrapped labels
        fig = new_figure(fit.size, dpi)
        rows = math.ceil(len(frames) / fit.cols)
        cols = math.ceil(len(frames) / rows)  # balanced: four panels are 2 × 2, not 3 + 1
        axes = fig.subplots(rows, cols, squeeze=False, sharex=True)
        handles: dict[str, object] = {}
        for ax, stat, rows in zip(axes.ravel(), statistics, frames, strict=False):
            handles.update(_panel(ax, rows, groups, stat, x, colours, fit))
        for ax in axes.ravel()[len(frames):]:
            ax.set_visible(False)
        for ax in _bottom_axes(axes, len(frames)):
            ax.set_xlabel(X_AXES[x], fontsize=fit.font)
            ax.xaxis.set_tick_params(labelbottom=True)
        fig.legend(list(handles.values()), list(handles), title="model (band: CI, or ± 1 std over seeds)",
                   loc="outside lower center", ncols=min(len(handles), 4), fontsize="small",
                   title_fontsize="small")
        labels, tokens = titled_entries(results, groups)
        what = f"{len(statistics)} statistics vs {x}{split_suffix(results)}"
        fig.suptitle(title or title_with_provenance(what, labels, tokens), fontsize="medium")
    return fig


def _panel(ax, rows, groups, statistic, x, colours, fit) -> dict[str, object]:
    """The statistic's lines of every entry present; returns legend label -> line handle."""
    handles = {}
    present = set(rows["model"].astype(str))
    for entry, members in groups.items():
        drawn = [m for m in members if m in present]
        if drawn:
            label, line, _ = draw_entry(ax, rows, entry, drawn, x, style_for(drawn[0], colours))
            handles[label] = line
    ax.set_title(statistic, fontsize=fit.font)
    ax.set_ylabel(fit.label(stat_label(statistic)), fontsize=fit.font)
    ax.tick_params(labelsize=fit.tick_font)
    if x == "depth":
        ax.set_xlim(-0.03, 1.03)
    return handles


def _bottom_axes(axes, n: int) -> list:
    """The lowest visible panel of each column (the last row may be short)."""
    rows, cols = axes.shape
    return [axes[min(rows - 1, (n - 1 - c) // cols), c] for c in range(min(cols, n))]
