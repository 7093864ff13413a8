"""Study 2's registered analysis (issue 44), recomputed independently on a synthetic complete study: scipy's
paired t-test, a hand Holm step-down, the two-way ANOVA formula of the pooled model, a Monte Carlo power; the
learning-rate rule; and that no test score is shown or aggregated before the last main run. Once study 2's
runs are committed, the committed tables are checked against the per-run files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from test_confirm_readme import _close, _numbers

from analyses import confirm2 as c2
from analyses import confirm2_stats as s2

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analyses" / "results" / "confirm2"
WIDTHS = {"uniform": [256] * 9, "probe-derived": [512, 256, 64, 96, 96, 192, 224, 352, 512],
          "wide-first": [512] + [224] * 8, "cosine:1.5:0.5": [384, 384, 352, 320, 256, 192, 160, 128, 128]}


def _write_run(root: Path, j: dict, nll: float, val: float) -> None:
    folder = root / "runs" / j["name"]
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"d_ff": WIDTHS[j["arm"]], "n_layers": 9}))
    (folder / "run.json").write_text(json.dumps({"seed": j["seed"], "arm": j["arm"], "lr": j["lr"],
                                                 "started": "t0", "ended": "t1", "model_sha256": "0" * 64}))
    for name, value in (("test.csv", nll), ("test_prefix.csv", nll - 0.8), ("val.csv", val)):
        pd.DataFrame([{"metric": "token_nll", "value": value}]).to_csv(folder / name, index=False)


def _fake_study(root: Path, effects: dict, jobs: list[dict], lr_effect: float = -0.01) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    seed_effect = {s: rng.normal(0, 0.05) for s in range(60)}
    rows = []
    for j in jobs:
        nll = 3.0 + effects.get(j["arm"], 0.0) + seed_effect[j["seed"]] + rng.normal(0, 0.03)
        val = 3.7 + seed_effect[j["seed"]] + (lr_effect if j["lr"] != c2.MAIN_LR else 0.0)  # no noise
        _write_run(root, j, nll, val)
        rows.append(j | {"nll": nll, "val": val})
    return pd.DataFrame(rows)


def _holm(p):
    order, out, prev = np.argsort(p), np.empty(len(p)), 0.0
    for k, i in enumerate(order):
        prev = max(prev, min(1.0, p[i] * (len(p) - k)))
        out[i] = prev
    return out


def test_registered_analysis_on_a_synthetic_complete_study(tmp_path):
    truth = _fake_study(tmp_path, {"probe-derived": -0.03, "wide-first": -0.02}, c2.jobs())
    summary = s2.write_all(tmp_path)
    main = truth[truth["lr"] == c2.MAIN_LR].pivot_table(index="seed", columns="arm", values="nll")
    contrasts = pd.read_csv(tmp_path / "contrasts.csv").set_index("arm")
    ps = []
    for arm in c2.CONTRASTS:
        d = (main[arm] - main["uniform"]).dropna()
        assert len(d) == len(c2.SEEDS) == 26
        t, p = stats.ttest_rel(main[arm], main["uniform"])
        ps.append(p)
        row = contrasts.loc[arm]
        assert row["diff_mean"] == pytest.approx(d.mean(), abs=1e-6)
        assert row["p"] == pytest.approx(p, rel=1e-4)
        lo, hi = stats.t.interval(0.95, 25, loc=d.mean(), scale=stats.sem(d))
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((lo, hi), abs=1e-6)
    assert contrasts["p_holm"].to_numpy() == pytest.approx(_holm(np.array(ps)), rel=1e-4)
    pooled = pd.read_csv(tmp_path / "pooled.csv").set_index("arm")
    y = main[["uniform", *c2.CONTRASTS]].to_numpy()
    resid = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    sigma2 = (resid**2).sum() / ((y.shape[0] - 1) * (y.shape[1] - 1))
    for j, arm in enumerate(c2.CONTRASTS, start=1):
        assert pooled.loc[arm, "coef"] == pytest.approx(y[:, j].mean() - y[:, 0].mean(), abs=1e-6)
        assert pooled.loc[arm, "se"] == pytest.approx(np.sqrt(2 * sigma2 / y.shape[0]), rel=1e-6)
    secondary = pd.read_csv(tmp_path / "secondary.csv")
    between = secondary[secondary["baseline"] == "wide-first"].iloc[0]
    expected = (main["probe-derived"] - main["wide-first"]).mean()
    assert between["diff_mean"] == pytest.approx(expected, abs=1e-6)
    prefix = secondary[secondary["outcome"] == "test_prefix_nll"]
    assert prefix["diff_mean"].to_numpy() == pytest.approx(contrasts["diff_mean"].to_numpy(), abs=1e-6)
    # power: the detectable d_z is the one a Monte Carlo of paired t-tests at alpha 0.025 rejects 80% of
    dz = summary["power"]["detectable_d_z"]
    sims = np.random.default_rng(1).normal(dz, 1.0, (20000, 26))
    t = sims.mean(1) / (sims.std(1, ddof=1) / np.sqrt(26))
    assert (np.abs(t) > stats.t.ppf(1 - 0.025 / 2, 25)).mean() == pytest.approx(0.80, abs=0.015)
    assert summary["power"]["planned_power"] == pytest.approx(0.8006, abs=5e-4)
    section = (tmp_path / "section.md").read_text()
    for arm in c2.CONTRASTS:  # the generated section carries each contrast's numbers
        assert f"{contrasts.loc[arm, 'diff_mean']:+.4f}".replace("-", "−") in section


def test_collect_draws_the_contrasts_seed_by_seed_once_complete(tmp_path):
    from types import SimpleNamespace

    from analyses import paired_figure

    truth = _fake_study(tmp_path, {"probe-derived": -0.03}, c2.jobs())
    c2.collect(SimpleNamespace(results=tmp_path))
    assert (tmp_path / "paired.png").read_bytes()[:4] == b"\x89PNG"
    diffs, summary = paired_figure.tables(tmp_path)
    main = truth[truth["lr"] == c2.MAIN_LR].pivot_table(index="seed", columns="arm", values="nll")
    for arm in c2.CONTRASTS:  # the dots: each seed's difference, by hand (runs.csv rounds to 6 digits)
        mine = diffs[diffs["arm"] == arm].set_index("seed")["diff"]
        assert mine.to_numpy() == pytest.approx((main[arm] - main["uniform"]).to_numpy(), abs=2e-5)
    assert summary["arm"].tolist() == list(c2.CONTRASTS)


def test_no_test_score_is_shown_before_the_last_main_run(tmp_path):
    partial = [j for j in c2.jobs() if not (j["seed"] == 34 and j["arm"] == "wide-first")]
    _fake_study(tmp_path, {}, partial)
    assert s2.write_all(tmp_path) == {}
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert not {"test_nll", "test_prefix_nll"} & set(runs.columns)
    assert not (tmp_path / "contrasts.csv").exists() and not (tmp_path / "analysis.json").exists()
    assert "main runs finished: 77 of 78" in (tmp_path / "STATUS.md").read_text()


@pytest.mark.parametrize(("effect", "helps"), [(-0.01, True), (0.01, False)])
def test_the_second_learning_rate_runs_only_when_the_first_helps(tmp_path, effect, helps):
    _fake_study(tmp_path, {}, c2.jobs()[:21], lr_effect=effect)  # seeds 9-11 main, cosine, 6e-3
    assert s2.lr_helps(tmp_path, "6e-3") is helps
    table = s2.lr_table(s2.load_runs(tmp_path))
    assert len(table) == 9 and table["diff"].to_numpy() == pytest.approx(np.full(9, effect), abs=1e-9)
    assert not s2.lr_helps(tmp_path, "1.2e-2")  # none run yet: the rule needs all nine pairs


def test_design_is_the_committed_preregistration():
    assert json.loads((RESULTS / "design.json").read_text()) == c2.design()
    widths = json.loads((RESULTS / "probe-derived.json").read_text())["widths"]
    assert widths == WIDTHS["probe-derived"]
    assert sum(int(w) for w in c2.WIDE_FIRST.split(",")) == 9 * 256
    study1 = ROOT / "analyses" / "results" / "confirm" / "corpus.json"
    assert (RESULTS / "corpus.json").read_text() == study1.read_text()


def test_committed_runs_table_is_the_per_run_files():
    table = pd.read_csv(RESULTS / "runs.csv", dtype={"lr": str}) if (RESULTS / "runs.csv").is_file() else None
    folders = sorted((RESULTS / "runs").glob("*/run.json"))
    if table is None:
        assert not folders  # no run has been collected yet
        return
    assert sorted(table["name"]) == sorted(p.parent.name for p in folders)
    complete = s2.is_complete(s2.load_runs(RESULTS))
    assert ("test_nll" in table.columns) is complete
    for path in folders:
        row = table[table["name"] == path.parent.name].iloc[0]
        info = json.loads(path.read_text())
        assert row["model_sha256"] == info["model_sha256"] and info["started"] < info["ended"]
        val = pd.read_csv(path.parent / "val.csv")
        assert row["val_nll"] == pytest.approx(val[val["metric"] == "token_nll"]["value"].iloc[0], rel=1e-5)


def test_outcome_coverage_table_is_whole_and_says_what_the_docs_say():
    """analyses/outcome_coverage.py's committed table: each outcome's shares sum to 1; study 1's outcome is
    33 files of 5 distributions, study 2's spreads over most of the split (the studies page quotes both)."""
    table = pd.read_csv(RESULTS / "outcome_coverage.csv")
    for name in ("study1_prefix", "study2_spread", "whole_split"):
        assert table[f"{name}_share"].sum() == pytest.approx(1.0, abs=1e-4)
    prefix = table[table["study1_prefix_tokens"] > 0]
    assert (int(prefix["study1_prefix_files"].sum()), len(prefix)) == (33, 5)
    assert int(table["study1_prefix_tokens"].sum()) == 262_144
    assert int(table["study2_spread_tokens"].sum()) == 1_048_576
    spread = table[table["study2_spread_tokens"] > 0]
    assert int(spread["study2_spread_files"].sum()) > 800 and len(spread) > 80
    page = (ROOT / "docs" / "studies" / "study2.md").read_text()
    assert "33 files of 5 packages" in page and f"{int(spread['study2_spread_files'].sum())} files" in page


