"""Study 1 re-scored (issue 44 part 4): its re-trained runs' contrasts, recomputed from the per-run files
independently of analyses/ (scipy's paired t-test, a hand Holm step-down, scipy's noncentral t for power),
first on a synthetic complete re-score, then on the committed one once all 36 runs are in; and that no
contrast is computed or shown before then."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.optimize import brentq
from test_confirm2_tables import _assert_row, _holm, _nll, _power, _signed
from test_confirm_readme import _numbers

from analyses import confirm_rescore_stats as rs
from analyses.confirm_section import _num

ROOT = Path(__file__).resolve().parents[1]
STUDY1 = ROOT / "analyses" / "results" / "confirm"
PAGE = ROOT / "docs" / "studies" / "study2.md"
README = ROOT / "README.md"
HEADING = "## Study 1 re-scored: the result"
ARMS = {"uniform": "uniform", "cosine 1.5→0.5": "cosine_1.5_0.5", "hourglass": "hourglass",
        "probe-derived": "probe-derived"}
"""The section's row label -> study 1's run-folder name of the arm."""
RUN_ARM = {"uniform": "uniform", "cosine_1.5_0.5": "cosine:1.5:0.5", "hourglass": "hourglass",
           "probe-derived": "probe-derived.json"}
"""Run-folder name -> the arm its run.json names (study 1's job arms)."""
WIDTHS = {"uniform": [256] * 9, "cosine_1.5_0.5": [384, 384, 352, 320, 256, 192, 160, 128, 128],
          "hourglass": [416, 320, 256, 224, 192, 128, 128, 224, 416],
          "probe-derived": [512, 256, 64, 96, 96, 192, 224, 352, 512]}


def _write_scores(folder: Path, scores: dict[str, float], arm: str, seed: int) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"d_ff": WIDTHS[arm], "n_layers": 9}))
    (folder / "run.json").write_text(json.dumps({"seed": seed, "arm": RUN_ARM[arm], "lr": "3e-3",
                                                 "val_loss": 3.7, "started": "t0", "ended": "t1",
                                                 "model_sha256": "0" * 64}))
    for name, value in scores.items():
        pd.DataFrame([{"metric": "token_nll", "value": value}]).to_csv(folder / name, index=False)


def _fake(study1: Path, runs: int = 36, prefix: bool = True) -> None:
    """Study 1's runs (its outcome, test.csv) and `runs` of its re-trained runs (both outcomes)."""
    rng = np.random.default_rng(1)
    effect = {"uniform": 0.0, "cosine_1.5_0.5": 0.01, "hourglass": 0.0, "probe-derived": -0.04}
    jobs = [(arm, seed) for seed in range(9) for arm in ARMS.values()]
    for k, (arm, seed) in enumerate(jobs):
        base = 2.9 + effect[arm] + 0.03 * np.sin(seed)
        _write_scores(study1 / "runs" / f"{arm}-s{seed}", {"test.csv": base + rng.normal(0, 0.02)}, arm, seed)
        if k < runs:
            scores = {"test.csv": base + 0.05 + rng.normal(0, 0.03)}
            if prefix:
                scores["test_prefix.csv"] = base + rng.normal(0, 0.02)
            _write_scores(study1 / "rescore" / "runs" / f"{arm}-s{seed}", scores, arm, seed)
    from analyses import confirm_stats as cs

    cs.primary_contrasts(cs.load_runs(study1)).to_csv(study1 / "contrasts.csv", index=False)


def _table(runs: Path, name: str) -> pd.DataFrame:
    """seed x arm (folder names) of one outcome, straight from the run folders."""
    rows = [{"arm": f.name.rsplit("-s", 1)[0], "seed": int(f.name.rsplit("-s", 1)[1]), "nll": _nll(f / name)}
            for f in sorted(runs.iterdir()) if f.is_dir() and "-" in f.name and not f.name.startswith("lr")
            and not f.name.startswith("source-")]
    return pd.DataFrame(rows).pivot(index="seed", columns="arm", values="nll")


def _contrast_cells(t: pd.DataFrame) -> dict[str, list[float]]:
    """Per arm: Δ, 95% CI, p and Holm p over the three arms, as the section prints them."""
    arms = [a for a in ARMS.values() if a != "uniform"]
    p = np.array([stats.ttest_rel(t[a], t["uniform"]).pvalue for a in arms])
    out = {}
    for arm, p_arm, p_holm in zip(arms, p, _holm(p), strict=True):
        d = t[arm] - t["uniform"]
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        out[arm] = [d.mean(), lo, hi, p_arm, p_holm]
    return out


