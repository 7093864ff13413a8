"""Figures that compare any models (issue 22): one colour per arm whatever the input order, seeds of an arm
grouped (thin lines + mean + band of seeds, or a bar of the mean with a dot per seed), models of different
depth in their own rows of importance panels, duplicate model names told apart by their folder.

The checks read the drawn artists' data (positions, heights, colours, labels), never pixels; the expected
numbers are computed here from the table with numpy, not through the plotting helpers."""

from __future__ import annotations

from pathlib import Path

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
from plotting_tables import png_size

from tlm_probe.plotting import plot_curves, plot_depth, plot_importance, save_figure
from tlm_probe.plotting.inputs import merge_probes
from tlm_probe.results import ProbeResult

STAT = "block_influence"


def _table(models: dict[str, int], stats=(STAT,), seed: int = 0) -> pd.DataFrame:
    """Contract rows for models {name: layers}; values random, CI ±0.05 around them."""
    rng = np.random.default_rng(seed)
    rows = []
    for model, n in models.items():
        for l in range(n):
            for s in stats:
                v = float(rng.uniform(0.1, 0.9))
                rows.append(dict(model=model, layer=l, depth=l / (n - 1), statistic=s, value=v,
                                 ci_low=v - 0.05, ci_high=v + 0.05, n_tokens=1000, d_ff=64))
    return pd.DataFrame(rows)


def _rgb(artist_colour) -> tuple:
    return tuple(np.round(mcolors.to_rgb(artist_colour), 6))


def _line_colours(fig) -> dict[str, tuple]:
    return {line.get_label().strip(): _rgb(line.get_color()) for line in fig.axes[0].lines
            if not line.get_label().startswith("_")}


def test_colours_follow_the_arm_not_the_input_order():
    models = {"uniform": 4, "cosine": 4, "linear": 4}
    df = _table(models)
    reordered = pd.concat([df[df.model == m] for m in ("linear", "cosine", "uniform")])
    first, second = _line_colours(plot_depth(df, STAT)), _line_colours(plot_depth(reordered, STAT))
    assert first == second and len(set(first.values())) == 3
    # the curves of a comparison of the same arms use the same colours
    curves = pd.DataFrame([dict(arm=a, metric="val_loss", tokens=t, mean=1.0, std=0.0, n_seeds=1)
                           for a in ("cosine", "linear", "uniform") for t in (10, 20)])
    ax = plot_curves(curves, metrics=["val_loss"]).axes[0]
    assert {line.get_label(): _rgb(line.get_color()) for line in ax.lines} == first


def test_seeds_of_an_arm_are_one_colour_with_a_mean_line_and_a_band():
    names = ["uniform-s0", "cosine:1.5:0.5-s0", "uniform-s1", "cosine:1.5:0.5-s1", "uniform-s2"]
    df = _table(dict.fromkeys(names, 5))
    ax = plot_depth(df, STAT).axes[0]
    labelled = [line for line in ax.lines if not line.get_label().startswith("_")]
    assert [line.get_label() for line in labelled] == ["uniform (mean of 3 seeds)",
                                                       "cosine:1.5:0.5 (mean of 2 seeds)"]
    seeds = {line.get_gid(): line for line in ax.lines if str(line.get_gid()).startswith("seed:")}
    assert sorted(seeds) == sorted(f"seed:{n}" for n in names)
    for arm, mean_line in zip(("uniform", "cosine:1.5:0.5"), labelled, strict=True):
        members = [n for n in names if n.startswith(arm)]
        assert {_rgb(seeds[f"seed:{m}"].get_color()) for m in members} == {_rgb(mean_line.get_color())}
        assert all(seeds[f"seed:{m}"].get_linewidth() < mean_line.get_linewidth() for m in members)
        values = np.array([df[(df.model == m)].sort_values("layer").value.to_numpy() for m in members])
        np.testing.assert_allclose(mean_line.get_ydata(), values.mean(axis=0), rtol=1e-12)
    assert _rgb(labelled[0].get_color()) != _rgb(labelled[1].get_color())
    # uniform's band is its mean ± the sample std over its 3 seeds, cut at 0: block_influence is >= 0
    values = np.array([df[df.model == f"uniform-s{k}"].sort_values("layer").value for k in range(3)])
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    mean, std = values.mean(axis=0), values.std(axis=0, ddof=1)
    assert band.min() == pytest.approx(max((mean - std).min(), 0.0))
    assert band.max() == pytest.approx((mean + std).max())
    assert "± 1 std over seeds" in ax.get_legend().get_title().get_text()