def _val_nll(name: str) -> float:
    return _nll(RESULTS / "runs" / name / "val.csv")


LR_ROWS = {"uniform": "uniform", "cosine 1.5→0.5": "cosine_1.5_0.5", "probe-derived": "probe-derived"}
"""The page's row label -> the run-folder name of the arm."""


def _lr_section(lr: str) -> tuple[str, list[float]]:
    """The page's section on the check at `lr`, its table checked against the runs' val.csv files: each
    entry val(lr) - val(3e-3) of the same arm and seed, and each arm's mean; returns the nine entries."""
    page = (ROOT / "docs" / "studies" / "study2.md").read_text()
    start = page.index(f"## The learning-rate check at {lr}")
    end = page.find("\n## ", start + 1)
    section, diffs = page[start:end if end > 0 else None], []
    for label, folder in LR_ROWS.items():
        row = next(line for line in section.splitlines() if line.startswith(f"| {label} |"))
        printed = [float(c.strip().replace("−", "-")) for c in row.strip("|").split("|")[1:]]
        mine = [_val_nll(f"lr{lr}-{folder}-s{seed}") - _val_nll(f"{folder}-s{seed}") for seed in (9, 10, 11)]
        diffs += mine
        assert printed == pytest.approx([*mine, np.mean(mine)], abs=5e-4), label
    return section, diffs