def _check_section(section: str, study1: Path) -> None:
    """Every number of the re-score's section, from study 1's and the re-trained runs' files."""
    rescored = study1 / "rescore" / "runs"
    tables = [_table(study1 / "runs", "test.csv"), _table(rescored, "test_prefix.csv"),
              _table(rescored, "test.csv")]
    assert all(list(t.index) == list(range(9)) and not t.isna().any().any() for t in tables)
    cells = [_contrast_cells(t) for t in tables]
    lines = section.splitlines()
    for label, arm in list(ARMS.items())[1:]:
        line = next(x for x in lines if x.startswith(f"| {label} |"))
        _assert_row("|".join(line.split("|")[2:]), [v for c in cells for v in c[arm]], label)
    uniform = [tables[k]["uniform"] for k in (1, 2)]
    sentence = next(x for x in lines if x.startswith("Each cell:"))
    _assert_row(sentence, [95, 9, uniform[0].mean(), uniform[0].std(ddof=1), 1, uniform[1].mean(),
                           uniform[1].std(ddof=1), 2], "uniform")
    d = (tables[1] - tables[0]).stack()  # replicate minus original, same arm and seed, study 1's outcome
    line = next(x for x in lines if x.startswith("Each re-trained run minus"))
    _assert_row(line, [1, 1, d.mean(), d.std(ddof=1), d.min(), d.max(), 36, (d == 0).sum(),
                       (d.abs() > 0.024).sum(), 0.024], "replicates")
    sd = float(np.median([(tables[2][a] - tables[2]["uniform"]).std(ddof=1) for a in cells[2]]))
    dz = brentq(lambda z: _power(z, 9, 0.05 / 3) - 0.8, 0.05, 3.0)
    power = next(x for x in lines if x.startswith("Power of the re-score:"))
    _assert_row(power, [9, 0.05, 3, dz, 80, dz * sd, sd], "power")


def test_the_rescore_check_recomputes_a_synthetic_section_and_catches_a_wrong_digit(tmp_path):
    _fake(tmp_path)
    out = rs.write_all(tmp_path / "rescore")
    assert len(out["contrasts"]) == 6 and set(out["contrasts"]["outcome"]) == {"test_nll", "test_prefix_nll"}
    section = (tmp_path / "rescore" / "section.md").read_text()
    _check_section(section, tmp_path)
    row = next(x for x in section.splitlines() if x.startswith("| cosine"))
    delta = _numbers(row.split("|")[2])[0]  # the first cell's Δ, one unit of its last digit off
    wrong = section.replace(row, row.replace(delta.replace("-", "−"), _num(float(delta) + 1e-4, 4), 1))
    assert wrong != section
    with pytest.raises(AssertionError):
        _check_section(wrong, tmp_path)
    line = next(x for x in section.splitlines() if x.startswith("Each re-trained run minus"))
    sd = _numbers(line)[3]  # the replicates' SD, one unit of its last digit off
    off = line.replace(f"SD {sd}", f"SD {float(sd) + 1e-4:.4f}")
    assert off != line
    with pytest.raises(AssertionError):
        _check_section(section.replace(line, off), tmp_path)
    runs = pd.read_csv(tmp_path / "rescore" / "runs.csv")
    assert len(runs) == 36 and {"test_nll", "test_prefix_nll"} <= set(runs.columns)
    from analyses import paired_figure

    diffs, summary = paired_figure.tables(tmp_path / "rescore", "test_nll")  # the re-score's block only
    expected = _contrast_cells(_table(tmp_path / "rescore" / "runs", "test.csv"))
    assert len(diffs) == 27 and len(summary) == 3
    for row in summary.itertuples():
        arm = row.arm.removesuffix(".json").replace(":", "_")
        assert row.delta == pytest.approx(expected[arm][0], rel=1e-5)
    assert paired_figure.draw("rescore", tmp_path / "rescore").stat().st_size > 10_000


@pytest.mark.parametrize(("runs", "prefix"), [(35, True), (36, False)])
def test_no_contrast_before_all_36_are_in_and_scored_on_both_outcomes(tmp_path, runs, prefix):
    _fake(tmp_path, runs=runs, prefix=prefix)
    assert rs.write_all(tmp_path / "rescore") == {}
    folder = tmp_path / "rescore"
    assert not (folder / "contrasts.csv").exists() and not (folder / "section.md").exists()
    table = pd.read_csv(folder / "runs.csv")
    assert len(table) == runs and not {"test_nll", "test_prefix_nll"} & set(table.columns)
    status = (folder / "STATUS.md").read_text()
    assert f"finished: {runs} of 36" in status
    assert f"too (analyses.rescore_prefix): {runs * prefix} of 36" in status
    assert "No contrast is computed until" in status


