"""The table behind a sweep's heatmap: compare's paired table (each arm minus uniform, paired by seed) with
each arm's schedule shape and start/end ratio parsed back from its spec by schedules.parse_schedule."""

from __future__ import annotations

import math

import pandas as pd

from tlm_probe.schedules.widths import SCHEDULES, parse_schedule

GRID_SHAPES = SCHEDULES.where(lambda row: row.group == "taper")
SWEEP_COLUMNS = ["mixer", "arm", "shape", "start", "end", "ratio", "n_pairs", "delta", "ci_low", "ci_high",
                 "dz", "p"]


def _num(x: float) -> str:
    return f"{x:g}"


def sweep_table(paired: pd.DataFrame, metric: str = "val_loss") -> pd.DataFrame:
    """One row per non-baseline arm: its shape/ratio (ratio '' for arms off the grid) and the paired
    difference to the baseline (mean, 95% CI, d_z, p) of `metric`, from compare's paired table."""
    if paired.empty:
        return pd.DataFrame(columns=SWEEP_COLUMNS)
    schedules = paired["schedule"] if "schedule" in paired else paired["arm"]
    mixers = paired["mixer"] if "mixer" in paired else pd.Series("attention", index=paired.index)
    rows = []
    for (_, row), sched, mixer in zip(paired.iterrows(), schedules, mixers, strict=True):
        spec = parse_schedule(str(sched))
        on_grid = spec.name in GRID_SHAPES
        rows.append({
            "mixer": mixer, "arm": row["arm"], "shape": spec.name,
            "start": spec.start if on_grid else math.nan, "end": spec.end if on_grid else math.nan,
            "ratio": f"{_num(spec.start)}→{_num(spec.end)}" if on_grid else "",
            "n_pairs": row["n_pairs"], "delta": row[f"{metric}_diff_mean"],
            "ci_low": row.get(f"{metric}_diff_ci_low", math.nan),
            "ci_high": row.get(f"{metric}_diff_ci_high", math.nan),
            "dz": row.get(f"{metric}_dz", math.nan), "p": row[f"{metric}_p"],
        })
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)
