"""Per-layer MLP widths of several schedules against the uniform line, with the parameter budget noted."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.plotting.checks import SCHEDULE_COLUMNS, require_columns
from tlm_probe.plotting.colours import arm_style
from tlm_probe.plotting.style import (
    DEFAULT_DPI,
    DEFAULT_SIZE,
    figure_style,
    legend_label,
    new_figure,
)


def plot_schedules(
    widths: pd.DataFrame,
    d_ff: int,
    *,
    size: Sequence[int] = DEFAULT_SIZE,
    dpi: int = DEFAULT_DPI,
    title: str | None = None,
) -> Figure:
    """Widths (table `schedule, layer, width`) per layer, one line per schedule in the look the schedule's
    arm has in every figure (plotting.colours), uniform d_ff as a grey reference line.

    The title states the budget L·d_ff and whether every schedule meets it exactly (the sums are part of
    the table, so the figure only reports them).
    """
    widths = require_columns(widths, SCHEDULE_COLUMNS, "schedule")
    if widths.empty:
        raise UserError("the schedule table is empty: name at least one schedule")
    names = list(dict.fromkeys(widths["schedule"].astype(str)))
    n_layers = int(widths["layer"].max()) + 1
    with figure_style():
        fig = new_figure(size, dpi)
        ax = fig.add_subplot()
        ax.axhline(d_ff, color="0.6", linestyle=(0, (1, 3)), linewidth=1.2, label=f"uniform d_ff = {d_ff:,}")
        for name in names:
            one = widths[widths["schedule"].astype(str) == name].sort_values("layer")
            ax.plot(one["layer"], one["width"], label=legend_label(name), linewidth=1.6, markersize=5,
                    **arm_style(name).line())
        ax.set_xlabel("layer index l")
        ax.set_ylabel("MLP width d_l (hidden units)")
        ax.set_ylim(bottom=0)
        ax.set_xticks(range(n_layers) if n_layers <= 32 else ax.get_xticks())
        ax.set_title(title or _budget_title(widths, names, n_layers, d_ff))
        ax.legend(title="schedule", fontsize="small", title_fontsize="small", loc="best")
    return fig


def _budget_title(widths: pd.DataFrame, names: list[str], n_layers: int, d_ff: int) -> str:
    budget = n_layers * d_ff
    sums = widths.groupby(widths["schedule"].astype(str))["width"].sum()
    exact = all(int(sums[n]) == budget for n in names)
    verdict = "every schedule sums to it exactly" if exact else "NOT every schedule meets it"
    return f"MLP width per layer, L = {n_layers}\nbudget Σ d_l = L·d_ff = {budget:,} hidden units; {verdict}"
