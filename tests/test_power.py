"""The paired t-test's power (stats.power), checked by simulation: at the d_z it calls detectable, paired
t-tests on simulated pairs reject 80% of the time; and `tlm compare`'s paired table carries that
difference at its observed spread."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tlm_probe.stats.power import detectable_difference, detectable_dz, paired_t_power, pairs_needed
from tlm_probe.train.compare_tables import paired_table


def _rejection_rate(d_z: float, n: int, alpha: float, sims: int = 40_000, seed: int = 0) -> float:
    """Share of simulated paired t-tests (differences ~ N(d_z, 1)) rejecting at two-sided `alpha`."""
    diffs = np.random.default_rng(seed).normal(d_z, 1.0, (sims, n))
    t = diffs.mean(1) / (diffs.std(1, ddof=1) / math.sqrt(n))
    return float((np.abs(t) > stats.t.ppf(1 - alpha / 2, n - 1)).mean())


@pytest.mark.parametrize(("n", "alpha"), [(3, 0.05), (5, 0.05), (9, 0.05), (26, 0.025)])
def test_the_detectable_effect_is_rejected_80_percent_of_the_time(n, alpha):
    d_z = detectable_dz(n, alpha)
    # 40,000 simulations: the standard error of a rate near 0.8 is 0.002
    assert _rejection_rate(d_z, n, alpha) == pytest.approx(0.80, abs=0.01)
    assert paired_t_power(d_z, n, alpha) == pytest.approx(0.80, abs=1e-8)


def test_power_at_no_effect_is_the_level_and_grows_with_pairs():
    assert paired_t_power(0.0, 7, 0.05) == pytest.approx(0.05, abs=1e-9)
    powers = [paired_t_power(0.5, n) for n in (3, 5, 10, 20, 40)]
    assert powers == sorted(powers) and powers[-1] > 0.85
    assert math.isnan(paired_t_power(0.5, 1)) and math.isnan(detectable_dz(1))


def test_study_2s_registered_size_is_80_percent_for_study_1s_effect():
    # the pre-registration: 26 pairs give 80.1% power for d_z 0.6375 at alpha 0.025 (Holm's first step)
    assert paired_t_power(0.6375, 26, 0.025) == pytest.approx(0.801, abs=5e-4)
    assert paired_t_power(0.6375, 25, 0.025) < 0.8


def test_the_paired_table_carries_the_detectable_difference():
    losses = {"uniform": [3.70, 3.64, 3.81, 3.75], "cosine": [3.71, 3.61, 3.85, 3.70], "one": [3.9]}
    rows = [{"arm": arm, "mixer": "attention", "schedule": arm, "seed": seed, "val_loss": v, "val_ppl": v,
             "val_bpb": v} for arm, values in losses.items() for seed, v in enumerate(values)]
    table = paired_table(pd.DataFrame(rows), "uniform").set_index("arm")
    d = np.subtract(losses["cosine"], losses["uniform"])
    expected = detectable_dz(4) * d.std(ddof=1)
    assert table.loc["cosine", "val_loss_detectable"] == pytest.approx(expected, rel=1e-12)
    assert _rejection_rate(expected / d.std(ddof=1), 4, 0.05) == pytest.approx(0.80, abs=0.01)
    assert math.isnan(table.loc["one", "val_loss_detectable"])  # one pair: nothing to scale by
    assert math.isnan(detectable_difference(0.0, 5)) and math.isnan(detectable_difference(0.02, 1))


def test_the_report_and_the_demo_line_show_it_and_a_negative_one_is_refused(tmp_path):
    from tlm_probe.errors import UserError
    from tlm_probe.report.summary import paired_rows, paired_sentence
    from tlm_probe.result_checks import check_compare_table

    row = {"arm": "cosine", "baseline": "uniform", "n_pairs": 4, "val_loss_diff_mean": -0.01,
           "val_loss_diff_ci_low": -0.03, "val_loss_diff_ci_high": 0.01, "val_loss_p": 0.2,
           "val_loss_p_holm": 0.2, "val_loss_detectable": 0.0321}
    (shown,) = paired_rows("cmp", pd.DataFrame([row]))
    assert shown["detectable |Δ| (80% power)"] == 0.0321
    assert paired_sentence(row).endswith("4 seed pairs; 80% power for |Δ| ≥ 0.0321)")
    check_compare_table("paired", pd.DataFrame([row]), tmp_path / "paired.csv")
    with pytest.raises(UserError, match="val_loss_detectable"):
        check_compare_table("paired", pd.DataFrame([row | {"val_loss_detectable": -0.5}]), tmp_path / "p.csv")


def test_pairs_needed_is_the_fewest_with_enough_power():
    # study 2's pre-registration: 26 pairs for study 1's -0.0266 nats at paired SD 0.0417, alpha 0.025
    assert pairs_needed(-0.0266, 0.0417, alpha=0.025) == 26
    for difference, sd in ((0.05, 0.04), (0.02, 0.04), (0.003, 0.05)):
        n = pairs_needed(difference, sd)
        assert paired_t_power(difference / sd, n) >= 0.8 > paired_t_power(difference / sd, n - 1)
    assert pairs_needed(1.0, 0.01) == 2  # a huge effect: the fewest pairs a t-test can take
    page = (Path(__file__).resolve().parents[1] / "docs" / "how-to" / "compare.md").read_text()
    assert "pairs_needed(0.02, sd=0.04)` gives" in page
    assert f"({pairs_needed(0.02, 0.04)}; study 2's 26" in page  # the page's number, recomputed
    with pytest.raises(ValueError):
        pairs_needed(0.0, 0.04)
