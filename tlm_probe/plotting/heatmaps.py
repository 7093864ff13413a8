"""Layer × layer matrices (angular distance, CKA): one heatmap panel per model, shared colour scale."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.plotting.checks import models_in_order, require_columns, select_statistic
from tlm_probe.plotting.style import DEFAULT_DPI, DEFAULT_SIZE, axis_label, figure_style, new_figure
from tlm_probe.results import MATRIX_COLUMNS

_CMAP = "viridis"  # perceptually uniform and colour-blind safe
MAX_ANNOTATED = 12  # write the numbers into the cells only while they stay legible


def plot_heatmaps(
    matrices: pd.DataFrame,
    statistic: str = "angular_distance",
    *,
    size: Sequence[int] = DEFAULT_SIZE,
    dpi: int = DEFAULT_DPI,
    title: str | None = None,
    tokens: dict[str, float] | None = None,
) -> Figure:
    """One L×L heatmap per model of `statistic` from a tidy `model, layer_i, layer_j, statistic, value`
    table; `tokens` (model -> token count) goes into the title as provenance."""
    matrices = require_columns(matrices, MATRIX_COLUMNS, "matrix")
    rows = select_statistic(matrices, statistic, "matrix")
    models = models_in_order(rows)
    grids = [_grid(rows[rows["model"].astype(str) == m]) for m in models]
    finite = np.concatenate([g[np.isfinite(g)] for g in grids] or [np.zeros(1)])
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    cols = min(len(models), 3)
    with figure_style():
        fig = new_figure(size, dpi)
        axes = fig.subplots(math.ceil(len(models) / cols), cols, squeeze=False).ravel()
        for ax, model, grid in zip(axes, models, grids, strict=False):
            image = _panel(ax, grid, model, vmin, vmax, (tokens or {}).get(model))
        for ax in axes[len(models):]:
            ax.set_visible(False)
        fig.colorbar(image, ax=list(axes[: len(models)]), label=axis_label(statistic))
        fig.suptitle(title or f"{statistic} between layers i (rows) and j (columns)\nindex l: the stream "
                     "entering block l; the last: the final output", fontsize="medium")
    return fig


def _grid(one: pd.DataFrame) -> np.ndarray:
    n = int(max(one["layer_i"].max(), one["layer_j"].max())) + 1
    grid = np.full((n, n), np.nan)
    grid[one["layer_i"].to_numpy(int), one["layer_j"].to_numpy(int)] = one["value"].to_numpy(float)
    return grid


def _panel(ax, grid: np.ndarray, model: str, vmin: float, vmax: float, tokens: float | None):
    image = ax.imshow(grid, cmap=_CMAP, vmin=vmin, vmax=vmax, origin="upper", interpolation="nearest")
    n = grid.shape[0]
    ax.set_xlabel("layer j")
    ax.set_ylabel("layer i")
    step = max(1, n // 12)
    ax.set_xticks(range(0, n, step))
    ax.set_yticks(range(0, n, step))
    ax.grid(False)
    suffix = f" ({int(tokens):,} tokens)" if tokens and tokens == tokens else ""
    ax.set_title(f"{model}{suffix}", fontsize="small")
    if n <= MAX_ANNOTATED:
        _annotate(ax, grid, (vmin + vmax) / 2)
    return image


def _annotate(ax, grid: np.ndarray, middle: float) -> None:
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                    color="black" if v > middle else "white")
