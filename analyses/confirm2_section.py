"""Study 2's result as markdown (results/confirm2/section.md), from its registered tables
(analyses.confirm2_stats): the primary contrasts, the power and the registered secondaries (the
learning-rate check has its own table, lr_check.csv, and page section); written by
`python -m analyses.confirm2 collect` once every main run has finished.
tests/test_confirm2_tables.py recomputes the numbers from the per-run files, independently of this code."""

from __future__ import annotations

import pandas as pd
from scipy import stats

from analyses import confirm2_stats as s2
from analyses.confirm_section import _num, _p

HEADER = ("| arm | test NLL, mean ± SD | Δ vs uniform [95% CI] | d_z | p | p (Holm, 2) | "
          "wins / ties / losses |")
"""The arms' widths are in the page's design table, not here: eight columns did not fit the page."""


def _row(df: pd.DataFrame, arm: str, c: pd.Series | None) -> str:
    runs = s2.main_runs(df).loc[lambda r: r["arm"] == arm]
    head = f"| {arm} | {runs['test_nll'].mean():.4f} ± {runs['test_nll'].std(ddof=1):.4f} |"
    if c is None:
        return head + " | | | | |"
    return (f"{head} {_num(c['diff_mean'], 4)} [{_num(c['ci_low'], 4)}, {_num(c['ci_high'], 4)}] | "
            f"{_num(c['d_z'], 2)} | {_p(c['p'])} | {_p(c['p_holm'])} | {c['wins']} / {c['ties']} / "
            f"{c['losses']} |")


def _secondary(sec: pd.DataFrame, pooled: pd.DataFrame) -> list[str]:
    rows = ["| secondary | Δ [95% CI] | p |", "|---|---|---|"]
    for _, r in sec.iterrows():
        what = (f"{r['arm']} − {r['baseline']}, " +
                ("first 262,144 test tokens (study 1's outcome)" if r["outcome"] == "test_prefix_nll"
                 else "primary outcome"))
        rows.append(f"| {what} | {_num(r['diff_mean'], 4)} [{_num(r['ci_low'], 4)}, {_num(r['ci_high'], 4)}] "
                    f"| {_p(r['p'])} |")
    for _, r in pooled.iterrows():
        half = stats.t.ppf(0.975, r["dof"]) * r["se"]
        rows.append(f"| {r['arm']} − uniform, pooled model (NLL ~ arm + seed, all three arms) | "
                    f"{_num(r['coef'], 4)} [{_num(r['coef'] - half, 4)}, {_num(r['coef'] + half, 4)}] | "
                    f"{_p(r['p'])} |")
    return rows


def _power(power: dict) -> str:
    return (f"Power: {power['n_pairs']} pairs at α = 0.025 detect d_z = {power['detectable_d_z']:.2f} with "
            f"80% power, {power['detectable_nats']:.4f} nats at the observed median SD of the paired "
            f"differences ({power['median_diff_sd']:.4f}); study 1's −0.0266 nats had "
            f"{power['power_for_study1_effect']:.0%} power at that SD.")


def section(df: pd.DataFrame, summary: dict) -> list[str]:
    contrasts = s2.contrasts(df).set_index("arm")
    table = [HEADER, "|---|---|---|---|---|---|---|", _row(df, s2.BASELINE, None),
             *[_row(df, a, contrasts.loc[a]) for a in contrasts.index]]
    return [*table, "", _power(summary["power"]), "", *_secondary(s2.secondary(df), s2.pooled_model(df))]
