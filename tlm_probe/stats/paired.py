"""Pairing by seed: each arm's run against its baseline arm's run of the same seed, the design of every
comparison (`tlm compare`, the studies). The paired table's test (train.compare_tables) and the paired
figure's dots (`tlm plot --kind paired`) both take their pairs from here, so they pair the same runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeGuard

import pandas as pd

SEED_DIFFERENCE_COLUMNS = ["arm", "baseline", "seed", "value", "base", "diff"]


def pair_by_seed(results: pd.DataFrame, arm: str, baseline: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`arm`'s and `baseline`'s rows of `results` (one row per arm and seed), indexed by seed, on the seeds
    both have, in seed order: row i of one is paired with row i of the other."""
    mine = results[results["arm"] == arm].set_index("seed")
    base = results[results["arm"] == baseline].set_index("seed")
    seeds = sorted(set(mine.index) & set(base.index))
    return mine.loc[seeds], base.loc[seeds]


def seed_differences(results: pd.DataFrame, baselines: Mapping[str, str], metric: str) -> pd.DataFrame:
    """One row per arm and paired seed: the arm's `metric`, its baseline's, and the difference
    (arm − baseline). `baselines`: arm -> its baseline arm, in the order the rows come out."""
    frames = []
    for arm, ref in baselines.items():
        mine, base = pair_by_seed(results, arm, ref)
        value, ref_value = mine[metric].to_numpy(float), base[metric].to_numpy(float)
        frames.append(pd.DataFrame({"arm": arm, "baseline": ref, "seed": mine.index.to_numpy(),
                                    "value": value, "base": ref_value, "diff": value - ref_value}))
    if not frames:
        return pd.DataFrame(columns=SEED_DIFFERENCE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[SEED_DIFFERENCE_COLUMNS]


PAIRED_SUMMARY_COLUMNS = ["arm", "baseline", "n_pairs", "delta", "ci_low", "ci_high", "p", "p_holm"]


def paired_summary(paired: pd.DataFrame, metric: str) -> pd.DataFrame:
    """`metric`'s columns of a paired table (compare's paired.csv: `{metric}_diff_mean`, `_diff_ci_low`,
    `_diff_ci_high`, `_p`, `_p_holm`) under one set of names, one row per arm, in the table's order."""
    def col(suffix: str) -> pd.Series:
        name = f"{metric}_{suffix}"
        return paired[name] if name in paired else pd.Series(float("nan"), index=paired.index)

    baseline = paired["baseline"] if "baseline" in paired else pd.Series("uniform", index=paired.index)
    table = pd.DataFrame({"arm": paired["arm"], "baseline": baseline, "n_pairs": paired["n_pairs"],
                          "delta": col("diff_mean"), "ci_low": col("diff_ci_low"),
                          "ci_high": col("diff_ci_high"), "p": col("p"), "p_holm": col("p_holm")})
    return table.reset_index(drop=True)[PAIRED_SUMMARY_COLUMNS]


def has_interval(paired: pd.DataFrame | None, metric: str) -> TypeGuard[pd.DataFrame]:
    """Whether a paired table gives `metric` an interval for some arm: that arm has two seed pairs or more
    and a finite mean difference (one pair has no interval, hence no figure worth drawing)."""
    if paired is None or f"{metric}_diff_mean" not in paired or "n_pairs" not in paired:
        return False
    means = pd.to_numeric(paired[f"{metric}_diff_mean"], errors="coerce")
    return bool(((paired["n_pairs"] >= 2) & means.notna() & (means.abs() != float("inf"))).any())


def paired_by_seed(results: pd.DataFrame, paired: pd.DataFrame,
                   metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(seed differences, summary) of `metric` for a comparison's results and paired tables: each arm of the
    paired table against the baseline it names there."""
    summary = paired_summary(paired, metric)
    baselines = dict(zip(summary["arm"], summary["baseline"], strict=True))
    return seed_differences(results, baselines, metric), summary