def test_the_pages_learning_rate_table_is_the_runs_val_files():
    """docs/studies/study2.md's 6e-3 table (and the README's count of pairs), recomputed from each run's
    val.csv without analyses/: the difference from the same arm and seed at 3e-3, to the digits shown."""
    section, diffs = _lr_section("6e-3")
    assert all(d < 0 for d in diffs) and "All nine pairs prefer the higher rate" in section
    assert f"(mean {np.mean(diffs):.3f} nats)".replace("-", "−") in section
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "lower validation NLL at 6e-3 than at 3e-3 in all 9" in readme
    study1 = ROOT / "analyses" / "results" / "confirm" / "runs"
    val = {p.parent.name: json.loads(p.read_text())["val_loss"] for p in study1.glob("*/run.json")}
    lower = [val[f"lr1.5e-3-{arm}-s{seed}"] - val[f"{arm}-s{seed}"] for arm in ("uniform", "cosine_1.5_0.5")
             for seed in (0, 1)]
    assert len(lower) == 4 and min(lower) > 0 and "higher at 1.5e-3 in all 4 runs of study 1's" in readme


def test_the_pages_second_learning_rate_section_is_the_runs_val_files():
    """docs/studies/study2.md's 1.2e-2 section (and the README's sentence), recomputed from each run's
    val.csv without analyses/: the table against 3e-3, the comparison with 6e-3, and the arms' means."""
    page = (ROOT / "docs" / "studies" / "study2.md").read_text()
    if len(list(RESULTS.glob("runs/lr1.2e-2-*/run.json"))) < 9:
        assert "## The learning-rate check at 1.2e-2" not in page
        return
    section, diffs = _lr_section("1.2e-2")
    text = " ".join(section.split())
    pairs = [(f, s) for f in LR_ROWS.values() for s in (9, 10, 11)]
    against = [_val_nll(f"lr1.2e-2-{f}-s{s}") - _val_nll(f"lr6e-3-{f}-s{s}") for f, s in pairs]
    six = [_val_nll(f"lr6e-3-{f}-s{s}") - _val_nll(f"{f}-s{s}") for f, s in pairs]
    lower = sum(d < 0 for d in against)
    assert all(d < 0 for d in diffs) and "All nine pairs are lower at 1.2e-2 than at 3e-3" in text
    spread = f"(from {_signed(min(against), 3)} to {_signed(max(against), 3)}"
    for said in (f"(mean {_signed(np.mean(diffs), 3)} nats)", f"(mean {_signed(np.mean(six), 3)})",
                 f"{lower} of the 9 are lower and the mean difference is {_signed(np.mean(against), 3)} nats "
                 + spread):
        assert said in text, said
    means = {label: [np.mean([_val_nll(f"{p}{folder}-s{s}") for s in (9, 10, 11)])
                     for p in ("", "lr6e-3-", "lr1.2e-2-")] for label, folder in LR_ROWS.items()}
    for label, row_means in means.items():
        row = [x for x in section.splitlines() if x.startswith(f"| {label} |")][1]  # the second table
        _assert_row("|".join(row.split("|")[2:]), row_means, label)
    order = {tuple(sorted(means, key=lambda a: means[a][k])) for k in range(3)}  # "keep their order"
    assert order == {("probe-derived", "uniform", "cosine 1.5→0.5")}
    assert "probe-derived lowest, cosine 1.5→0.5 highest" in text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"at 1.2e-2 in all 9 too, but in only {lower} of 9 below 6e-3" in readme


