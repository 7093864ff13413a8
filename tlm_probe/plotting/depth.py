"""A statistic against depth: one line per model with its confidence band; tapered widths as marker area."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
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
    figure_style,
    legend_label,
    new_figure,
    palette,
    stat_label,
    title_with_provenance,
)

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
) -> Figure:
    """`statistic` against depth (or layer) for every model in a tidy result table.

    Lines carry the model name as label; the band is [ci_low, ci_high]. Models whose MLP width changes
    with depth draw markers whose area is proportional to the layer's width d_l, so a taper is visible.
    """
    results = require_columns(results, DRAWN_COLUMNS, "result")
    if x not in X_AXES:
        raise UserError(f"x axis must be one of {', '.join(X_AXES)}, got {x!r}")
    rows = per_layer(select_statistic(results, statistic), statistic)
    models = models_in_order(rows)
    with figure_style():
        fig = new_figure(size, dpi)
        ax = fig.add_subplot()
        tapered = False
        for model, colour in zip(models, palette(len(models)), strict=True):
            one = rows[rows["model"].astype(str) == model].sort_values(x)
            tapered |= _draw_model(ax, one, x, model, colour)
        _decorate(ax, rows, models, statistic, x, tapered, title)
    return fig


def _draw_model(ax, one: pd.DataFrame, x: str, model: str, colour) -> bool:
    xs = one[x].to_numpy(float)
    ax.plot(xs, one["value"].to_numpy(float), color=colour, label=legend_label(model), linewidth=1.8)
    lo, hi = one["ci_low"].to_numpy(float), one["ci_high"].to_numpy(float)
    if np.isfinite(lo).any() and np.isfinite(hi).any():
        ax.fill_between(xs, lo, hi, color=colour, alpha=0.2, linewidth=0, label="_nolegend_")
    widths = one["d_ff"].to_numpy(float)
    tapered = bool(np.isfinite(widths).all() and np.ptp(widths) > 0)
    areas = MARKER_AREA * widths / widths.mean() if tapered else np.full(len(xs), MARKER_AREA / 2)
    ax.scatter(xs, one["value"].to_numpy(float), s=areas, color=colour, zorder=3, label="_nolegend_",
               edgecolors="white", linewidths=0.6)
    return tapered


def _decorate(ax, rows, models, statistic, x, tapered, title) -> None:
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel(f"{statistic}: {stat_label(statistic)}")
    if x == "depth":
        ax.set_xlim(-0.03, 1.03)
    tokens = [rows.loc[rows["model"].astype(str) == m, "n_tokens"].max() for m in models]
    ax.set_title(title or title_with_provenance(f"{statistic} vs {x}", models, tokens))
    legend_title = "model (marker area ∝ MLP width d_l)" if tapered else "model (band: CI)"
    ax.legend(title=legend_title, loc="best", fontsize="small", title_fontsize="small")
