"""Intervals that respect a statistic's range, and no interval where too few layers make one meaningless
(issue 47): a non-negative statistic's CI (or a band over seeds) never reaches below 0, and a Spearman
agreement over 3 or 4 layers has no CI (it printed [+1.000, +1.000]) and says why."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from tlm_probe.commands import probe as probe_cmd
from tlm_probe.importance.agreement import spearman_ci, spearman_rows
from tlm_probe.plotting import plot_depth
from tlm_probe.probe.rows import result_table

Z95 = 1.959963984540054  # the normal 0.975 quantile


@pytest.mark.parametrize("rho, n", [(1.0, 4), (-1.0, 3), (0.8, 4), (1.0, 12), (-1.0, 30)])
def test_no_spearman_interval_over_too_few_layers_or_at_plus_minus_one(rho, n):
    assert all(math.isnan(v) for v in spearman_ci(rho, n))


@pytest.mark.parametrize("rho, n", [(0.8, 5), (-0.3, 12)])
def test_a_spearman_interval_is_fisher_z_with_bonett_wright_variance(rho, n):
    se = math.sqrt((1 + rho * rho / 2) / (n - 3))
    lo, hi = spearman_ci(rho, n)
    assert lo == pytest.approx(math.tanh(math.atanh(rho) - Z95 * se), rel=1e-12)
    assert hi == pytest.approx(math.tanh(math.atanh(rho) + Z95 * se), rel=1e-12)


def test_a_perfect_ranking_over_four_layers_prints_no_interval_and_says_why(monkeypatch):
    target = np.array([0.1, 0.4, 0.2, 0.9])
    per_layer = {"ablation_dnll_mlp_zero": target, "taylor_mlp": target * 3}
    (row,) = spearman_rows(per_layer, "ablation_dnll_mlp_zero")
    assert row["value"] == 1.0 and math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])
    agreement = pd.DataFrame([dict(model="m", statistic=row["statistic"], proxy="taylor_mlp",
                                   target="ablation_dnll_mlp_zero", value=row["value"], ci_low=row["ci_low"],
                                   ci_high=row["ci_high"], n_layers=row["n_tokens"])])
    monkeypatch.setattr(probe_cmd.console, "width", 200)
    with probe_cmd.console.capture() as cap:
        probe_cmd._print_agreement(agreement)
    text = cap.get()
    line = next(l for l in text.splitlines() if "spearman_taylor_mlp" in l)
    assert "none: 4 layers" in line and "+1.000, +1.000" not in text
    assert "no CI over fewer than 5 layers" in text


def test_probe_rows_cut_their_intervals_to_the_statistics_range():
    pm = SimpleNamespace(name="m", n_layers=2, d_ff=(8, 8))
    given = {  # statistic: (value, ci_low, ci_high) -> the interval expected
        "block_influence": ((0.001, -0.002, 0.004), (0.0, 0.004)),
        "align_mlp_mid": ((0.99, 0.97, 1.01), (0.97, 1.0)),
        "dead_neuron_frac": ((0.0, -0.01, 0.01), (0.0, 0.01)),
        "norm_ratio_mlp": ((0.01, -0.03, 0.05), (0.0, 0.05)),
        "ablation_dnll_mlp_zero": ((-0.01, -0.03, 0.01), (-0.03, 0.01)),  # an NLL change may be negative
        "logit_lens_kl": ((0.5, math.nan, math.nan), (math.nan, math.nan)),
    }
    rows = [dict(layer=0, statistic=s, value=v, ci_low=lo, ci_high=hi, n_tokens=10, std=0.1)
            for s, ((v, lo, hi), _) in given.items()]
    table = result_table(pm, rows).set_index("statistic")
    for stat, (_, expected) in given.items():
        np.testing.assert_array_equal(table.loc[stat, ["ci_low", "ci_high"]].to_numpy(float), expected)


def test_a_band_over_seeds_stays_at_or_above_zero_for_a_non_negative_statistic():
    rows = [dict(model=f"uniform-s{k}", layer=l, depth=l / 3, statistic="block_influence",
                 value=v, ci_low=v, ci_high=v, n_tokens=100, d_ff=64, std=0.0)
            for k, values in enumerate([(0.9, 0.001, 0.0, 0.002), (0.5, 0.05, 0.04, 0.0)])
            for l, v in enumerate(values)]
    fig = plot_depth(pd.DataFrame(rows), "block_influence")
    (band,) = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert band.get_paths()[0].vertices[:, 1].min() == 0.0  # mean - std reached -0.02 at layer 2
