"""A statistic against depth over training: one line per checkpoint step, coloured from early to late.

The table is `tlm probe RUN --checkpoints ...`'s: the result columns plus `step`. One model per figure
(steps of several runs in one colour scale would read as one run)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
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
from tlm_probe.plotting.depth import X_AXES
from tlm_probe.plotting.style import DEFAULT_DPI, DEFAULT_SIZE, figure_style, new_figure, stat_label

COLOURMAP = "viridis"  # sequential and readable in grey: early steps dark, late steps light


def plot_trajectory(
    results: pd.DataFrame,
    statistic: str = "align_mlp_mid",
    *,
    x: str = "depth",
    size: Sequence[int] = DEFAULT_SIZE,
    dpi: int = DEFAULT_DPI,
    title: str | None = None,
) -> Figure:
    """`statistic` against depth (or layer), one line per checkpoint step, with a step colour bar."""
    results = require_columns(results, (*DRAWN_COLUMNS, "step"), "checkpoint result")
    if x not in X_AXES:
        raise UserError(f"x axis must be one of {', '.join(X_AXES)}, got {x!r}")
    rows = per_layer(select_statistic(results, statistic), statistic)
    models = models_in_order(rows)
    if len(models) > 1:
        raise UserError(f"a trajectory figure draws one run; these results hold {', '.join(models)}")
    steps = sorted(rows["step"].unique())
    norm = mpl.colors.Normalize(vmin=min(steps), vmax=max(steps) if len(steps) > 1 else min(steps) + 1)
    cmap = mpl.colormaps[COLOURMAP]
    with figure_style():
        fig = new_figure(size, dpi)
        ax = fig.add_subplot()
        for step in steps:
            one = rows[rows["step"] == step].sort_values(x)
            colour = cmap(norm(step))
            xs, ys = one[x].to_numpy(float), one["value"].to_numpy(float)
            ax.plot(xs, ys, color=colour, linewidth=1.6, marker="o", markersize=3.5)
            lo, hi = one["ci_low"].to_numpy(float), one["ci_high"].to_numpy(float)
            if np.isfinite(lo).any() and np.isfinite(hi).any():
                ax.fill_between(xs, lo, hi, color=colour, alpha=0.12, linewidth=0)
        fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="training step")
        ax.set_xlabel(X_AXES[x])
        ax.set_ylabel(f"{statistic}: {stat_label(statistic)}")
        if x == "depth":
            ax.set_xlim(-0.03, 1.03)
        ax.set_title(title or f"{statistic} vs {x} over training: {models[0]}, {len(steps)} checkpoints "
                     f"(steps {steps[0]}–{steps[-1]})")
    return fig