def test_the_committed_rescore_tables_are_the_per_run_files(tmp_path):
    """What collect writes from the committed run folders is what is committed."""
    copy = tmp_path / "rescore"
    shutil.copytree(STUDY1 / "rescore", copy)
    shutil.copyfile(STUDY1 / "contrasts.csv", tmp_path / "contrasts.csv")
    (tmp_path / "runs").symlink_to(STUDY1 / "runs")  # study 1's own runs, read by the replicate line
    rs.write_all(copy)
    for name in ("runs.csv", "STATUS.md", "contrasts.csv", "section.md"):
        mine, committed = copy / name, STUDY1 / "rescore" / name
        assert mine.is_file() == committed.is_file(), name
        if mine.is_file():
            assert mine.read_bytes() == committed.read_bytes(), name


def test_the_studies_page_shows_the_rescore_only_once_complete():
    page = PAGE.read_text()
    section = STUDY1 / "rescore" / "section.md"
    if not section.is_file():
        assert HEADING not in page
        return
    shown = page[page.index(HEADING):]
    assert section.read_text().strip() in shown
    _check_section(shown, STUDY1)


def test_the_readme_quotes_the_rescore_only_once_complete():
    """Before the 36th re-trained run the README says the re-score is running and quotes none of it; after
    it, the README quotes the three re-scored contrasts (Δ [95% CI], Holm p) from the per-run files."""
    readme = " ".join(README.read_text().split())
    if not (STUDY1 / "rescore" / "section.md").is_file():
        assert "study 1's design is being re-scored" in readme and "Study 1's design, re-scored" not in readme
        return
    assert "being re-scored" not in readme and "Study 1's design, re-scored" in readme
    cells = _contrast_cells(_table(STUDY1 / "rescore" / "runs", "test.csv"))
    for label, arm in list(ARMS.items())[1:]:
        d, lo, hi, _, p_holm = cells[arm]
        quote = f"{label} {_signed(d)} nats [{_signed(lo)}, {_signed(hi)}], Holm p {p_holm:.2g}"
        assert quote in readme, quote


def _logged(run: Path) -> list[dict]:
    """A run's metrics.jsonl records without their timings (which no two runs share)."""
    timing = {"tokens_per_s", "mfu", "wall_s", "time"}
    return [{k: v for k, v in json.loads(x).items() if k not in timing}
            for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_35_of_36_rescored_runs_log_what_study_1_logged():
    """The studies page: every re-trained run but uniform-s0 logs study 1's losses and gradient norms to the
    last digit (the keys both versions log), and uniform-s0 first differs at step 30."""
    rescored = sorted(p for p in (STUDY1 / "rescore" / "runs").iterdir() if (p / "metrics.jsonl").is_file())
    if len(rescored) < 36:
        pytest.skip("the re-score is not complete")
    differ = {}
    for run in rescored:
        mine, theirs = _logged(run), _logged(STUDY1 / "runs" / run.name)
        assert len(mine) == len(theirs) == 386, run.name
        first = next((y["step"] for x, y in zip(mine, theirs, strict=True)
                      if any(x[k] != y[k] for k in set(x) & set(y))), None)
        if first is not None:
            differ[run.name] = first
    assert differ == {"uniform-s0": 30}


def test_the_rescore_prose_is_the_per_run_files():
    """The numbers the page's prose reads off the re-score, from the per-run files."""
    page = " ".join(PAGE.read_text().split())
    if HEADING not in page:
        pytest.skip("the re-score is not complete")
    prose = page[page.index(HEADING):]
    original, prefix, test = (_table(STUDY1 / "runs", "test.csv"), _table(STUDY1 / "rescore" / "runs",
                              "test_prefix.csv"), _table(STUDY1 / "rescore" / "runs", "test.csv"))
    shifts = {a: ((prefix[a] - prefix["uniform"]) - (original[a] - original["uniform"])).mean()
              for a in list(ARMS.values())[1:]}
    assert {round(v, 4) for v in shifts.values()} == {-0.0031}
    assert "each contrast moves by the same −0.0031 nats (uniform-s0's +0.0278, over 9 seeds)" in prose
    assert _signed((prefix - original).loc[0, "uniform"]) == "+0.0278"
    assert test["uniform"].idxmax() == 0
    diffs = test.sub(test["uniform"], axis=0).drop(columns="uniform")
    assert (diffs.idxmin() == 0).all() and f"{diffs.loc[0, 'probe-derived']:.2f}" == "-0.20"
    assert "the probe-derived dot at −0.20" in prose
    sd1 = float(np.median([(original[a] - original["uniform"]).std(ddof=1) for a in shifts]))
    assert f"{sd1:.4f}" == "0.0417" and "against study 1's 0.0417" in prose
    assert "(−0.0277 nats against −0.0266)" in prose and "(−0.0311)" in prose
