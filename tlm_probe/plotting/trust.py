"""`tlm plot TRUST`: one figure of a `tlm trust` folder — every statistic (a row) against the four rank
agreements it is judged by (columns): Kendall's W across the corpora, the lowest pairwise Spearman between
two corpora, the Spearman with the ablation target and with the task target. Each cell is coloured by its
value (−1 … 1) and printed; a cell below its threshold (`--min-w`, `--min-spearman`) is hatched and its
number marked ✗, so a flag reads in greyscale too. Draws trust.csv's table only (no file reading).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.plotting.folder_checks import MAX_STATISTICS
from tlm_probe.plotting.style import DEFAULT_DPI, DEFAULT_SIZE, figure_style, new_figure

_CMAP = "RdBu"
COLUMNS = (  # trust.csv column, its label, the threshold that flags it
    ("kendall_w", "W across\ncorpora", "min_w"),
    ("min_pairwise_spearman", "lowest ρ\nbetween corpora", "min_spearman"),
    ("spearman_with_target", "ρ with the\nablation target", "min_spearman"),
    ("spearman_with_task", "ρ with the\ntask target", "min_spearman"),
)


def trust_grid(table: pd.DataFrame) -> tuple[list[str], list[str], np.ndarray]:
    """(statistics, the column labels present, their values: statistics × columns; NaN where none)."""
    present = [(c, label) for c, label, _ in COLUMNS if c in table.columns]
    values = table[[c for c, _ in present]].to_numpy(dtype=float)
    return list(table["statistic"].astype(str)), [label for _, label in present], values


def flagged_cells(table: pd.DataFrame, thresholds: dict) -> np.ndarray:
    """True where a cell is below its threshold (the rule trust/agreement.py flags by)."""
    cols = [(c, thresholds[t]) for c, _, t in COLUMNS if c in table.columns]
    values = table[[c for c, _ in cols]].to_numpy(dtype=float)
    return np.isfinite(values) & (values < np.array([t for _, t in cols], dtype=float))


def plot_trust(table: pd.DataFrame, *, thresholds: dict, model: str, corpora: Sequence[str],
               size: Sequence[int] = DEFAULT_SIZE, dpi: int = DEFAULT_DPI,
               title: str | None = None) -> Figure:
    """thresholds: {"min_w": ..., "min_spearman": ...} as trust.json records them."""
    if len(table) > MAX_STATISTICS:
        raise UserError(f"{len(table):,} statistics to draw, more than the {MAX_STATISTICS} a trust figure "
                        "holds")
    stats, labels, values = trust_grid(table)
    flags = flagged_cells(table, thresholds)
    with figure_style():
        fig = new_figure(size, dpi)
        ax = fig.subplots()
        image = ax.imshow(values, cmap=_CMAP, vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
        for i, j in np.ndindex(values.shape):
            _cell(ax, i, j, values[i, j], bool(flags[i, j]))
        ax.grid(False)
        ax.set_xticks(range(len(labels)), labels, fontsize="small")
        ax.set_yticks(range(len(stats)), stats, fontsize="small")
        ax.xaxis.tick_top()
        fig.colorbar(image, ax=ax, label="rank agreement (W, Spearman ρ)")
        fig.suptitle(title or f"tlm trust: {model}, {len(corpora)} corpora ({', '.join(corpora)})\n"
                     f"✗: below W {thresholds['min_w']:g} or ρ {thresholds['min_spearman']:g} (flagged)",
                     fontsize="medium")
    return fig


def _cell(ax, i: int, j: int, value: float, flagged: bool) -> None:
    if not np.isfinite(value):
        # no value: the target against itself
        ax.text(j, i, "—", ha="center", va="center", fontsize="small", color="0.4")
        return
    if flagged:
        ax.add_patch(_hatch(j, i))
    colour = "white" if abs(value) > 0.6 else "black"
    value = value if round(value, 2) != 0 else 0.0  # no "-0.00"
    ax.text(j, i, f"{'✗ ' if flagged else ''}{value:+.2f}", ha="center", va="center", fontsize="small",
            color=colour, fontweight="bold" if flagged else "normal")


def _hatch(x: float, y: float):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1.0, 1.0, fill=False, hatch="///", edgecolor="0.25", linewidth=0.0)
