"""Width utilisation, linear probes and Spearman agreement against hand-made cases and pandas."""

import numpy as np
import pandas as pd
import pytest
import torch

from tlm_probe.importance.agreement import spearman_ci, spearman_rows
from tlm_probe.importance.linear_probes import (
    majority_baseline,
    next_token_labels,
    probe_accuracy,
    top_k_filter,
)
from tlm_probe.importance.utilisation import NeuronActivity, stable_rank


def test_dead_neuron_fraction_on_constructed_activations():
    post = torch.randn(1000, 8, generator=torch.Generator().manual_seed(0)).abs() + 0.5
    post[:, 2] = 0.0  # never active
    post[:, 5] = 0.0
    post[:3, 5] = 5.0  # active on 0.3% of tokens: rarely active at a 1% threshold, not at 0.1%
    act = NeuronActivity(8, act_threshold=0.1)
    act.update(post[:400])
    act.update(post[400:])
    freq = act.frequency()
    assert freq[2] == 0 and freq[5] == pytest.approx(0.003) and freq[0] == 1
    assert act.dead_fraction(0.01) == pytest.approx(2 / 8)
    assert act.dead_fraction(0.001) == pytest.approx(1 / 8)


def test_stable_rank_closed_form():
    q1, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64))
    s = torch.tensor([3.0, 2.0, 1.0, 0.0], dtype=torch.float64)
    w = q1[:, :4] @ torch.diag(s) @ q2.T
    assert stable_rank(w) == pytest.approx((9 + 4 + 1) / 9)
    assert stable_rank(w.T) == pytest.approx((9 + 4 + 1) / 9)  # Conv1D stores the transpose


def test_next_token_labels_and_top_k():
    ids = torch.tensor([[5, 6, 7, 0]])
    mask = torch.tensor([[1, 1, 1, 0]]).bool()
    assert next_token_labels(ids, mask).tolist() == [[6, 7, -1, -1]]
    counts = np.bincount([1, 1, 1, 2, 2, 3], minlength=5)
    assert top_k_filter(np.array([1, 2, 3, -1, 4]), counts, 2).tolist() == [1, 2, -1, -1, -1]


def test_probe_separates_informative_from_noise_layer():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    informative = np.eye(3)[y] @ rng.normal(size=(3, 10)) * 3 + rng.normal(size=(600, 10)) * 0.1
    noise = rng.normal(size=(600, 10))
    good, bad = probe_accuracy(informative, y), probe_accuracy(noise, y)
    assert good["value"] > 0.95 and good["n_tokens"] == 150
    assert bad["value"] < 0.5 and bad["ci_low"] < majority_baseline(y) + 0.1
    assert np.isnan(probe_accuracy(noise[:5], y[:5])["value"])


def test_spearman_rows_match_pandas_and_ci_brackets():
    rng = np.random.default_rng(1)
    target = rng.normal(size=12)
    per_layer = {
        "ablation_dnll_mlp_zero": target,
        "taylor_mlp": target * 2 + rng.normal(size=12) * 0.5,
        "align_mlp_mid": -target,
        "fisher_mlp": np.ones(12),  # constant: no rank correlation
    }
    rows = {r["statistic"]: r for r in spearman_rows(per_layer, "ablation_dnll_mlp_zero")}
    assert set(rows) == {"spearman_taylor_mlp", "spearman_align_mlp_mid", "spearman_fisher_mlp"}
    ref = pd.Series(per_layer["taylor_mlp"]).corr(pd.Series(target), method="spearman")
    r = rows["spearman_taylor_mlp"]
    assert r["value"] == pytest.approx(ref) and r["ci_low"] < ref < r["ci_high"] and r["n_tokens"] == 12
    assert rows["spearman_align_mlp_mid"]["value"] == pytest.approx(-1.0)
    assert np.isnan(rows["spearman_fisher_mlp"]["value"])
    assert all(np.isnan(spearman_ci(0.5, 3)))
