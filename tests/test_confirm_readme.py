"""The confirmatory result of the docs site (docs/studies/confirmatory.md, once the README's) recomputed from
the committed per-run files, independently of analyses/confirm_stats.py and confirm_section.py: test NLLs
read from each run's test.csv, scipy's paired t-test, a Holm step-down written here, the pooled arm + seed
model as a balanced two-way ANOVA, the centroid slope as a within-seed regression, the power by
simulation. Every number printed in the page's table and sentences must equal the recomputed one to the
last digit it shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analyses" / "results" / "confirm"
LABELS = {"cosine 1.5→0.5": "cosine_1.5_0.5", "hourglass": "hourglass", "probe-derived": "probe-derived"}
TAU = 0.024  # the pre-registered win threshold (PREREGISTRATION.md, "Wins")
NAME = re.compile(r"^(?:lr(?P<lr>[^-]+)-)?(?P<arm>.+)-s(?P<seed>\d+)$")


def _section() -> str:
    text = (ROOT / "docs" / "studies" / "confirmatory.md").read_text()
    start = text.index("## The result")
    end = text.find("\n## ", start + 1)  # a later section of the page (another study) is not this one's
    return text[start:] if end < 0 else text[start:end]


def _runs(results: Path = RESULTS) -> pd.DataFrame:
    rows = []
    for test in sorted((results / "runs").glob("*/test.csv")):
        m = NAME.match(test.parent.name)
        t = pd.read_csv(test)
        widths = json.loads((test.parent / "config.json").read_text())["d_ff"]
        rows.append({"arm": m["arm"], "lr": m["lr"] or "main", "seed": int(m["seed"]),
                     "nll": float(t.loc[t["metric"] == "token_nll", "value"].iloc[0]),
                     "centroid": float(np.average(np.linspace(0, 1, len(widths)), weights=widths)),
                     "widths": ",".join(map(str, widths))})
    df = pd.DataFrame(rows)
    return df[(df["lr"] == "main") & ~df["arm"].str.startswith("source-")]


def _numbers(cell_text: str) -> list[str]:
    text = re.sub(r"`[^`]*`", "", cell_text).replace("−", "-")
    return re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)


def _close(printed: str, value: float) -> bool:
    """Equal to the last digit shown: |printed - value| <= half a unit of that digit."""
    mant = printed.lower().split("e")[0]
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    unit = 10.0 ** -decimals * (10.0 ** int(printed.lower().split("e")[1]) if "e" in printed.lower() else 1)
    return abs(float(printed) - value) <= 0.5 * unit * (1 + 1e-9) + 1e-12


def _holm(p: np.ndarray) -> np.ndarray:
    k, order = len(p), np.argsort(p)
    adj = np.maximum.accumulate([(k - i) * p[j] for i, j in enumerate(order)])
    out = np.empty(k)
    out[order] = np.minimum(adj, 1.0)
    return out


def _row(section: str, label: str) -> list[str]:
    line = next(line for line in section.splitlines() if line.startswith(f"| {label} |"))
    return _numbers("|".join(line.split("|")[2:]))


def _expected(df: pd.DataFrame) -> dict[str, list[float]]:
    wide = df.pivot(index="seed", columns="arm", values="nll")
    arms = list(LABELS.values())
    p = np.array([stats.ttest_rel(wide[a], wide["uniform"]).pvalue for a in arms])
    # pooled additive arm + seed model on a balanced table: two-way ANOVA without interaction
    y = wide[["uniform", *arms]].to_numpy()
    resid = y - y.mean(0, keepdims=True) - y.mean(1, keepdims=True) + y.mean()
    dof = (y.shape[0] - 1) * (y.shape[1] - 1)
    se = np.sqrt((resid ** 2).sum() / dof * 2 / y.shape[0])
    coef = y.mean(0)[1:] - y.mean(0)[0]
    p_pooled = 2 * stats.t.sf(np.abs(coef / se), dof)
    out = {}
    for j, (arm, p_h, pp_h) in enumerate(zip(arms, _holm(p), _holm(p_pooled), strict=True)):
        d = (wide[arm] - wide["uniform"]).to_numpy()
        ci = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        out[arm] = [wide[arm].mean(), wide[arm].std(ddof=1), d.mean(), *ci, d.mean() / d.std(ddof=1),
                    p[j], p_h, (d < -TAU).sum(), (np.abs(d) <= TAU).sum(), (d > TAU).sum(), coef[j], pp_h]
    out["uniform"] = [wide["uniform"].mean(), wide["uniform"].std(ddof=1)]
    return out


def _complete() -> bool:
    return (RESULTS / "contrasts.csv").is_file()


def test_readme_reports_no_contrast_before_the_study_is_complete():
    if _complete():
        pytest.skip("the study is complete: the next tests check its numbers")
    assert "no contrast is reported" in _section()


def check_table(df: pd.DataFrame, section: str) -> None:
    assert df.groupby("arm")["seed"].nunique().min() >= 9 and df["arm"].nunique() == 4
    expected = _expected(df)
    for label, arm in {"uniform": "uniform", **LABELS}.items():
        printed = _row(section, label)
        assert len(printed) == len(expected[arm]), (label, printed)
        bad = [(s, v) for s, v in zip(printed, expected[arm], strict=True) if not _close(s, float(v))]
        assert not bad, (label, bad)
    line = next(x for x in section.splitlines() if x.startswith("MLP widths, layer 0 → 8: "))
    printed = dict(re.findall(r"([^:;]+?) `([\d,]+)`", line.split(": ", 1)[1]))
    widths = df.groupby("arm")["widths"].agg(set)  # every seed of an arm has the same widths
    assert all(len(w) == 1 for w in widths), widths
    assert {label.strip(): w for label, w in printed.items()} == {
        label: next(iter(widths[arm])) for label, arm in {"uniform": "uniform", **LABELS}.items()}


def check_sentences(df: pd.DataFrame, section: str) -> None:
    y = df["nll"] - df.groupby("seed")["nll"].transform("mean")
    c = df["centroid"] - df.groupby("seed")["centroid"].transform("mean")
    slope = float((c * y).sum() / (c * c).sum())
    dof = len(df) - df["seed"].nunique() - 1
    se = float(np.sqrt(((y - slope * c) ** 2).sum() / dof / (c * c).sum()))
    m = re.search(r"Width-centroid slope[^:]*: (\S+) nats per unit of centroid \(SE (\S+), t = (\S+), "
                  r"p = ([^,]+), (\d+) runs", section.replace("−", "-"))
    assert m, "the centroid-slope sentence is missing"
    p = 2 * stats.t.sf(abs(slope / se), dof)
    for printed, value in zip(m.groups(), (slope, se, slope / se, p, len(df)), strict=True):
        assert _close(printed, value), (printed, value)
    rest = df[df["arm"] != "probe-derived"]  # the slope without the one arm it rests on
    y = rest["nll"] - rest.groupby("seed")["nll"].transform("mean")
    c = rest["centroid"] - rest.groupby("seed")["centroid"].transform("mean")
    slope = float((c * y).sum() / (c * c).sum())
    dof = len(rest) - rest["seed"].nunique() - 1
    se = float(np.sqrt(((y - slope * c) ** 2).sum() / dof / (c * c).sum()))
    m = re.search(r"without the probe-derived arm the slope is (\S+)\s+\(SE (\S+), p = ([^,]+), (\d+) runs\)",
                  section.replace("−", "-"))
    assert m, "the sentence on the slope without the probe-derived arm is missing"
    p = 2 * stats.t.sf(abs(slope / se), dof)
    for printed, value in zip(m.groups(), (slope, se, p, len(rest)), strict=True):
        assert _close(printed, value), (printed, value)
    m = re.search(r"with (\d+) pairs at α = 0\.05/3 the design detects d_z = (\S+) with 80% power", section)
    assert m and int(m[1]) == 9
    n, dz = int(m[1]), float(m[2])
    rng = np.random.default_rng(0)  # simulated paired t-tests at the printed d_z: power 0.80
    draws = rng.normal(dz, 1.0, (200_000, n))
    t = draws.mean(1) / (draws.std(1, ddof=1) / np.sqrt(n))
    power = float((np.abs(t) > stats.t.ppf(1 - 0.05 / 6, n - 1)).mean())
    assert abs(power - 0.80) < 0.01, power


@pytest.mark.skipif(not _complete(), reason="the confirmatory study has not finished all its main runs")
def test_readme_confirmatory_numbers_recompute_from_the_per_run_files():
    df, section = _runs(), _section()
    check_table(df, section)
    check_sentences(df, section)


def test_the_check_passes_on_a_generated_section_and_catches_one_wrong_digit(tmp_path):
    """On a synthetic complete study: the section written by analyses.confirm_section passes these
    independent checks, and the same section with one digit changed does not."""
    from test_confirm_tables import _fake_study  # tests/ is on sys.path (rootdir-relative, no package)

    from analyses import confirm_section, confirm_stats

    _fake_study(tmp_path, {"uniform": 0.0, "cosine:1.5:0.5": -0.03, "hourglass": 0.01,
                           "probe-derived.json": 0.0})
    summary = confirm_stats.write_all(tmp_path)
    section = "\n".join(confirm_section.section(confirm_stats.load_runs(tmp_path), summary))
    df = _runs(tmp_path)
    check_table(df, section)
    check_sentences(df, section)
    row = next(line for line in section.splitlines() if line.startswith("| hourglass |"))
    nll = row.split("|")[2].strip().split(" ")[0]  # the arm's mean test NLL, 4 decimals
    wrong = f"{float(nll) + 0.0002:.4f}"
    with pytest.raises(AssertionError):
        check_table(df, section.replace(row, row.replace(nll, wrong, 1)))
    slope = re.search(r"directional test\): (\S+) nats", section)[1]
    with pytest.raises(AssertionError):
        check_sentences(df, section.replace(slope, "+9.999"))
    with pytest.raises(AssertionError):  # one layer's width off
        check_table(df, section.replace("`256,256,", "`288,256,", 1))
