"""probe(stats=...) with the importance set: rows, matrices, agreement, provenance, files on disk."""

import numpy as np
import pandas as pd
import pytest
from models_zoo import build_model

from tlm_probe.api.library import probe
from tlm_probe.errors import UserError
from tlm_probe.probe.engine import ProbeOptions, run_probe
from tlm_probe.results import AGREEMENT_COLUMNS, read_agreement, read_results, write_probe, write_results

KW = dict(seq_len=24, max_tokens=192, batch_size=4, importance={"sample_size": 64, "grad_sequences": 4})


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return build_model("gpt2", tmp_path_factory.mktemp("gpt2"))


def test_stats_all_has_alignment_importance_and_agreement(gpt2, tmp_path):
    res = probe(gpt2, "builtin:pydoc", stats="all", full=True, **KW)
    df = res.table
    stats = set(df.statistic)
    assert {"align_mlp_mid", "ablation_dnll_mlp_zero", "taylor_mlp", "logit_lens_kl", "probe_acc"} <= stats
    agree = res.agreement.set_index("statistic")
    assert {"spearman_align_mlp_mid", "spearman_taylor_mlp", "spearman_logit_lens_kl"} <= set(agree.index)
    assert list(res.agreement.columns) == AGREEMENT_COLUMNS and (agree.n_layers == 3).all()
    assert (agree.target == "ablation_dnll_mlp_zero").all()
    assert agree.loc["spearman_taylor_mlp", "proxy"] == "taylor_mlp"
    # the per-layer table is per layer only: groupby("layer") needs no filter
    assert (df.layer >= 0).all() and df.depth.notna().all()
    assert not df.statistic.str.startswith("spearman_").any()
    # independent path: pandas rank correlation over the table itself
    wide = df.pivot(index="layer", columns="statistic", values="value")
    ref = wide["align_mlp_mid"].corr(wide["ablation_dnll_mlp_zero"], method="spearman")
    assert agree.loc["spearman_align_mlp_mid", "value"] == pytest.approx(ref)
    prov = df.attrs["provenance"]["importance"]
    assert prov["agreement_target"] == "ablation_dnll_mlp_zero" and prov["sample_tokens"] == 64
    mats = res.matrices
    assert {"angular_distance", "cka_linear", "drop_block_best_last"} <= set(mats.statistic)


def test_result_files_round_trip(gpt2, tmp_path):
    opts = ProbeOptions(stats="importance", **KW)
    res = run_probe(gpt2, opts)
    out = write_probe(tmp_path / "res", res)
    back, back_m, back_p = read_results(out)
    assert len(back) == len(res.table) and len(back_m) == len(res.matrices)
    assert back_p["importance"]["options"]["sample_size"] == 64
    pd.testing.assert_frame_equal(read_agreement(out), res.agreement, check_dtype=False)
    assert (out / "agreement.csv").is_file() and (out / "agreement.parquet").is_file()


def test_a_folder_from_before_agreement_csv_reads_the_same(gpt2, tmp_path):
    """Layer -1 rows in results.csv (the old layout) are read as the agreement table, and left out of the
    per-layer one."""
    res = run_probe(gpt2, ProbeOptions(stats="align_mlp_mid,ablation_dnll_mlp_zero,spearman_align_mlp_mid",
                                       **KW))
    old = res.agreement.assign(layer=-1, n_tokens=res.agreement["n_layers"])
    out = write_results(tmp_path / "old", pd.concat([res.table, old[["model", "layer", "statistic", "value",
                        "ci_low", "ci_high", "n_tokens"]]], ignore_index=True), None, res.provenance)
    back, _, _ = read_results(out)
    assert (back.layer >= 0).all() and len(back) == len(res.table)
    pd.testing.assert_frame_equal(read_agreement(out), res.agreement, check_dtype=False)


def test_single_statistics_and_options(gpt2):
    df = probe(gpt2, "builtin:pydoc", stats="fisher_mlp,ablation_dnll_block_skip", **KW)
    assert set(df.statistic) == {"fisher_mlp", "ablation_dnll_block_skip"}
    assert df.attrs["provenance"]["importance"]["ablations"] == ["block_skip"]
    with pytest.raises(UserError, match="bogus"):
        probe(gpt2, "builtin:pydoc", stats="importance", **{**KW, "importance": {"bogus": 1}})


def test_encoder_agreement_uses_hidden_shift(tmp_path):
    folder = build_model("bert", tmp_path / "bert")
    res = probe(folder, "builtin:pydoc", stats="all", full=True, **KW)
    df = res.table
    assert not df.statistic.str.startswith(("ablation_dnll", "logit_lens", "taylor")).any()
    assert df.attrs["provenance"]["importance"]["agreement_target"] == "ablation_shift_mlp_zero"
    rho = res.agreement[res.agreement.statistic == "spearman_align_mlp_mid"].value
    assert len(rho) == 1 and (np.isnan(rho).all() or (rho.abs() <= 1).all())
    assert isinstance(df.attrs["provenance"]["importance"]["skipped"], dict)
    assert pd.api.types.is_integer_dtype(df.d_ff)


def test_option_pairs_are_typed_and_validated():
    from tlm_probe.importance.options import ImportanceOptions, parse_pairs

    got = parse_pairs(
        ["sample-size=100", "freq_threshold=0.001", "exclude_bos=yes", "ablations=mlp_zero,block_skip"]
    )
    assert got == dict(
        sample_size=100, freq_threshold=0.001, exclude_bos=True, ablations=("mlp_zero", "block_skip")
    )
    for bad, match in [(["nope=1"], "nope"), (["sample_size=x"], "sample_size"), (["seed"], "seed")]:
        with pytest.raises(UserError, match=match):
            parse_pairs(bad)
    for kw, match in [
        ({"freq_threshold": 2.0}, "freq_threshold"),
        ({"ablations": ("mlp_halve",)}, "mlp_halve"),
    ]:
        with pytest.raises(UserError, match=match):
            ImportanceOptions(**kw)
