"""Study 1 re-scored, as markdown (results/confirm/rescore/section.md), from analyses.confirm_rescore_stats:
study 1's three contrasts as it ran them, then its re-trained runs on study 1's outcome and on study 2's,
and how far each re-trained run lands from the study 1 run it re-trains (same arm, seed and outcome).
Written by `python -m analyses.confirm2 collect` once all 36 re-trained runs are scored on both outcomes;
tests/test_confirm_rescore.py recomputes the numbers from the per-run files, independently of this code."""

from __future__ import annotations

import pandas as pd

from analyses import confirm_stats as cs
from analyses.confirm_rescore_stats import OUTCOMES
from analyses.confirm_section import LABELS, _num, _p

COLUMNS = {"original": "study 1's runs, study 1's outcome",
           "test_prefix_nll": "re-trained, study 1's outcome",
           "test_nll": "re-trained, study 2's outcome (the re-score)"}
"""Each column of the table: one set of runs scored on one outcome."""


def _cell(c: pd.Series) -> str:
    return (f"{_num(c['diff_mean'], 4)} [{_num(c['ci_low'], 4)}, {_num(c['ci_high'], 4)}]<br>"
            f"p {_p(c['p'])}, Holm {_p(c['p_holm'])}")


def _uniform(df: pd.DataFrame, col: str) -> str:
    nll = cs.main_runs(df).loc[lambda r: r["arm"] == cs.BASELINE, col]
    return f"{nll.mean():.4f} ± {nll.std(ddof=1):.4f}"


def replicate_line(df: pd.DataFrame, study1: pd.DataFrame) -> str:
    """Each re-trained run minus study 1's run of the same arm and seed, on study 1's outcome: how far a
    re-trained run lands from the run it re-trains, and how many reproduce it exactly."""
    key = ["arm", "seed"]
    both = cs.main_runs(df).merge(cs.main_runs(study1), on=key, suffixes=("", "_original"), validate="1:1")
    d = both["test_prefix_nll"] - both["test_nll_original"]
    return (f"Each re-trained run minus study 1's run of the same arm and seed, on study 1's outcome: mean "
            f"{_num(d.mean(), 4)} nats, SD {d.std(ddof=1):.4f}, from {_num(d.min(), 4)} to "
            f"{_num(d.max(), 4)} ({len(d)} runs: {int((d == 0).sum())} identical to the last digit, "
            f"{int((d.abs() > cs.TAU).sum())} beyond the {cs.TAU}-nat rerun noise).")


def section(df: pd.DataFrame, table: pd.DataFrame, original: pd.DataFrame, study1: pd.DataFrame) -> list[str]:
    """df: the re-trained runs (confirm_rescore_stats.load_runs); table: their contrasts on both outcomes;
    original: study 1's contrasts.csv; study1: its runs (confirm_stats.load_runs)."""
    blocks = {"original": original.set_index("arm"),
              **{col: table[table["outcome"] == col].set_index("arm") for col in OUTCOMES}}
    rows = ["| arm − uniform | " + " | ".join(COLUMNS.values()) + " |", "|---|---|---|---|"]
    for arm in cs.PRIMARY:
        rows.append(f"| {LABELS[arm]} | " + " | ".join(_cell(blocks[k].loc[arm]) for k in COLUMNS) + " |")
    n = int(table["n_pairs"].max())
    sd = float(table.loc[table["outcome"] == "test_nll", "diff_sd"].median())
    dz = cs.detectable_dz(n)
    return [*rows, "",
            f"Each cell: Δ in nats [95% CI] over {n} seeds; paired t-test p, Holm over the three arms. "
            f"Uniform's re-trained runs average {_uniform(df, 'test_prefix_nll')} nats on study 1's outcome "
            f"and {_uniform(df, 'test_nll')} on study 2's (mean ± SD over seeds).", "",
            replicate_line(df, study1), "",
            f"Power of the re-score: {n} pairs at α = 0.05/3 detect d_z = {dz:.2f} with 80% power, "
            f"{dz * sd:.4f} nats at its median SD of the paired differences ({sd:.4f})."]
