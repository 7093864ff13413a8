"""Several statistics in one `tlm plot` call (issue 47): small multiples, one panel per statistic, each line
the table's own numbers, one legend for all, nothing cut at the edge or drawn over other text."""

from __future__ import annotations

import numpy as np
import pytest
from figure_text import cut, overlaps
from plotting_tables import MODELS, STATS, png_size, result_table
from typer.testing import CliRunner

from cli import app
from tlm_probe.plotting import plot_depth_panels

ALL4 = (*STATS, "resid_norm_growth")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_one_panel_per_statistic_with_the_tables_numbers(n):
    df = result_table(stats=ALL4)
    fig = plot_depth_panels(df, ALL4[:n])
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == list(ALL4[:n])
    for ax, stat in zip(panels, ALL4, strict=False):
        labels = [line.get_label() for line in ax.lines]
        assert labels == list(MODELS)
        for line, model in zip(ax.lines, MODELS, strict=True):
            rows = df[(df.model == model) & (df.statistic == stat)].sort_values("layer")
            np.testing.assert_allclose(line.get_ydata(), rows.value)
            np.testing.assert_allclose(line.get_xdata(), rows.layer / (len(rows) - 1))
    assert len(fig.legends) == 1 and [t.get_text() for t in fig.legends[0].get_texts()] == list(MODELS)
    assert cut(fig) == [] and overlaps(fig) == []


def test_four_panels_are_two_by_two():
    fig = plot_depth_panels(result_table(stats=ALL4), ALL4)
    grid = {ax.get_subplotspec().get_geometry()[:2] for ax in fig.axes}
    assert grid == {(2, 2)}


def test_tlm_plot_draws_several_statistics_in_one_call(real_probe_dirs, tmp_path):
    out = tmp_path / "several.png"
    dirs = [str(p) for p in real_probe_dirs.values()]
    res = CliRunner().invoke(app, ["plot", *dirs, "-s", "align_mlp_mid", "-s", "block_influence",
                                   "-s", "mlp_influence", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert png_size(out) == (1200, 800)
