"""Each figure kind: the right lines/cells/bars/labels, drawn from the table's own numbers; saved files
decode as images of the requested size; the style does not leak into the caller's matplotlib."""

from __future__ import annotations

import json
import statistics

import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from plotting_tables import REAL_MODELS, matrix_table, pdf_size_pt, png_size, result_table, svg_size_pt

from tlm_probe.errors import UserError
from tlm_probe.plotting import (
    plot_curves,
    plot_depth,
    plot_heatmaps,
    plot_importance,
    plot_schedules,
    save_figure,
)
from tlm_probe.plotting.importance import default_proxies
from tlm_probe.plotting.inputs import load_comparison, load_probe, merge_probes, schedule_table
from tlm_probe.schedules.widths import make_schedule, parse_schedule

SMALL = (400, 300)


def _rows(df, model, stat):
    return df[(df.model == model) & (df.statistic == stat)].sort_values("layer")


def _real(dirs) -> pd.DataFrame:
    return merge_probes([load_probe(p) for p in dirs.values()])[0]


def test_depth_on_real_probe_results(real_probe_dirs):
    df = _real(real_probe_dirs)
    fig = plot_depth(df, "align_mlp_mid", size=SMALL, dpi=50)
    ax = fig.axes[0]
    assert [l.get_label() for l in ax.lines] == list(REAL_MODELS)
    for line, (model, (_, layers)) in zip(ax.lines, REAL_MODELS.items(), strict=True):
        rows = _rows(df, model, "align_mlp_mid")
        np.testing.assert_allclose(line.get_xdata(), np.arange(layers) / (layers - 1))  # overlays depths
        np.testing.assert_allclose(line.get_ydata(), rows.value)
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 3
    # the band of the first model spans its CI: lowest vertex = min ci_low, highest = max ci_high
    ys = bands[0].get_paths()[0].vertices[:, 1]
    rows = _rows(df, "uniform-4", "align_mlp_mid")
    assert ys.min() == pytest.approx(rows.ci_low.min()) and ys.max() == pytest.approx(rows.ci_high.max())
    uniform, tapered, _ = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert np.ptp(uniform.get_sizes()) == 0  # uniform widths: all markers alike
    widths = np.array(make_schedule(parse_schedule("cosine:1.5:0.5", 16), 4, 64).widths, float)
    np.testing.assert_allclose(tapered.get_sizes() / tapered.get_sizes()[0], widths / widths[0])
    assert f"{int(rows.n_tokens.max()):,} tokens" in ax.get_title() and "cosine-6" in ax.get_title()
    assert ax.get_xlabel().startswith("normalised depth") and "cos(MLP out, resid_mid)" in ax.get_ylabel()
    assert "MLP width" in ax.get_legend().get_title().get_text()


def test_depth_layer_axis_and_errors():
    df = result_table()
    ax = plot_depth(df, "block_influence", x="layer", size=SMALL, dpi=50).axes[0]
    np.testing.assert_allclose(ax.lines[1].get_xdata(), [0, 1, 2, 3])
    assert ax.get_xlabel() == "layer index l"
    with pytest.raises(UserError, match="'nope'.*available: align_mlp_mid, block_influence"):
        plot_depth(df, "nope")
    with pytest.raises(UserError, match="x axis"):
        plot_depth(df, "align_mlp_mid", x="tokens")
    with pytest.raises(UserError, match="lacks column"):
        plot_depth(df.drop(columns="ci_low"), "align_mlp_mid")


def test_schedules_widths_against_uniform_and_budget():
    table = schedule_table(["uniform", "cosine:1.5:0.5", "wider-early"], 24, 2816)
    ax = plot_schedules(table, 2816, size=SMALL, dpi=50).axes[0]
    labels = [l.get_label() for l in ax.lines]
    assert labels == ["uniform d_ff = 2,816", "uniform", "cosine:1.5:0.5", "wider-early"]
    assert set(ax.lines[0].get_ydata()) == {2816}
    cosine = ax.lines[2].get_ydata()
    # the docs' closed form (how-to/schedule.md): cosine 1.5 -> 0.5 of 2816 gives 4224 at the first layer,
    # 1408 at the last
    assert (cosine[0], cosine[-1]) == (4224, 1408) and sum(cosine) == 24 * 2816
    assert "67,584" in ax.get_title() and "exactly" in ax.get_title()
    assert ax.get_ylabel() == "MLP width d_l (hidden units)"


def test_heatmap_cells_match_the_matrix_table():
    mats = matrix_table()
    fig = plot_heatmaps(mats, "cka", size=(600, 300), dpi=50, tokens={"uniform-6": 512})
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2
    grid = panels[0].images[0].get_array()
    assert grid.shape == (6, 6)
    one = mats[mats.model == "uniform-6"]
    expected = one.pivot(index="layer_i", columns="layer_j", values="value").to_numpy()
    np.testing.assert_allclose(np.asarray(grid), expected)
    assert panels[1].images[0].get_array().shape == (4, 4)
    assert len(panels[0].texts) == 36  # every cell annotated at this size
    assert panels[0].get_title() == "uniform-6 (512 tokens)"
    assert any("cka" in ax.get_ylabel() for ax in fig.axes if not ax.images)  # the colour bar


