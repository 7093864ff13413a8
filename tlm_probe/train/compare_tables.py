"""The tables of a comparison: each arm's summary over seeds and its paired test against the baseline arm
(the same seed's run of the mixer's uniform arm), from the results table tlm compare writes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from tlm_probe.stats.paired import pair_by_seed
from tlm_probe.stats.power import detectable_difference

COMPARED_METRICS = ("val_loss", "val_ppl", "val_bpb")


def paired_table(
    results: pd.DataFrame, baseline: str | dict[str, str], metrics: tuple[str, ...] = COMPARED_METRICS
) -> pd.DataFrame:
    """Each arm minus its mixer's baseline arm (one name for all, or mixer -> name), paired by seed, with
    scipy's paired t-test on each metric."""
    rows = []
    for arm, mixer in dict.fromkeys(zip(results["arm"], results["mixer"], strict=True)):
        ref = baseline if isinstance(baseline, str) else baseline.get(mixer)
        if arm == ref or ref is None or not (results["arm"] == ref).any():
            continue
        mine, base = pair_by_seed(results, arm, ref)
        schedule = results.loc[results["arm"] == arm, "schedule"].iloc[0] if "schedule" in results else arm
        row = {"arm": arm, "mixer": mixer, "schedule": schedule, "baseline": ref, "n_pairs": len(mine)}
        for m in metrics:
            row.update(_paired(mine[m].to_numpy(float), base[m].to_numpy(float), m))
        rows.append(row)
    table = pd.DataFrame(rows)
    for m in metrics if len(table) else ():  # the family: the arms tested against one baseline
        table[f"{m}_p_holm"] = table.groupby("baseline", sort=False)[f"{m}_p"].transform(holm)
    return table


def holm(p: pd.Series) -> pd.Series:
    """Holm-Bonferroni adjusted p-values over the finite ones (NaN stays NaN): the i-th smallest of m is
    multiplied by m - i, made non-decreasing in that order, capped at 1."""
    finite = p.dropna().sort_values()
    m = len(finite)
    steps = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * finite.to_numpy(float)))
    return pd.Series(steps, index=finite.index).reindex(p.index)


def _paired(a: np.ndarray, b: np.ndarray, metric: str) -> dict:
    """Paired difference a - b: mean, std, scipy's paired t-test, the 95% t-interval of the mean
    difference, the standardised effect size d_z = mean/std (Cohen's d for paired samples) and the
    smallest |difference| these pairs detect with 80% power at the observed std (stats.power)."""
    diff = a - b
    ok = len(diff) >= 2 and not np.isnan(diff).any() and np.ptp(diff) > 0
    test = stats.ttest_rel(a, b) if ok else None
    std = float(np.std(diff, ddof=1)) if len(diff) >= 2 else math.nan
    low, high = test.confidence_interval(0.95) if test is not None else (math.nan, math.nan)
    return {
        f"{metric}_diff_mean": float(np.mean(diff)) if len(diff) else math.nan,
        f"{metric}_diff_std": std,
        f"{metric}_diff_ci_low": float(low),
        f"{metric}_diff_ci_high": float(high),
        f"{metric}_dz": float(np.mean(diff) / std) if ok else math.nan,
        f"{metric}_t": float(test.statistic) if test is not None else math.nan,
        f"{metric}_p": float(test.pvalue) if test is not None else math.nan,
        f"{metric}_detectable": detectable_difference(std, len(diff)),
    }


def summary_table(results: pd.DataFrame, metrics: tuple[str, ...] = COMPARED_METRICS) -> pd.DataFrame:
    g = results.groupby("arm", sort=False)
    out = g.agg(
        mixer=("mixer", "first"),
        schedule=("schedule", "first"),
        n_seeds=("seed", "nunique"),
        params=("params", "first"),
        flops_per_token=("flops_per_token", "first"),
        tokens_per_s_mean=("tokens_per_s", "mean"),
    )
    for m in metrics:
        out[f"{m}_mean"] = g[m].mean()
        out[f"{m}_std"] = g[m].std(ddof=1)
    return out.reset_index()
