"""A statistic against depth over training: one line per checkpoint step, coloured from early to late.

The table is `tlm probe RUN --checkpoints ...`'s: the result columns plus `step`. Several runs (e.g. uniform
and a taper) get one panel each, side by side, sharing the y axis and the step colour scale, so a step's
colour means the same step in every panel (one panel of several runs would read as one run)."""

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
from tlm_probe.plotting.colours import arm_style
from tlm_probe.plotting.depth import X_AXES
from tlm_probe.plotting.style import DEFAULT_DPI, DEFAULT_SIZE, axis_label, figure_style, new_figure

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
    """`statistic` against depth (or layer), one line per checkpoint step, one panel per run, with a
    step colour bar. Colour means the step here; each run keeps the line style and marker of its arm
    (plotting.colours), as in the other figures."""
    results = require_columns(results, (*DRAWN_COLUMNS, "step"), "checkpoint result")
    if x not in X_AXES:
        raise UserError(f"x axis must be one of {', '.join(X_AXES)}, got {x!r}")
    rows = per_layer(select_statistic(results, statistic), statistic)
    models = models_in_order(rows)
    steps = sorted(rows["step"].unique())
    norm = mpl.colors.Normalize(vmin=min(steps), vmax=max(steps) if len(steps) > 1 else min(steps) + 1)
    cmap = mpl.colormaps[COLOURMAP]
    with figure_style():
        fig = new_figure(size, dpi)
        axes = fig.subplots(1, len(models), sharey=True, squeeze=False)[0]
        for ax, model in zip(axes, models, strict=True):
            _draw_run(ax, rows[rows["model"] == model], x, norm, cmap)
            ax.set_xlabel(X_AXES[x])
            if len(models) > 1:
                ax.set_title(model)
        fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=list(axes), label="training step")
        axes[0].set_ylabel(axis_label(statistic))
        named = f": {models[0]}" if len(models) == 1 else ""  # several: each panel names its run
        head = title or (f"{statistic} vs {x} over training{named}, {len(steps)} checkpoints "
                         f"(steps {steps[0]}–{steps[-1]})")
        (axes[0].set_title if len(models) == 1 else fig.suptitle)(head)
    return fig


def _draw_run(ax, rows: pd.DataFrame, x: str, norm, cmap) -> None:
    """One run's lines, a line per step with its confidence band where the table has one."""
    look = arm_style(str(rows["model"].iloc[0]))
    for step in sorted(rows["step"].unique()):
        one = rows[rows["step"] == step].sort_values(x)
        colour = cmap(norm(step))
        xs, ys = one[x].to_numpy(float), one["value"].to_numpy(float)
        ax.plot(xs, ys, color=colour, linewidth=1.6, linestyle=look.linestyle, marker=look.marker,
                markersize=3.5)
        lo, hi = one["ci_low"].to_numpy(float), one["ci_high"].to_numpy(float)
        if np.isfinite(lo).any() and np.isfinite(hi).any():
            ax.fill_between(xs, lo, hi, color=colour, alpha=0.12, linewidth=0)
    if x == "depth":
        ax.set_xlim(-0.03, 1.03)