def _nll(path: Path) -> float:
    t = pd.read_csv(path)
    return float(t.loc[t["metric"] == "token_nll", "value"].iloc[0])


def _train_losses(path: Path) -> dict[int, float]:
    recs = (json.loads(line) for line in path.read_text().splitlines())
    return {r["step"]: r["train_loss"] for r in recs if r.get("kind") == "train"}


def test_the_pages_bit_for_bit_check_is_the_committed_files():
    """docs/studies/study2.md's account of re-training study 1's uniform-s0, recomputed from the committed
    files without analyses/: where the two metrics.jsonl part, the check files' first differences, and
    the table's numbers to the digits shown."""
    study1 = ROOT / "analyses" / "results" / "confirm"
    again = study1 / "rescore" / "runs" / "uniform-s0"
    page = (ROOT / "docs" / "studies" / "study2.md").read_text()
    section = page[page.index("## Re-scoring study 1"):]
    first = study1 / "runs" / "uniform-s0"
    a, b = _train_losses(first / "metrics.jsonl"), _train_losses(again / "metrics.jsonl")
    assert a.keys() == b.keys() and len(a) == 370
    assert [s for s in a if a[s] == b[s]] == [10, 20, 30, 40, 50, 60]  # "agree ... for 60 steps", never again
    for name, step in (("check.json", 30), ("check_code-04ea20b-avx2.json", 30),
                       ("check_code-04ea20b-default.json", 20)):
        diff = json.loads((study1 / "rescore" / name).read_text())["first_difference"]
        committed, rerun = json.loads(diff["committed"]), json.loads(diff["again"])
        assert committed["step"] == rerun["step"] == step and committed["train_loss"] == rerun["train_loss"]
        assert committed["grad_norm"] != rerun["grad_norm"]
        if name == "check.json":
            assert f"{committed['grad_norm']!r} committed, {rerun['grad_norm']!r} again" in section
            assert np.spacing(np.float32(committed["grad_norm"])) == pytest.approx(
                abs(rerun["grad_norm"] - committed["grad_norm"]))  # one float32 unit
    caps = {c: json.loads((study1 / "rescore" / f"check_capability-{c}.json").read_text())
            for c in ("avx512", "avx2", "default")}  # the same run to step 40 under each kernel set
    assert caps["avx512"]["identical"] and caps["avx512"]["torch_cpu_capability"] == "AVX512"
    assert caps["avx512"]["records_compared"] == 5  # the step-0 validation record and steps 10 to 40
    for c, name in (("avx2", "check.json"), ("default", "check_code-04ea20b-default.json")):
        assert caps[c]["first_difference"] == json.loads((study1 / "rescore" / name).read_text())[
            "first_difference"]
    avx2 = json.loads(caps["avx2"]["first_difference"]["again"])["grad_norm"]
    assert f"gives the re-trained run's gradient norm at step 30, {avx2!r}" in " ".join(section.split())
    val = [json.loads((f / "run.json").read_text())["val_loss"] for f in (first, again)]
    prefix = [_nll(first / "test.csv"), _nll(again / "test_prefix.csv")]
    for label, (x, y) in (("validation loss", val), ("study 1's outcome", prefix)):
        row = next(line.strip() for line in section.splitlines() if line.strip().startswith(f"| {label}"))
        printed = [float(c.strip().replace("−", "-")) for c in row.strip("|").split("|")[1:]]
        assert printed == pytest.approx([x, y, y - x], abs=5e-5), label
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"at step 30 and ended {prefix[1] - prefix[0]:.3f} nats away on its outcome" in readme
    how_to = " ".join((ROOT / "docs" / "how-to" / "compare.md").read_text().split())
    assert f"at step 30 and ended {prefix[1] - prefix[0]:.3f} nats away on its test outcome" in how_to