def test_importance_bars_side_by_side(real_probe_dirs):
    df = _real(real_probe_dirs)
    stats = ["block_influence", "logit_lens_kl", "ablation_dnll_mlp_zero", "taylor_mlp"]
    assert default_proxies(df)[:4] == ["block_influence", "mlp_influence", "logit_lens_kl",
                                       "ablation_dnll_mlp_zero"]
    fig = plot_importance(df, stats, size=(600, 300), dpi=50)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    # models of different depth: one row of panels per depth, deepest first, each on its own layer axis
    titles = [ax.get_title().replace("\n", " · ") for ax in panels]  # a title wider than its panel: 2 lines
    assert titles == [f"{s} · {n} layers" for n in (6, 4) for s in stats]
    for ax, stat in zip(panels, stats * 2, strict=True):
        present = ["cosine-6"] if ax in panels[:4] else ["uniform-4", "cosine-4"]
        heights = [p.get_height() for p in ax.patches]
        expected = np.concatenate([_rows(df, m, stat).value for m in present])
        np.testing.assert_allclose(heights, expected)
        # the bars of the models in this panel share each layer's slot, centred on the layer's tick
        centres = np.array([p.get_x() + p.get_width() / 2 for p in ax.patches]).reshape(len(present), -1)
        np.testing.assert_allclose(centres.mean(axis=0), np.arange(centres.shape[1]), atol=1e-12)
    assert "nats" in panels[2].get_ylabel()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(REAL_MODELS)
    with pytest.raises(UserError, match="one value per model"):
        plot_importance(df, ["spearman_taylor_mlp"])


def test_heatmap_on_real_matrices(real_probe_dirs):
    matrices = merge_probes([load_probe(p) for p in real_probe_dirs.values()])[1]
    fig = plot_heatmaps(matrices, "angular_distance", size=(900, 300), dpi=50)
    panels = [ax for ax in fig.axes if ax.images]
    # L + 1 residual streams per model (embeddings ... final output)
    assert [ax.images[0].get_array().shape for ax in panels] == [(5, 5), (5, 5), (7, 7)]
    grid = np.asarray(panels[2].images[0].get_array())
    one = matrices[(matrices.model == "cosine-6") & (matrices.statistic == "angular_distance")]
    assert grid[one.layer_i.iloc[3], one.layer_j.iloc[3]] == one.value.iloc[3]
    np.testing.assert_allclose(np.diag(grid), 0.0)
    np.testing.assert_allclose(grid, grid.T)  # a distance is symmetric


def _metric(run_dir, key: str) -> dict[int, tuple[int, float]]:
    """step -> (tokens, value) straight from metrics.jsonl (independent of plotting.inputs)."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {d["step"]: (d["tokens"], d[key]) for d in lines if key in d}


def test_curves_on_a_real_comparison(real_demo_dir):
    comp = load_comparison(real_demo_dir)
    runs = real_demo_dir / "runs"
    seeds = [_metric(runs / f"uniform-s{s}", "val_loss") for s in (0, 1)]
    last = max(seeds[0])
    values = [seed[last][1] for seed in seeds]
    row = comp.curves[(comp.curves.arm == "uniform") & (comp.curves.metric == "val_loss")
                      & (comp.curves.step == last)].iloc[0]
    assert row["mean"] == pytest.approx(statistics.mean(values))
    assert row["std"] == pytest.approx(statistics.stdev(values)) and row["n_seeds"] == 2
    fig = plot_curves(comp.curves, size=(800, 400), dpi=50)
    train_ax, val_ax = fig.axes
    assert (train_ax.get_title(), val_ax.get_title()) == ("train_loss", "val_loss")
    assert [l.get_label() for l in val_ax.lines] == ["uniform", "cosine:1.5:0.5"]  # baseline first
    np.testing.assert_allclose(val_ax.lines[0].get_xdata(), [seeds[0][k][0] for k in sorted(seeds[0])])
    np.testing.assert_allclose(val_ax.lines[0].get_ydata()[-1], statistics.mean(values))
    assert len(val_ax.collections) == 2 and val_ax.get_xlabel() == "tokens seen"
    assert "2 seeds" in fig.get_suptitle()
    with pytest.raises(UserError, match="no training or validation losses"):
        plot_curves(comp.curves, metrics=["val_bpb"])


@pytest.mark.parametrize(("fmt", "size"), [("png", (640, 480)), ("png", (333, 211)), ("svg", (500, 400)),
                                           ("pdf", (800, 600))])
def test_saved_file_decodes_at_the_requested_size(tmp_path, fmt, size):
    fig = plot_depth(result_table(), "align_mlp_mid", size=size, dpi=100)
    path = save_figure(fig, tmp_path / f"fig.{fmt}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"fig.{fmt}"]  # no temporary file left behind
    if fmt == "png":
        assert png_size(path) == size
    else:  # vector formats: points, 72 per inch
        got = svg_size_pt(path) if fmt == "svg" else pdf_size_pt(path)
        assert got == pytest.approx((size[0] * 72 / 100, size[1] * 72 / 100))


def test_tables_carrying_dataframes_in_attrs_plot(real_probe_dirs):
    # a table may carry a DataFrame in attrs (a user's own); pandas compares attrs on concat, which fails
    df = _real(real_probe_dirs)
    df.attrs["matrices"] = matrix_table()
    fig = plot_importance(df, ["block_influence", "mlp_influence"], size=SMALL, dpi=50)
    assert sum(len(ax.patches) for ax in fig.axes) == 2 * 14 and "matrices" in df.attrs


def test_bad_outputs_and_style_does_not_leak(tmp_path):
    before = dict(mpl.rcParams)
    fig = plot_depth(result_table(), "align_mlp_mid", size=SMALL, dpi=50)
    assert dict(mpl.rcParams) == before
    with pytest.raises(UserError, match="must end in one of .png, .pdf, .svg"):
        save_figure(fig, tmp_path / "fig.jpg")
    with pytest.raises(UserError, match="output folder does not exist"):
        save_figure(fig, tmp_path / "missing" / "fig.png")
    with pytest.raises(UserError, match="out of range"):
        plot_depth(result_table(), "align_mlp_mid", size=(10, 10))
