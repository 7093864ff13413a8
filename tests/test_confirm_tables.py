"""The confirmatory study's tables (issue 31) recomputed independently: from the committed per-run files
(runs.csv, STATUS.md), and the pre-registered analysis on a synthetic complete study against scipy's paired
t-test, a hand Holm step-down, the two-way ANOVA formula of the pooled model, a seed-demeaned regression
for the centroid slope and a Monte Carlo power."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analyses import confirm_stats as cs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analyses" / "results" / "confirm"
WIDTHS = {"uniform": [256] * 9, "cosine:1.5:0.5": [384, 384, 352, 320, 256, 192, 160, 128, 128],
          "hourglass": [416, 320, 256, 224, 192, 128, 128, 224, 416],
          "probe-derived.json": [512, 256, 64, 96, 96, 192, 224, 352, 512]}


def test_committed_runs_table_is_the_per_run_files():
    runs = sorted((RESULTS / "runs").glob("*/test.csv"))
    table = pd.read_csv(RESULTS / "runs.csv", dtype={"lr": str})
    assert sorted(table["name"]) == sorted(p.parent.name for p in runs)
    for path in runs:
        test = pd.read_csv(path)
        nll = test[test["metric"] == "token_nll"]["value"].iloc[0]
        widths = np.array(json.loads((path.parent / "config.json").read_text())["d_ff"], dtype=float)
        row = table[table["name"] == path.parent.name].iloc[0]
        assert row["test_nll"] == pytest.approx(nll, rel=1e-5)
        assert row["centroid"] == pytest.approx(np.average(np.linspace(0, 1, len(widths)), weights=widths))
        assert int(test[test["metric"] == "token_nll"]["n"].iloc[0]) >= 65_536  # >= 64k test tokens
    status = (RESULTS / "STATUS.md").read_text()
    main = table[~table["source"] & (table["lr"].astype(str) == cs.MAIN_LR)]
    assert f"main runs finished: {len(main)} of 36" in status
    if len(main) < 36:  # no interim analysis (pre-registration)
        assert not (RESULTS / "contrasts.csv").exists()


def _fake_study(root: Path, effects: dict, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    seed_effect = rng.normal(0, 0.05, 9)
    rows = []
    jobs = [(a, s, "3e-3") for s in range(9) for a in WIDTHS] + [
        (a, s, "1.5e-3") for s in (0, 1) for a in ("uniform", "cosine:1.5:0.5")]
    for arm, s, lr in jobs:
        name = f"{'' if lr == '3e-3' else 'lr' + lr + '-'}{cs_slug(arm)}-s{s}"
        nll = 3.0 + effects[arm] + seed_effect[s] + rng.normal(0, 0.02) + (0.01 if lr != "3e-3" else 0)
        folder = root / "runs" / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"d_ff": WIDTHS[arm], "n_layers": 9}))
        (folder / "run.json").write_text(json.dumps({"val_loss": nll + 0.5}))
        (folder / "metrics.jsonl").write_text(
            json.dumps({"kind": "eval", "step": 3700, "tokens": 7577600, "val_loss": nll + 0.5}) + "\n")
        pd.DataFrame([{"task": "ppl", "metric": "token_nll", "value": nll, "n": 262144}]).to_csv(
            folder / "test.csv", index=False)
        rows.append({"arm": arm, "seed": s, "lr": lr, "nll": nll})
    return pd.DataFrame(rows)


def cs_slug(arm: str) -> str:
    from analyses.confirm import slug

    return slug(arm)


def _holm(p):
    order, out, prev = np.argsort(p), np.empty(len(p)), 0.0
    for k, i in enumerate(order):
        prev = max(prev, min(1.0, p[i] * (len(p) - k)))
        out[i] = prev
    return out


def test_preregistered_analysis_on_a_synthetic_complete_study(tmp_path):
    effects = {"uniform": 0.0, "cosine:1.5:0.5": -0.05, "hourglass": 0.0, "probe-derived.json": 0.03}
    truth = _fake_study(tmp_path, effects)
    summary = cs.write_all(tmp_path)
    contrasts = pd.read_csv(tmp_path / "contrasts.csv").set_index("arm")
    main = truth[truth["lr"] == "3e-3"].pivot(index="seed", columns="arm", values="nll")
    ps = []
    for arm in cs.PRIMARY:
        d = main[arm] - main["uniform"]
        t, p = stats.ttest_rel(main[arm], main["uniform"])
        ps.append(p)
        row = contrasts.loc[arm]
        assert row["diff_mean"] == pytest.approx(d.mean(), abs=1e-6)
        assert row["p"] == pytest.approx(p, rel=1e-4)
        lo, hi = stats.t.interval(0.95, 8, loc=d.mean(), scale=stats.sem(d))
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((lo, hi), abs=1e-6)
        assert row["wins"] == int((d < -cs.TAU).sum()) and row["losses"] == int((d > cs.TAU).sum())
    holm = contrasts.loc[list(cs.PRIMARY), "p_holm"].to_numpy()
    assert holm == pytest.approx(_holm(np.array(ps)), rel=1e-4)
    # pooled model, balanced two-way layout: coefficient = mean difference; SE from the interaction residual
    pooled = pd.read_csv(tmp_path / "pooled.csv").set_index("arm")
    y = main[["uniform", *cs.PRIMARY]].to_numpy()
    resid = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    sigma2 = (resid**2).sum() / ((y.shape[0] - 1) * (y.shape[1] - 1))
    for j, arm in enumerate(cs.PRIMARY, start=1):
        assert pooled.loc[arm, "coef"] == pytest.approx(y[:, j].mean() - y[:, 0].mean(), abs=1e-6)
        assert pooled.loc[arm, "se"] == pytest.approx(np.sqrt(2 * sigma2 / y.shape[0]), rel=1e-6)
    # centroid slope: regression of seed-demeaned nll on seed-demeaned centroid
    long = truth[truth["lr"] == "3e-3"].assign(
        c=lambda t: t["arm"].map(lambda a: np.average(np.linspace(0, 1, 9), weights=WIDTHS[a])))
    dy = long["nll"] - long.groupby("seed")["nll"].transform("mean")
    dc = long["c"] - long.groupby("seed")["c"].transform("mean")
    assert summary["centroid_slope"]["slope"] == pytest.approx((dy * dc).sum() / (dc**2).sum(), rel=1e-6)
    # power: the detectable d_z is the one a Monte Carlo of paired t-tests rejects 80% of the time
    dz = summary["power"]["detectable_d_z"]
    sims = np.random.default_rng(1).normal(dz, 1.0, (20000, 9))
    t = sims.mean(1) / (sims.std(1, ddof=1) / 3)
    assert (np.abs(t) > stats.t.ppf(1 - 0.05 / 6, 8)).mean() == pytest.approx(0.80, abs=0.015)
    trajectories = pd.read_csv(tmp_path / "trajectories.csv")
    assert len(trajectories) == len(truth) and set(trajectories["step"]) == {3700}
    lr = pd.read_csv(tmp_path / "lr_check.csv")
    assert len(lr) == 4 and lr["lr"].nunique() == 2  # two learning rates x seeds 0 and 1