TAU = 0.024  # study 1's registered win threshold, kept by study 2's pre-registration ("Wins")


def _assert_row(line: str, expected: list[float], what: str) -> None:
    """Every number `line` prints (widths in backticks left out) equals `expected` to the digit shown."""
    raw = _numbers(line)
    assert len(raw) == len(expected), (what, raw, expected)
    for r, e in zip(raw, expected, strict=True):
        assert _close(r, e), (what, r, e)


def _scores(results: Path) -> pd.DataFrame:
    """Every run's outcomes straight from its files: run.json names arm, seed and rate."""
    rows = []
    for info_path in sorted((results / "runs").glob("*/run.json")):
        info = json.loads(info_path.read_text())
        rows.append({"arm": info["arm"], "seed": int(info["seed"]), "lr": info["lr"],
                     "test": _nll(info_path.parent / "test.csv"),
                     "prefix": _nll(info_path.parent / "test_prefix.csv"),
                     "val": _nll(info_path.parent / "val.csv"),
                     "widths": json.loads((info_path.parent / "config.json").read_text())["d_ff"]})
    return pd.DataFrame(rows)


def _power(dz: float, n: int, alpha: float) -> float:
    """Two-sided paired t-test power: the noncentral t's mass beyond both critical values."""
    crit, nc = stats.t.ppf(1 - alpha / 2, n - 1), dz * np.sqrt(n)
    return float(stats.nct.sf(crit, n - 1, nc) + np.nan_to_num(stats.nct.cdf(-crit, n - 1, nc)))


