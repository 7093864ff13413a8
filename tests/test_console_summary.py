"""Console summaries (issue 22): a paired difference is printed with its 95% CI and p (and the adjusted p
where compare wrote one), one seed pair says it is not evidence; the probe's per-model Spearman rows
(agreement.csv) get their own table instead of vanishing from (or posing as layer -1 in) the per-layer one."""

from __future__ import annotations

import math

import pandas as pd

from tlm_probe.commands import compare as compare_cmd
from tlm_probe.commands import probe as probe_cmd
from tlm_probe.report.summary import paired_sentence

PAIRED = {"arm": "cosine:1.5:0.5", "baseline": "uniform", "n_pairs": 3, "val_loss_diff_mean": -0.0264,
          "val_loss_diff_ci_low": -0.0411, "val_loss_diff_ci_high": -0.0117, "val_loss_p": 0.0162}


def test_paired_sentence_carries_ci_and_p():
    assert paired_sentence(PAIRED) == ("cosine:1.5:0.5 - uniform: Δ val loss -0.0264 "
                                       "(95% CI [-0.0411, -0.0117], p = 0.016, 3 seed pairs)")
    holm = paired_sentence({**PAIRED, "val_loss_p_holm": 0.0486})
    assert holm.endswith("p = 0.016, adjusted 0.049, 3 seed pairs)")


def test_one_seed_pair_is_not_evidence():
    one = {**PAIRED, "n_pairs": 1, "val_loss_diff_ci_low": math.nan, "val_loss_diff_ci_high": math.nan,
           "val_loss_p": math.nan}
    assert paired_sentence(one) == ("cosine:1.5:0.5 - uniform: Δ val loss -0.0264 "
                                    "(1 seed pair: no CI or p, not evidence of a difference)")


def _result(paired: dict) -> dict:
    summary = [{"arm": a, "n_seeds": paired["n_pairs"], "params": 1000, "val_loss_mean": 2.0,
                "val_loss_std": 0.01, "val_ppl_mean": 7.4, "val_ppl_std": 0.1, "val_bpb_mean": 2.9,
                "val_bpb_std": 0.01} for a in ("uniform", paired["arm"])]
    return {"baseline": "uniform", "summary": summary, "paired": [paired],
            "budget": {"uniform": {"params": 1000, "flops_per_token": 6000}}}


def test_compare_table_has_the_ci_and_warns_for_one_seed(monkeypatch):
    monkeypatch.setattr(compare_cmd.console, "width", 200)
    with compare_cmd.console.capture() as cap:
        compare_cmd.print_summary(_result(PAIRED))
    text = cap.get()
    assert "95% CI" in text and "[-0.0411, -0.0117]" in text and "not evidence" not in text
    one = {**PAIRED, "n_pairs": 1, "val_loss_diff_ci_low": math.nan, "val_loss_diff_ci_high": math.nan,
           "val_loss_p": math.nan}
    with compare_cmd.console.capture() as cap:
        compare_cmd.print_summary(_result(one))
    assert "warning: one seed pair has no CI and no p: it is not evidence" in cap.get()


def test_probe_summary_shows_per_model_rows_in_their_own_table(monkeypatch):
    rows = [dict(model="m", layer=l, depth=l / 2, statistic="block_influence", value=0.1 * l, ci_low=0.0,
                 ci_high=0.3, n_tokens=64, d_ff=32) for l in range(3)]
    agreement = pd.DataFrame([dict(model="m", statistic="spearman_taylor_mlp", proxy="taylor_mlp",
                                   target="ablation_dnll_mlp_zero", value=0.5, ci_low=-0.25, ci_high=0.875,
                                   n_layers=3)])
    table = pd.DataFrame(rows)
    table["d_ff"] = table["d_ff"].astype("Int64")
    prov = {"model": "m", "architecture": {"family": "tlm", "block_kind": "pre_ln"}, "data": {"n_tokens": 64},
            "backend": "native"}
    monkeypatch.setattr(probe_cmd.console, "width", 200)
    with probe_cmd.console.capture() as cap:
        probe_cmd._print_summary(table, prov, "OUT", agreement)
    text = cap.get()
    assert "Spearman agreement across layers with ablation_dnll_mlp_zero (agreement.csv)" in text
    line = next(l for l in text.splitlines() if "spearman_taylor_mlp" in l)
    assert "+0.5000" in line and "[-0.250, +0.875]" in line
    assert "spearman" not in text.split("Spearman agreement")[0]  # not a row of the per-layer table
    assert "agreement.csv, agreement.parquet" in text.splitlines()[-1]