def test_importance_of_models_of_different_depth():
    df = _table({"smollm": 30, "tiny-s0": 4, "tiny-s1": 4}, stats=(STAT, "mlp_influence"))
    fig = plot_importance(df, [STAT, "mlp_influence"], size=(1200, 800), dpi=50)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [f"{s} · {n} layers" for n in (30, 4)
                                                  for s in (STAT, "mlp_influence")]
    deep, shallow = panels[0], panels[2]
    # the 30-layer model alone in its panel: full-width bars on the integer ticks, nothing shifted
    centres = np.array([p.get_x() + p.get_width() / 2 for p in deep.patches])
    np.testing.assert_allclose(centres, np.arange(30), atol=1e-12)
    assert {round(p.get_width(), 12) for p in deep.patches} == {0.8}
    assert deep.get_xlim() == pytest.approx((-0.5, 29.5))
    # the two seeds of 'tiny': one bar per layer of their mean, a dot per seed on it
    seeds = np.array([df[(df.model == m) & (df.statistic == STAT)].sort_values("layer").value
                      for m in ("tiny-s0", "tiny-s1")])
    np.testing.assert_allclose([p.get_height() for p in shallow.patches], seeds.mean(axis=0), rtol=1e-12)
    dots = [c for c in shallow.collections if str(c.get_gid()).startswith("seed:")]
    assert len(dots) == 2
    np.testing.assert_allclose(np.sort(np.concatenate([d.get_offsets()[:, 1] for d in dots])),
                               np.sort(seeds.ravel()))
    # one legend entry per drawn entry, each a visible patch of its bars' colour
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["smollm", "tiny (mean of 2 seeds)"]
    for handle, panel in zip(legend.legend_handles, (deep, shallow), strict=True):
        assert _rgb(handle.get_facecolor()) == _rgb(panel.patches[0].get_facecolor())
        assert handle.get_facecolor()[3] > 0
    assert "tiny, 2 seeds" in fig.get_suptitle()


def test_duplicate_model_names_are_told_apart_by_folder(tmp_path):
    df = _table({"uniform-s0": 4})
    a, b = tmp_path / "runA" / "probe" / "uniform-s0", tmp_path / "runB" / "probe" / "uniform-s0"
    merged, _ = merge_probes([ProbeResult(df, None, {}, a), ProbeResult(df, None, {}, b),
                              ProbeResult(_table({"other": 4}), None, {}, tmp_path / "x")])
    assert list(dict.fromkeys(merged.model)) == ["uniform-s0 (runA/probe/uniform-s0)",
                                                 "uniform-s0 (runB/probe/uniform-s0)", "other"]
    same = merge_probes([ProbeResult(df, None, {}, a), ProbeResult(df, None, {}, a)])[0]
    assert list(dict.fromkeys(same.model)) == ["uniform-s0 [1]", "uniform-s0 [2]"]


def test_smoke_render_of_a_mixed_seeded_importance_figure(tmp_path: Path):
    df = _table({"smollm": 30, "tiny-s0": 4, "tiny-s1": 4, "_hidden": 6})
    out = save_figure(plot_importance(df, [STAT], size=(900, 700), dpi=100), tmp_path / "imp.png")
    assert png_size(out) == (900, 700)
    out = save_figure(plot_depth(df, STAT, size=(900, 700), dpi=100), tmp_path / "depth.png")
    assert png_size(out) == (900, 700)
