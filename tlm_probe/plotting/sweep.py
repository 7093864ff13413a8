"""Heatmap of a sweep: Δ metric vs uniform for every schedule shape (rows) x start→end ratio (columns),
one panel per mixer, the paired p-value written in each cell. Draws a sweep table; computes nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.plotting.style import DEFAULT_DPI, DEFAULT_SIZE, figure_style, new_figure

_CMAP = "RdBu_r"  # diverging, centred on 0: blue = lower loss than uniform (better), red = worse


def significance(p: float) -> str:
    if not math.isfinite(p):
        return "p n/a"
    stars = "**" if p < 0.01 else "*" if p < 0.05 else ""
    return f"p={p:.2g}{stars}"


def plot_sweep(table: pd.DataFrame, metric: str = "val_loss", *, size: Sequence[int] = DEFAULT_SIZE,
               dpi: int = DEFAULT_DPI, title: str | None = None) -> Figure:
    """`table`: train.sweep.sweep_table rows (mixer, shape, ratio, start, delta, p, n_pairs)."""
    grid = table[table["ratio"].astype(str) != ""]
    if grid.empty:
        raise UserError("this comparison has no shape x ratio arms (e.g. cosine:1.5:0.5) to draw as a sweep")
    if len(grid) < 2:  # one cell is a number, not a heatmap
        raise UserError(f"a sweep figure needs two or more shape x ratio arms; {grid['arm'].iloc[0]} against "
                        "uniform is one Δ (--kind advantage draws it over training, --kind curves the loss)")
    mixers = list(dict.fromkeys(grid["mixer"]))
    limit = float(np.nanmax(np.abs(grid["delta"].to_numpy(float)))) or 1e-9
    with figure_style():
        fig = new_figure(size, dpi)
        axes = fig.subplots(1, len(mixers), squeeze=False).ravel()
        for ax, mixer in zip(axes, mixers, strict=True):
            image = _panel(ax, grid[grid["mixer"] == mixer], mixer, limit)
        fig.colorbar(image, ax=list(axes), label=f"Δ {metric} vs uniform (paired mean over seeds)")
        n = int(grid["n_pairs"].min())
        fig.suptitle(title or f"Δ {metric} vs uniform, same parameters, FLOPs and batches\n"
                     f"{n} seed pair{'s' if n != 1 else ''}; * p<0.05, ** p<0.01 (paired t, not corrected "
                     "for the number of arms)", fontsize="medium")
    return fig


def _panel(ax, rows: pd.DataFrame, mixer: str, limit: float):
    shapes = list(dict.fromkeys(rows["shape"]))
    ratios = list(dict.fromkeys(rows.sort_values("start")["ratio"]))
    values = np.full((len(shapes), len(ratios)), np.nan)
    labels = {}
    for r in rows.itertuples():
        i, j = shapes.index(r.shape), ratios.index(r.ratio)
        values[i, j] = r.delta
        labels[i, j] = f"{r.delta:+.4f}\n{significance(r.p)}"
    image = ax.imshow(values, cmap=_CMAP, vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    for (i, j), text in labels.items():
        dark = abs(values[i, j]) > 0.6 * limit
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(len(ratios)), ratios)
    ax.set_yticks(range(len(shapes)), shapes)
    ax.set_xlabel("width ratio, first layer → last layer")
    ax.grid(False)
    ax.set_title(mixer, fontsize="small")
    return image
