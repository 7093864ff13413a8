"""Training and validation curves of a comparison: mean ± std over seeds per arm, x in tokens seen."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from tlm_probe.errors import UserError
from tlm_probe.plotting.arms import style_for
from tlm_probe.plotting.checks import CURVE_COLUMNS, require_columns
from tlm_probe.plotting.style import (
    DEFAULT_DPI,
    DEFAULT_SIZE,
    figure_style,
    legend_label,
    new_figure,
    stat_label,
)

PANELS = ("train_loss", "val_loss")
TRAIN_MARKERS = 8  # a dense training curve carries its arm's marker this many times


def plot_curves(
    curves: pd.DataFrame,
    *,
    metrics: Sequence[str] = PANELS,
    size: Sequence[int] = DEFAULT_SIZE,
    dpi: int = DEFAULT_DPI,
    title: str | None = None,
    colours: Mapping[str, tuple] | None = None,
) -> Figure:
    """One panel per metric; per arm a line of the seed mean and a band of ± one seed standard deviation.

    `curves` is the summary table `arm, metric, tokens, mean, std, n_seeds` (see plotting.inputs). Each
    arm is drawn in its own colour, line style and marker (plotting.colours: the same in every figure);
    `colours` (arm -> colour) overrides colours."""
    curves = require_columns(curves, CURVE_COLUMNS, "curve")
    metrics = [m for m in metrics if (curves["metric"] == m).any()]
    if not metrics:
        raise UserError("no training or validation losses to plot (metrics.jsonl has no loss lines)")
    arms = list(dict.fromkeys(curves["arm"].astype(str)))
    with figure_style():
        fig = new_figure(size, dpi)
        axes = fig.subplots(1, len(metrics), squeeze=False).ravel()
        for ax, metric in zip(axes, metrics, strict=True):
            _panel(ax, curves[curves["metric"] == metric], metric, arms, colours)
        fig.suptitle(title or f"loss vs tokens seen, {len(arms)} arm(s); {band_note(curves)}")
    return fig


def band_note(curves: pd.DataFrame) -> str:
    """What the curves' bands are: the title's words and a report's caption say the same."""
    seeds = int(curves["n_seeds"].max())
    return f"band: ± 1 std over up to {seeds} seeds" if seeds > 1 else "one seed each (no band)"


def _panel(ax, rows: pd.DataFrame, metric: str, arms: list[str], colours: Mapping | None) -> None:
    for arm in arms:
        one = rows[rows["arm"].astype(str) == arm].sort_values("tokens")
        if one.empty:
            continue
        xs, mean, std = (one[c].to_numpy(float) for c in ("tokens", "mean", "std"))
        style = style_for(arm, colours)
        every = 1 if metric.startswith("val") else max(1, len(xs) // TRAIN_MARKERS)
        ax.plot(xs, mean, label=legend_label(arm), linewidth=1.6, markersize=4, markevery=every,
                **style.line())
        if np.isfinite(std).any() and (one["n_seeds"] > 1).any():
            std = np.nan_to_num(std)
            ax.fill_between(xs, mean - std, mean + std, color=style.colour, alpha=0.2, linewidth=0)
    ax.set_xlabel("tokens seen")
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_ylabel(stat_label(metric))
    ax.set_title(metric, fontsize="small")
    ax.legend(title="arm", fontsize="small", title_fontsize="small", loc="best")