def _check_main_table(lines: list[str], test: pd.DataFrame) -> None:
    """The arms' rows: mean ± SD, and each contrast's Δ [CI], d_z, p, Holm p, wins/ties/losses."""
    first = {arm: next(x for x in lines if x.startswith(f"| {arm} |")) for arm in ["uniform", *c2.CONTRASTS]}
    assert list(test.index) == list(c2.SEEDS) and not test.isna().any().any()
    _assert_row(first["uniform"], [test["uniform"].mean(), test["uniform"].std(ddof=1)], "uniform")
    p = np.array([stats.ttest_rel(test[a], test["uniform"]).pvalue for a in c2.CONTRASTS])
    for arm, p_arm, p_holm in zip(c2.CONTRASTS, p, _holm(p), strict=True):
        d = test[arm] - test["uniform"]
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        wins, losses = int((d < -TAU).sum()), int((d > TAU).sum())
        counts = [wins, len(d) - wins - losses, losses]
        _assert_row(first[arm], [test[arm].mean(), test[arm].std(ddof=1), d.mean(), lo, hi,
                                 d.mean() / d.std(ddof=1), p_arm, p_holm, *counts], arm)


def _check_power(lines: list[str], test: pd.DataFrame) -> None:
    from scipy.optimize import brentq

    n, alpha = len(test), 0.05 / len(c2.CONTRASTS)
    sd = float(np.median([(test[a] - test["uniform"]).std(ddof=1) for a in c2.CONTRASTS]))
    dz = brentq(lambda z: _power(z, n, alpha) - 0.8, 0.05, 2.0)
    study1 = 100 * _power(0.026616 / sd, n, alpha)  # study 1's probe-derived - uniform (its contrasts.csv)
    sentence = next(x for x in lines if x.startswith("Power:"))
    _assert_row(sentence, [n, alpha, dz, 80, dz * sd, sd, 1, -0.0266, study1], "power")


def _check_secondary(lines: list[str], main: pd.DataFrame, test: pd.DataFrame) -> None:
    prefix = main.pivot(index="seed", columns="arm", values="prefix")
    rows = [(a, "uniform", prefix, f"| {a} − uniform, first 262,144 test tokens") for a in c2.CONTRASTS]
    for arm, base, table, label in [*rows, ("probe-derived", "wide-first", test,
                                            "| probe-derived − wide-first, primary outcome")]:
        d = table[arm] - table[base]
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        line = next(x for x in lines if x.startswith(label))
        p = stats.ttest_rel(table[arm], table[base]).pvalue
        _assert_row("|".join(line.split("|")[2:]), [d.mean(), lo, hi, p], label)


