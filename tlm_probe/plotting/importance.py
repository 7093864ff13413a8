"""Layer importance: one bar panel per proxy, side by side, so rankings from different proxies compare.

Each proxy keeps its own y axis and units (a KL in nats and a cosine distance share no scale); the panels
share the layer axis, and bars of several models sit next to each other within a layer.
"""

from __future__ import annotations

import math
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

BAR_SPAN = 0.8  # fraction of a layer slot taken by its group of bars
MAX_PANELS = 6
# proxies drawn by default when present (one ablation target per model kind: LM or encoder)
DEFAULT_PROXIES = (
    "block_influence",
    "mlp_influence",
    "logit_lens_kl",
    "ablation_dnll_mlp_zero",
    "ablation_shift_mlp_zero",
    "taylor_mlp",
    "fisher_mlp",
)


def default_proxies(results: pd.DataFrame) -> list[str]:
    """The DEFAULT_PROXIES that the table has per layer, at most MAX_PANELS."""
    present = set(results.loc[results["layer"] >= 0, "statistic"].astype(str))
    return [s for s in DEFAULT_PROXIES if s in present][:MAX_PANELS]


def plot_importance(
    results: pd.DataFrame,
    statistics: Sequence[str],
    *,
    size: Sequence[int] = DEFAULT_SIZE,
    dpi: int = DEFAULT_DPI,
    title: str | None = None,
) -> Figure:
    """Bars of each statistic in `statistics` per layer; one panel per statistic, one colour per model.

    Error bars show [ci_low, ci_high] where the table has them."""
    results = require_columns(results, DRAWN_COLUMNS, "result")
    if not statistics:
        raise UserError("name at least one importance statistic to draw")
    frames = [per_layer(select_statistic(results, s), s) for s in statistics]
    models = models_in_order(pd.concat(frames))
    colours = dict(zip(models, palette(len(models)), strict=True))
    cols = min(len(frames), 3)
    with figure_style():
        fig = new_figure(size, dpi)
        axes = fig.subplots(math.ceil(len(frames) / cols), cols, squeeze=False).ravel()
        for ax, stat, rows in zip(axes, statistics, frames, strict=False):
            _panel(ax, rows, stat, models, colours)
        for ax in axes[len(frames):]:
            ax.set_visible(False)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, title="model", loc="outside lower center", ncols=min(len(models), 4),
                   fontsize="small", title_fontsize="small")
        tokens = [results.loc[results["model"].astype(str) == m, "n_tokens"].max() for m in models]
        fig.suptitle(title or title_with_provenance("layer importance by proxy", models, tokens))
    return fig


def _panel(ax, rows: pd.DataFrame, statistic: str, models: list[str], colours: dict) -> None:
    width = BAR_SPAN / len(models)
    for k, model in enumerate(models):
        one = rows[rows["model"].astype(str) == model].sort_values("layer")
        if one.empty:
            continue
        xs = one["layer"].to_numpy(float) + (k - (len(models) - 1) / 2) * width
        values = one["value"].to_numpy(float)
        ax.bar(xs, values, width=width, color=colours[model], label=legend_label(model),
               yerr=_errors(one, values), error_kw={"elinewidth": 0.8, "capsize": 1.5})
    ax.set_title(statistic, fontsize="small")
    ax.set_xlabel("layer index l")
    ax.set_ylabel(stat_label(statistic), fontsize="small")
    ax.axhline(0, color="0.3", linewidth=0.8)


def _errors(one: pd.DataFrame, values: np.ndarray) -> np.ndarray | None:
    lo, hi = one["ci_low"].to_numpy(float), one["ci_high"].to_numpy(float)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return None
    # matplotlib wants distances below and above the bar, never negative
    return np.vstack([np.clip(values - lo, 0, None), np.clip(hi - values, 0, None)])
