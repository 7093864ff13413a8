"""`tlm plot DIFF`: one figure of a `tlm diff` folder — the layer correspondence (linear CKA of the residual
stream, every layer of A against every layer of B, B's best match marked), the residual drift against depth,
and KL / ΔNLL by the target token's frequency. Draws the tidy tables only (no file reading, no torch)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.plotting.folder_checks import MAX_BUCKETS, MAX_PLOTTED_LAYERS
from tlm_probe.plotting.style import DEFAULT_DPI, DEFAULT_SIZE, figure_style, new_figure

_CMAP = "viridis"
MAX_TICKS = (9, 16)  # layer ticks of the CKA panel, across and down
LEGEND_ROOM = 0.25  # of a panel's height, kept free of data at the top for its legend


def cka_grid(cka: pd.DataFrame, statistic: str = "cka_resid") -> np.ndarray:
    """The (L_A, L_B) matrix of one CKA statistic from cka.csv's tidy rows."""
    rows = cka[cka["statistic"] == statistic]
    i, j = rows["layer_i"].to_numpy(int), rows["layer_j"].to_numpy(int)
    if not len(rows) or min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= MAX_PLOTTED_LAYERS:
        raise UserError(f"no {statistic} grid to draw: its layers must be 0..{MAX_PLOTTED_LAYERS - 1} (found "
                        f"{len(rows)} rows)")  # bounded before the grid is allocated
    grid = np.full((int(i.max()) + 1, int(j.max()) + 1), np.nan)
    grid[i, j] = rows["value"].to_numpy(float)
    return grid


def _cka_panel(ax, grid: np.ndarray, names: tuple[str, str]) -> None:
    image = ax.imshow(grid, cmap=_CMAP, vmin=0.0, vmax=1.0, origin="upper", interpolation="nearest",
                      aspect="auto")
    best = np.nanargmax(np.where(np.isfinite(grid), grid, -1.0), axis=1)
    ax.scatter(best, np.arange(len(best)), marker="o", s=18, facecolors="none", edgecolors="white",
               label="best match in B")
    ax.grid(False)
    # a tick per layer ran together past ~10 layers on this narrow panel
    ax.set_xticks(range(0, grid.shape[1], math.ceil(grid.shape[1] / MAX_TICKS[0])))
    ax.set_yticks(range(0, grid.shape[0], math.ceil(grid.shape[0] / MAX_TICKS[1])))
    ax.set_xlabel("layer of B (circles: best match)")  # a legend here covered cells and marks
    ax.set_ylabel("layer of A")
    ax.set_title("linear CKA (residual stream)")
    ax.figure.colorbar(image, ax=ax, label="CKA")


def _legend_room(ax, values: list[np.ndarray], share: float = LEGEND_ROOM) -> None:
    """Raise the y axis' top so that the top `share` of the panel holds no data: the legend goes there and
    covers no point or bar."""
    finite = np.concatenate([np.asarray(v, float)[np.isfinite(np.asarray(v, float))] for v in values] or [[]])
    if not finite.size:
        return
    low, high = min(float(finite.min()), 0.0) if ax.patches else float(finite.min()), float(finite.max())
    span = (high - low) or abs(high) or 1.0
    bottom = low - 0.05 * span
    ax.set_ylim(bottom, bottom + (high + 0.05 * span - bottom) / (1 - share))


def _drift_panel(ax, layers: pd.DataFrame, pairing: str) -> None:
    drift = layers[layers["statistic"] == "drift_resid"].dropna(subset=["value"])
    best = layers[layers["statistic"] == "cka_best"].dropna(subset=["value"])
    if not drift.empty:
        ax.plot(drift["depth"], drift["value"], marker="o", label=f"drift (paired by {pairing})")
    ax.plot(best["depth"], best["value"], marker="s", linestyle="--", label="best CKA in B")
    ax.set_xlabel("depth of A's layer")
    ax.set_ylabel("drift ‖h_A − h_B‖ / ‖h_B‖, best CKA")
    ax.set_title("per layer of A" if not drift.empty else "per layer of A (no drift: widths differ)")
    _legend_room(ax, [drift["value"], best["value"]])
    ax.legend(loc="upper center", fontsize="x-small")


def _count(n: int) -> str:
    """'394', '2,447', '15.3k': four buckets' counts side by side under narrow bars ran together."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,}"


def _tokens_panel(ax, tokens: pd.DataFrame) -> None:
    rows = tokens[tokens["bucket_kind"] == "target_count"]
    if len(rows) > MAX_BUCKETS:
        raise UserError(f"{len(rows):,} frequency buckets to draw, more than the {MAX_BUCKETS} tlm diff "
                        "writes")
    x = np.arange(len(rows))
    ax.bar(x - 0.2, rows["kl_mean"], width=0.4, label="KL(A ‖ B)")
    ax.bar(x + 0.2, rows["dnll_mean"], width=0.4, label="ΔNLL (NLL_A − NLL_B)")
    ax.axhline(0.0, color="0.3", linewidth=0.8)
    ax.set_xticks(x, [f"{b}\n{_count(n)}" for b, n in zip(rows["bucket"], rows["n"], strict=True)],
                  fontsize="x-small")
    _legend_room(ax, [rows["kl_mean"], rows["dnll_mean"]])
    ax.set_xlabel("target's count\n(predictions)")  # one line ran past the figure's right edge
    ax.set_ylabel("nats per prediction")
    ax.set_title("by target frequency")
    ax.legend(loc="upper center", fontsize="x-small")


def plot_diff(cka: pd.DataFrame, layers: pd.DataFrame, tokens: pd.DataFrame, *, names: tuple[str, str],
              pairing: str, n_tokens: int, size: Sequence[int] = DEFAULT_SIZE, dpi: int = DEFAULT_DPI,
              title: str | None = None) -> Figure:
    """The three panels of a diff from its tidy tables (cka.csv, layers.csv, tokens.csv)."""
    with figure_style():
        fig = new_figure(size, dpi)
        axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.25, 1, 1]})
        _cka_panel(axes[0], cka_grid(cka), names)
        _drift_panel(axes[1], layers, pairing)
        _tokens_panel(axes[2], tokens)
        fig.suptitle(title or f"tlm diff: A = {names[0]}, B = {names[1]} ({n_tokens:,} tokens)",
                     fontsize="medium")
    return fig
