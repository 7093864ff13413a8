"""Layer importance: one bar panel per proxy, side by side, so rankings from different proxies compare.

Each proxy keeps its own y axis and units (a KL in nats and a cosine distance share no scale); bars of
several models sit next to each other within a layer, and models of different depth sit in different rows
of panels (one layer axis per depth).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from tlm_probe.errors import UserError
from tlm_probe.plotting.arms import (
    colour_for,
    entries,
    entry_label,
    n_layers,
    seed_summary,
    titled_entries,
)
from tlm_probe.plotting.checks import (
    DRAWN_COLUMNS,
    models_in_order,
    per_layer,
    require_columns,
    select_statistic,
)
from tlm_probe.plotting.colours import ink_on
from tlm_probe.plotting.panel_fit import PanelFit
from tlm_probe.plotting.style import (
    DEFAULT_DPI,
    DEFAULT_SIZE,
    figure_style,
    legend_label,
    new_figure,
    split_suffix,
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
    colours: Mapping[str, tuple] | None = None,
) -> Figure:
    """Bars of each statistic in `statistics` per layer; one panel per statistic, one colour per arm
    (plotting.colours: the same in every figure; `colours`, arm -> colour, overrides it).

    Models of different depth get one row of panels per depth (a 30-layer and a 4-layer model on one
    layer axis would squeeze one of them to slivers); within a panel the bars are laid out by the entries
    present in it, centred on their layer's tick. Two or more seeds of one arm are one bar of their mean
    with a dot per seed; a lone model's bar carries its [ci_low, ci_high] error bar."""
    results = require_columns(results, DRAWN_COLUMNS, "result")
    if not statistics:
        raise UserError("name at least one importance statistic to draw")
    frames = [per_layer(select_statistic(results, s), s) for s in statistics]
    everything = pd.concat(frames)
    models = models_in_order(everything)
    depths = _depth_groups(everything, models)
    with figure_style():
        fit = PanelFit(size, dpi, statistics, len(depths))  # columns, font, wrapped labels, thinned ticks
        fig = new_figure(fit.size, dpi)  # `size`, or taller where the rows' text needs it
        per_depth = math.ceil(len(frames) / fit.cols)
        axes = fig.subplots(per_depth * len(depths), fit.cols, squeeze=False)
        handles: dict[str, Patch] = {}
        for g, (layers, members) in enumerate(depths.items()):
            row_axes = axes[g * per_depth:(g + 1) * per_depth].ravel()
            label = f" · {layers} layers" if len(depths) > 1 else ""
            for ax, stat, rows in zip(row_axes, statistics, frames, strict=False):
                one = rows[rows["model"].astype(str).isin(members)]
                handles.update(_panel(ax, one, f"{stat}{label}", stat, colours, fit))
            for ax in row_axes[len(frames):]:
                ax.set_visible(False)
        for ax in axes[-1]:  # one x label row, at the bottom: per panel it took each row's height again
            ax.set_xlabel("layer index l", fontsize=fit.font)
        groups = entries(models)
        # legend in the order the inputs came, whichever depth row drew an entry first
        rank = {legend_label(entry_label(e, m)): k for k, (e, m) in enumerate(groups.items())}
        order = sorted(handles, key=lambda h: rank.get(h, len(rank)))
        fig.legend([handles[h] for h in order], order, title="model", loc="outside lower center",
                   ncols=min(len(handles), 4), fontsize="small", title_fontsize="small")
        labels, tokens = titled_entries(results, groups)
        what = f"layer importance by proxy{split_suffix(results)}"
        fig.suptitle(title or title_with_provenance(what, labels, tokens),
                     fontsize="medium")
    return fig


def _depth_groups(rows: pd.DataFrame, models: list[str]) -> dict[int, list[str]]:
    """number of layers -> the models with that many, deepest first."""
    layers = n_layers(rows)
    groups: dict[int, list[str]] = {}
    for m in models:
        groups.setdefault(layers[m], []).append(m)
    return dict(sorted(groups.items(), reverse=True))


def _panel(ax, rows: pd.DataFrame, title: str, statistic: str, colours: Mapping | None,
           fit: PanelFit) -> dict[str, Patch]:
    """The bars of the entries present in `rows`; returns label -> legend patch of each one drawn."""
    groups = entries(models_in_order(rows))
    width = BAR_SPAN / max(len(groups), 1)
    handles = {}
    for k, (entry, members) in enumerate(groups.items()):
        one = seed_summary(rows, members, "layer")
        colour = colour_for(members[0], colours)
        offset = (k - (len(groups) - 1) / 2) * width
        xs = one["layer"].to_numpy(float) + offset
        values = one["value"].to_numpy(float)
        # error bars stay visible on a black bar (uniform's) and on the white above it
        ax.bar(xs, values, width=width, color=colour, yerr=_errors(one, values), ecolor=ink_on(colour),
               error_kw={"elinewidth": 0.8, "capsize": 1.5}, gid=f"bars:{entry}")
        if len(members) > 1:
            _seed_dots(ax, rows, members, offset)
        label = legend_label(entry_label(entry, members))
        handles[label] = Patch(facecolor=colour, label=label)
    n = int(rows["layer"].max()) + 1 if len(rows) else 1
    ax.set_xticks(range(0, n, max(fit.tick_step(n), math.ceil(n / 12))))
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_title(fit.title(title), fontsize=fit.font)
    ax.tick_params(labelsize=fit.tick_font)
    ax.set_ylabel(fit.label(stat_label(statistic)), fontsize=fit.font)
    ax.axhline(0, color="0.3", linewidth=0.8)
    return handles


def _seed_dots(ax, rows: pd.DataFrame, members: list[str], offset: float) -> None:
    """Each seed's value as a small dot on its arm's bar: the spread behind the mean (dark with a white
    rim: seen on a black bar and on the white above a bar)."""
    for m in members:
        one = rows[rows["model"].astype(str) == m].sort_values("layer")
        ax.scatter(one["layer"].to_numpy(float) + offset, one["value"].to_numpy(float), s=8, color="0.15",
                   zorder=3, linewidths=0.5, edgecolors="white", gid=f"seed:{m}")


def _errors(one: pd.DataFrame, values: np.ndarray) -> np.ndarray | None:
    lo, hi = one["ci_low"].to_numpy(float), one["ci_high"].to_numpy(float)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return None
    # matplotlib wants distances below and above the bar, never negative
    return np.vstack([np.clip(values - lo, 0, None), np.clip(hi - values, 0, None)])
