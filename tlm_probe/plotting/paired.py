"""Each arm minus its baseline, paired by seed: one row per arm, a dot per seed, the mean difference with
its 95% interval, and the test's p (Holm-adjusted beside it). The picture behind a comparison's paired
table and a study's contrasts. Draws tables; computes nothing (stats.paired pairs the seeds)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tlm_probe.errors import UserError
from tlm_probe.plotting.arms import style_for
from tlm_probe.plotting.style import (
    DEFAULT_DPI,
    DEFAULT_SIZE,
    figure_style,
    new_figure,
    stat_label,
)

SPREAD = 0.28  # a row's seeds spread over ±SPREAD of its height, in seed order: no dot hides another


def text_width(fig: Figure) -> int:
    """Characters of title text a line of `fig` holds (about 7 points each)."""
    return max(30, int(fig.get_figwidth() * 72 / 7))


def seed_offsets(n: int) -> np.ndarray:
    """Vertical offsets of a row's `n` seeds (the first seed highest), evenly over ±SPREAD."""
    return np.linspace(SPREAD, -SPREAD, n) if n > 1 else np.zeros(n)


def plot_paired(diffs: pd.DataFrame, summary: pd.DataFrame, metric: str = "val_loss", *,
                size: Sequence[int] = DEFAULT_SIZE, dpi: int = DEFAULT_DPI, title: str | None = None,
                colours: Mapping[str, tuple] | None = None) -> Figure:
    """`diffs`: stats.paired.seed_differences rows (arm, baseline, seed, diff); `summary`:
    stats.paired.paired_summary rows (arm, baseline, n_pairs, delta, ci_low, ci_high, p, p_holm), one per
    arm, drawn top to bottom in its order. `colours`: arm -> colour, over each arm's own look."""
    if summary.empty:
        raise UserError("no arm has a baseline to be paired with, so there is no paired difference to draw")
    several = summary["baseline"].nunique() > 1
    with figure_style():
        fig = new_figure(size, dpi)
        ax = fig.subplots()
        labels = []
        for y, row in zip(range(len(summary))[::-1], summary.itertuples(), strict=True):
            seeds = diffs[diffs["arm"] == row.arm].sort_values("seed")
            _row(ax, y, row, seeds["diff"].to_numpy(float), colours)
            labels.append((y, _label(row, seeds["diff"].to_numpy(float), several)))
        ax.axvline(0, color="dimgrey", linewidth=1.4, zorder=1)
        ax.set_yticks([y for y, _ in labels], [text for _, text in labels], fontsize="small")
        ax.set_ylim(-0.6, len(summary) - 0.4)
        ax.margins(x=0.08)  # a dot at the edge stays whole
        # at most one tick per 1.33 inches of figure: labels such as −0.075 never run into each other
        ax.xaxis.set_major_locator(MaxNLocator(nbins=max(3, int(fig.get_figwidth() * 0.75)),
                                               steps=[1, 2, 2.5, 5, 10]))
        ax.grid(axis="y", visible=False)
        base = "its baseline" if several else str(summary["baseline"].iloc[0])
        width = text_width(fig)
        fig.supxlabel(textwrap.fill(f"Δ {stat_label(metric)}, arm − {base} of the same seed", width),
                      fontsize="medium")
        title = title or (f"Each arm − {base}, paired by seed (left of 0: lower)\n"
                          "dots: seeds; black tick and bar: the mean difference and its 95% t-interval")
        lines = (textwrap.fill(line, width) for line in title.splitlines())
        fig.suptitle("\n".join(lines), fontsize="medium")
    return fig


def _row(ax, y: int, row, diff: np.ndarray, colours: Mapping[str, tuple] | None) -> None:
    look = style_for(row.arm, colours)
    ax.scatter(diff, y + seed_offsets(len(diff)), s=22, color=look.colour, marker=look.marker, alpha=0.75,
               linewidths=0, zorder=5)  # above the mean: no seed is hidden
    if math.isfinite(row.ci_low) and math.isfinite(row.ci_high):
        ax.plot([row.ci_low, row.ci_high], [y, y], color="black", linewidth=2.2, solid_capstyle="butt",
                zorder=3)
    ax.scatter([row.delta], [y], s=260, color="black", marker="|", linewidths=2.5, zorder=4)


def _label(row, diff: np.ndarray, several: bool) -> str:
    name = f"{row.arm} − {row.baseline}" if several else str(row.arm)
    interval = (f" [{row.ci_low:+.4f}, {row.ci_high:+.4f}]"
                if math.isfinite(row.ci_low) and math.isfinite(row.ci_high) else "")
    if len(diff) < 2:
        pairs = "one seed pair" if len(diff) else "no seed pair among the runs"
        return f"{name}\nΔ {row.delta:+.4f}\n{pairs}: no interval, no test"
    test = f"p {row.p:.2g}" if math.isfinite(row.p) else "p n/a"
    if math.isfinite(row.p_holm):
        test += f", Holm {row.p_holm:.2g}"
    below = int((diff < 0).sum())
    return f"{name}\nΔ {row.delta:+.4f}{interval}\n{test}; {below} of {len(diff)} seeds below 0"
