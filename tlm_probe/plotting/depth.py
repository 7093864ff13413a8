"""A statistic against depth: one line per model with its confidence band; tapered widths as marker area."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.plotting.arms import (
    entries,
    entry_label,
    seed_summary,
    style_for,
    titled_entries,
)
from tlm_probe.plotting.checks import (
    DRAWN_COLUMNS,
    models_in_order,
    per_layer,
    require_columns,
    select_statistic,
)
from tlm_probe.plotting.style import (
    DEFAULT_DPI,
    DEFAULT_SIZE,
    axis_label,
    figure_style,
    legend_label,
    new_figure,
    split_suffix,
    title_with_provenance,
)
from tlm_probe.statistic_names import value_range

X_AXES = {"depth": "normalised depth l / (L − 1)", "layer": "layer index l"}
MARKER_AREA = 36.0  # points² for a layer of mean width; a 1.5x layer gets 1.5x the area


def plot_depth(
    results: pd.DataFrame,
    statistic: str = "align_mlp_mid",
    *,
    x: str = "depth",
    size: Sequence[int] = DEFAULT_SIZE,
    dpi: int = DEFAULT_DPI,
    title: str | None = None,
    colours: Mapping[str, tuple] | None = None,
) -> Figure:
    """`statistic` against depth (or layer) for every model in a tidy result table.

    One look per arm (plotting.colours: colour, line style, marker; the same in every figure; `colours`,
    arm -> colour, overrides the colour). A model alone is a line with its [ci_low, ci_high] band; two or
    more seeds of one arm (`<arm>-s<k>`) are thin lines, one per seed, under a bold line of their mean and
    a band of ± 1 std over the seeds. Models whose MLP width changes with depth draw markers whose area is
    proportional to the layer's width d_l, so a taper is visible. On the default x axis (l / (L − 1))
    models of any depth overlay.
    """
    results = require_columns(results, DRAWN_COLUMNS, "result")
    if x not in X_AXES:
        raise UserError(f"x axis must be one of {', '.join(X_AXES)}, got {x!r}")
    rows = per_layer(select_statistic(results, statistic), statistic)
    models = models_in_order(rows)
    groups = entries(models)
    with figure_style():
        fig = new_figure(size, dpi)
        ax = fig.add_subplot()
        tapered = False
        for entry, members in groups.items():
            tapered |= draw_entry(ax, rows, entry, members, x, style_for(members[0], colours))[2]
        seeded = any(len(m) > 1 for m in groups.values())
        _decorate(ax, rows, groups, statistic, x, (tapered, seeded), title)
    return fig


def draw_entry(ax, rows: pd.DataFrame, entry: str, members: list[str], x: str,
               style) -> tuple[str, object, bool]:
    """One entry (a model, or the seeds of an arm) on `ax`: its legend label, its line, and whether its
    marker areas follow changing layer widths."""
    if len(members) > 1:
        _draw_seeds(ax, rows, members, x, style)
    label = legend_label(entry_label(entry, members))
    statistic = str(rows["statistic"].iloc[0]) if len(rows) else ""
    return (label, *_draw_line(ax, seed_summary(rows, members, x), x, label, style, statistic))


def _draw_seeds(ax, rows: pd.DataFrame, members: list[str], x: str, style) -> None:
    """One thin line per seed, unlabelled: the spread the mean line summarises."""
    for m in members:
        one = rows[rows["model"].astype(str) == m].sort_values(x)
        ax.plot(one[x].to_numpy(float), one["value"].to_numpy(float), color=style.colour,
                linestyle=style.linestyle, linewidth=0.7, alpha=0.45, label="_nolegend_", gid=f"seed:{m}")


def _draw_line(ax, one: pd.DataFrame, x: str, label: str, style, statistic: str) -> tuple[object, bool]:
    """The entry's line (its legend handle shows colour, line style and marker) and its band; the markers
    on the line are drawn by a scatter whose areas can follow the layer widths. Returns the line and whether
    they do."""
    xs, ys = one[x].to_numpy(float), one["value"].to_numpy(float)
    grouped = bool((one["n"] > 1).any())
    colour = style.colour
    (line,) = ax.plot(xs, ys, label=label, linewidth=2.2 if grouped else 1.8,
                      **style.line(markersize=6, markevery=[]))
    if grouped:
        std = one["std"].to_numpy(float)
        lo, hi = ys - std, ys + std
    else:
        lo, hi = one["ci_low"].to_numpy(float), one["ci_high"].to_numpy(float)
    lo, hi = np.clip(lo, *value_range(statistic)), np.clip(hi, *value_range(statistic))  # no band below 0
    if np.isfinite(lo).any() and np.isfinite(hi).any():
        ax.fill_between(xs, lo, hi, color=colour, alpha=0.2, linewidth=0, label="_nolegend_")
    widths = one["d_ff"].to_numpy(float)
    tapered = bool(np.isfinite(widths).all() and np.ptp(widths) > 0)
    areas = MARKER_AREA * widths / widths.mean() if tapered else np.full(len(xs), MARKER_AREA / 2)
    ax.scatter(xs, ys, s=areas, color=colour, marker=style.marker, zorder=3, label="_nolegend_",
               edgecolors="white", linewidths=0.6)
    return line, tapered


def _decorate(ax, rows, groups, statistic, x, flags, title) -> None:
    tapered, seeded = flags
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel(axis_label(statistic))
    if x == "depth":
        ax.set_xlim(-0.03, 1.03)
    labels, tokens = titled_entries(rows, groups)
    ax.set_title(title or title_with_provenance(f"{statistic} vs {x}{split_suffix(rows)}", labels, tokens))
    band = "band: ± 1 std over seeds, else CI" if seeded else "band: CI"
    legend_title = f"model ({band}; marker area ∝ MLP width d_l)" if tapered else f"model ({band})"
    ax.legend(title=legend_title, loc="best", fontsize="small", title_fontsize="small")
