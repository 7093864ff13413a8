"""tlm compare: equal budgets, tidy tables checked against independent formulas, crash-and-continue."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tlm_probe.data.stream import TokenData
from tlm_probe.errors import UserError
from tlm_probe.tokenizer import ByteTokenizer
from tlm_probe.train.arms import check_budget, run_name
from tlm_probe.train.compare import compare_arms
from tlm_probe.train.config import TrainConfig

BASE = TrainConfig(d_model=32, n_layers=4, n_heads=2, d_ff=64, multiple_of=16, seq_len=16, batch_size=2,
                   steps=3, eval_interval=3, eval_tokens=64, warmup=1, progress=False, data="synthetic",
                   threads=1)  # one thread: tiny models gain nothing from more, and the machine is shared
ARMS = ["uniform", "cosine:1.5:0.5", "wider-early"]  # 3 arms x 2 seeds


def _data() -> TokenData:
    ids = np.random.default_rng(1).integers(97, 110, size=3000).astype(np.uint32)
    return TokenData(ids[:2500], ids[2500:], ByteTokenizer(), "synthetic", 256)


def test_tables_and_paired_test(tmp_path):
    out = tmp_path / "cmp"
    doc = compare_arms(BASE, ARMS, [0, 1], out, data=_data())
    res = pd.read_csv(out / "results.csv")
    assert len(res) == 6 and res["params"].nunique() == 1 and res["flops_per_token"].nunique() == 1
    assert {p.name for p in (out / "runs").iterdir()} == {run_name(a, s) for a in ARMS for s in (0, 1)}
    # each row is what its run folder says
    for row in res.itertuples():
        run = json.loads((out / "runs" / run_name(row.arm, row.seed) / "run.json").read_text())
        assert row.val_loss == pytest.approx(run["val_loss"]) and row.val_ppl == pytest.approx(
            math.exp(row.val_loss)
        )
    summary = pd.read_csv(out / "summary.csv").set_index("arm")
    for arm in ARMS:
        losses = res.loc[res["arm"] == arm, "val_loss"].to_numpy()
        assert summary.loc[arm, "val_loss_mean"] == pytest.approx(losses.mean())
        assert summary.loc[arm, "val_loss_std"] == pytest.approx(losses.std(ddof=1))
    paired = pd.read_csv(out / "paired.csv").set_index("arm")
    assert set(paired.index) == {"cosine:1.5:0.5", "wider-early"} and (paired["baseline"] == "uniform").all()
    for arm in paired.index:  # closed form of the paired t statistic
        d = (
            res[res["arm"] == arm].sort_values("seed")["val_loss"].to_numpy()
            - res[res["arm"] == "uniform"].sort_values("seed")["val_loss"].to_numpy()
        )
        t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
        assert paired.loc[arm, "val_loss_t"] == pytest.approx(t)
        assert paired.loc[arm, "val_loss_diff_mean"] == pytest.approx(d.mean())
        assert 0.0 <= paired.loc[arm, "val_loss_p"] <= 1.0
        # 95% t-interval of the mean difference and d_z, in closed form (t quantile with n-1 dof)
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        assert paired.loc[arm, "val_loss_diff_ci_low"] == pytest.approx(d.mean() - half)
        assert paired.loc[arm, "val_loss_diff_ci_high"] == pytest.approx(d.mean() + half)
        assert paired.loc[arm, "val_loss_dz"] == pytest.approx(d.mean() / d.std(ddof=1))
    assert doc["baseline"] == "uniform" and len(doc["results"]) == 6 and "provenance" in doc


def test_rerun_continues_where_it_stopped(tmp_path):
    out, data = tmp_path / "cmp", _data()
    compare_arms(BASE, ARMS[:2], [0], out, data=data)
    first = pd.read_csv(out / "results.csv")
    kept = out / "runs" / run_name("uniform", 0) / "model.safetensors"
    stamp = kept.stat().st_mtime_ns
    # simulate a crash: the last run lost its summary and the tables lost its row
    lost = out / "runs" / run_name("cosine:1.5:0.5", 0)
    (lost / "run.json").unlink()
    first.iloc[:-1].to_csv(out / "results.csv", index=False)
    compare_arms(BASE, ARMS[:2], [0], out, data=data)
    again = pd.read_csv(out / "results.csv")
    assert kept.stat().st_mtime_ns == stamp  # finished runs are not retrained
    assert (lost / "run.json").is_file()
    pd.testing.assert_frame_equal(first.drop(columns="tokens_per_s"), again.drop(columns="tokens_per_s"))
    with pytest.raises(UserError, match="different comparison"):
        compare_arms(BASE.replace(lr=1e-2), ARMS[:2], [0], out, data=data)
    # more seeds of the same arms: the finished seed is kept, the new one trains
    compare_arms(BASE, ARMS[:2], [0, 1], out, data=data)
    grown = pd.read_csv(out / "results.csv")
    assert kept.stat().st_mtime_ns == stamp and sorted(set(grown.seed)) == [0, 1] and len(grown) == 4


def test_unequal_budget_is_refused(monkeypatch):
    # every real schedule keeps the budget, so fake an accounting in which the taper costs more
    import tlm_probe.train.arms as arms

    real = arms.train_flops_per_token
    monkeypatch.setattr(
        arms, "train_flops_per_token", lambda cfg, T: real(cfg, T) + (cfg.d_ff[0] != cfg.d_ff[-1])
    )
    with pytest.raises(UserError, match="not a fair comparison"):
        check_budget(BASE, ["uniform", "cosine:1.5:0.5"], 256)


def test_folder_from_an_older_version_continues(tmp_path):
    """A comparison written before manifests and before newer training options existed (its settings lack
    them) is the same comparison: it continues without retraining and is adopted into a manifest."""
    from tlm_probe.files.fileio import MANIFEST

    out, data = tmp_path / "cmp", _data()
    compare_arms(BASE, ARMS[:2], [0], out, data=data)
    (out / MANIFEST).unlink()
    settings = json.loads((out / "compare_settings.json").read_text())
    del settings["base"]["min_lr_ratio"]  # as if written by a version without this option
    (out / "compare_settings.json").write_text(json.dumps(settings))
    before = (out / "results.csv").read_text()

    def must_not_train(*a, **k):
        raise AssertionError("a finished run was trained again")

    compare_arms(BASE, ARMS[:2], [0], out, data=data, train_fn=must_not_train)
    assert (out / "results.csv").read_text() == before and (out / MANIFEST).is_file()
    with pytest.raises(UserError, match="different comparison"):
        compare_arms(BASE.replace(min_lr_ratio=0.5), ARMS[:2], [0], out, data=data, train_fn=must_not_train)