def _check_pooled(lines: list[str], test: pd.DataFrame) -> None:
    """nll ~ arm + seed over the three arms, as the balanced two-way ANOVA without interaction."""
    y = test[["uniform", *c2.CONTRASTS]].to_numpy()
    resid = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    dof = (y.shape[0] - 1) * (y.shape[1] - 1)
    se = np.sqrt((resid**2).sum() / dof * 2 / y.shape[0])
    for j, arm in enumerate(c2.CONTRASTS, start=1):
        coef = y[:, j].mean() - y[:, 0].mean()
        half = stats.t.ppf(0.975, dof) * se
        line = next(x for x in lines if x.startswith(f"| {arm} − uniform, pooled model"))
        _assert_row("|".join(line.split("|")[2:]),
                    [coef, coef - half, coef + half, 2 * stats.t.sf(abs(coef / se), dof)], line)


def _main_runs(results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The main runs' files, and their primary outcome as a seed x arm table."""
    runs = _scores(results)
    main = runs[(runs["lr"] == c2.MAIN_LR) & runs["arm"].isin(["uniform", *c2.CONTRASTS])]
    return main, main.pivot(index="seed", columns="arm", values="test")


def _check_result_section(section: str, results: Path) -> None:
    """Every number of study 2's result section, recomputed from the per-run files (not analyses/)."""
    main, test = _main_runs(results)
    lines = section.splitlines()
    _check_main_table(lines, test)
    _check_power(lines, test)
    _check_secondary(lines, main, test)
    _check_pooled(lines, test)


def test_the_result_check_recomputes_a_synthetic_section_and_catches_a_wrong_digit(tmp_path):
    _fake_study(tmp_path, {"probe-derived": -0.03, "wide-first": -0.01}, c2.jobs())
    s2.write_all(tmp_path)
    section = (tmp_path / "section.md").read_text()
    _check_result_section(section, tmp_path)
    line = next(x for x in section.splitlines() if x.startswith("| wide-first |"))
    cells = line.split("|")
    cells[3] = cells[3].replace(cells[3].split("[")[0].strip(), "−0.9999", 1)  # a wrong mean difference
    with pytest.raises(AssertionError):
        _check_result_section(section.replace(line, "|".join(cells)), tmp_path)


def test_the_studies_page_shows_the_result_only_once_every_main_run_is_in():
    """docs/studies/study2.md has no result section before the 78th main run (no interim look); after it,
    every number of its result section is recomputed from the committed per-run files."""
    page = (ROOT / "docs" / "studies" / "study2.md").read_text()
    complete = s2.is_complete(s2.load_runs(RESULTS))
    assert ("## The result" in page) is complete
    widths = {r.arm: r.widths for r in _scores(RESULTS).itertuples() if r.lr == c2.MAIN_LR}
    design = page[page.index("## Design"):page.index("## What the outcomes")]
    assert widths["uniform"] == [256] * 9 and "`uniform` (256 × 9)" in design  # the arms' widths are here
    assert widths["wide-first"] == [512] + [224] * 8 and "`wide-first` (512, then 224 × 8" in design
    assert f"(`{','.join(map(str, widths['probe-derived']))}`" in page[:page.index("## Design")]
    if complete:
        start = page.index("## The result")
        end = page.find("\n## ", start + 1)
        _check_result_section(page[start:] if end < 0 else page[start:end], RESULTS)


def _signed(x: float, digits: int = 4) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def test_the_readme_quotes_study_2_only_once_every_main_run_is_in():
    """Before the 78th main run the README calls study 2 running and quotes none of its test scores; after
    it, the README quotes both contrasts as the per-run files give them (Δ [95% CI], Holm p)."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    if not s2.is_complete(s2.load_runs(RESULTS)):
        assert "pre-registered and running" in readme
        return
    _, test = _main_runs(RESULTS)
    p = np.array([stats.ttest_rel(test[a], test["uniform"]).pvalue for a in c2.CONTRASTS])
    for arm, p_holm in zip(c2.CONTRASTS, _holm(p), strict=True):
        d = test[arm] - test["uniform"]
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        quote = f"{arm} {_signed(d.mean())} nats [{_signed(lo)}, {_signed(hi)}], Holm p {p_holm:.2g}"
        assert quote in readme, quote
