"""Figure: a registered study's contrasts seed by seed. Each arm minus uniform on the study's primary
outcome, one dot per seed, with the registered mean difference, its 95% interval, p and Holm's p (from the
study's contrasts.csv; the dots from its runs.csv, and they must average to the registered means).

    python -m analyses.paired_figure confirm     # -> results/confirm/paired.png (study 1)
    python -m analyses.paired_figure confirm2    # -> results/confirm2/paired.png, once every run is in
    python -m analyses.paired_figure rescore     # -> results/confirm/rescore/paired.png (study 1 re-trained)

`python -m analyses.confirm2 collect` draws study 2's and the re-score's once their contrasts exist.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tlm_probe.plotting.paired import plot_paired
from tlm_probe.plotting.style import save_figure
from tlm_probe.stats.paired import PAIRED_SUMMARY_COLUMNS, seed_differences

RESULTS = Path(__file__).resolve().parent / "results"
BASELINE, MAIN_LR, OUTCOME = "uniform", "3e-3", "test_nll"
SHOWN = {"probe-derived.json": "probe-derived"}
"""Study 1's arm ids as figures show them: its probe-derived arm as study 2 names it (and colours it); the
other ids are the schedule specs `tlm train --schedule` takes."""


@dataclass(frozen=True)
class Study:
    folder: str
    title: str
    outcome: str | None = None
    """contrasts.csv's `outcome` whose rows are drawn, where the table holds several (the re-score)."""


STUDIES = {
    "confirm": Study("confirm", "Study 1: each arm − uniform, same seed, on its outcome\n"
                     "(the first 262,144 test tokens: 33 files of 5 packages)\n"
                     "dots: seeds; tick, bar: mean, 95% interval; Holm over 3 arms"),
    "confirm2": Study("confirm2", "Study 2: each arm − uniform, same seed, on its primary outcome\n"
                      "(1,048,576 test tokens sampled over the whole test split)\n"
                      "dots: seeds; tick, bar: mean, 95% interval; Holm over 2 arms"),
    "rescore": Study("confirm/rescore", "Study 1 re-trained (post hoc): each arm − uniform, same seed\n"
                     "on study 2's outcome (1,048,576 test tokens over the whole split)\n"
                     "dots: seeds; tick, bar: mean, 95% interval; Holm over 3 arms", outcome="test_nll"),
}


def tables(results: Path, outcome: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(seed differences, summary) of a study folder's main runs and registered contrasts (those on
    `outcome`, where contrasts.csv holds several)."""
    runs = pd.read_csv(results / "runs.csv", dtype={"lr": str})
    runs = runs[runs["lr"] == MAIN_LR]
    if "source" in runs:  # study 1: the run its probe-derived schedule was derived from is no seed of it
        runs = runs[~runs["source"].astype(bool)]
    contrasts = pd.read_csv(results / "contrasts.csv")
    if outcome is not None:
        contrasts = contrasts[contrasts["outcome"] == outcome]
    summary = contrasts.rename(columns={"diff_mean": "delta"}).assign(baseline=BASELINE)
    diffs = seed_differences(runs, dict.fromkeys(summary["arm"], BASELINE), OUTCOME)
    drawn = diffs.groupby("arm", sort=False)["diff"].agg(["mean", "size"])
    for row in summary.itertuples():  # the dots are the seeds the registered test used
        mean, n = drawn.loc[row.arm]
        if n != row.n_pairs or abs(mean - row.delta) > 5e-6:
            raise SystemExit(f"error: {results}: {row.arm}'s {n} seed differences average {mean:+.6f}, "
                             f"not contrasts.csv's {row.delta:+.6f} over {row.n_pairs} pairs")
    return diffs, summary[PAIRED_SUMMARY_COLUMNS]


def draw(name: str, folder: Path | None = None) -> Path:
    """The study's figure, from its folder (by default analyses/results/<study>), written there."""
    study = STUDIES[name]
    folder = folder or RESULTS / study.folder
    if not (folder / "contrasts.csv").is_file():
        raise SystemExit(f"error: {folder} has no contrasts.csv yet (a study's contrasts come once every "
                         "main run has finished)")
    diffs, summary = tables(folder, study.outcome)
    diffs, summary = (t.assign(arm=t["arm"].replace(SHOWN)) for t in (diffs, summary))
    fig = plot_paired(diffs, summary, OUTCOME, size=(1000, 220 + 200 * len(summary)), title=study.title)
    return save_figure(fig, folder / "paired.png")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study", choices=tuple(STUDIES))
    print(draw(p.parse_args(argv).study))


if __name__ == "__main__":
    sys.exit(main())
