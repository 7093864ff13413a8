"""Compare a fresh run of make_golden.py with the committed golden CSVs (used by tests/test_golden.py).

PYTHONPATH=$PWD python tests/golden/compare.py      # every family, prints the largest differences
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_golden import golden_tables  # noqa: E402

ALIGNMENT_CI = "alignment"  # the alignment CIs were right before; importance CIs were redefined (issue 9)
KEYS = ["model", "layer", "statistic"]


def merged(new: pd.DataFrame, families=None) -> pd.DataFrame:
    old = pd.read_csv(HERE / "results.csv")
    if families is not None:
        old = old[old.model.isin(families)]
    m = old.merge(new, on=KEYS, how="outer", suffixes=("_old", "_new"), indicator=True)
    return m


def differences(m: pd.DataFrame, alignment: set[str]) -> dict[str, float]:
    """Largest absolute difference per column (NaN == NaN); ci columns only for alignment rows."""
    out = {}
    for col in ("value", "std", "n_tokens", "ci_low", "ci_high"):
        rows = m[m.statistic.isin(alignment)] if col.startswith("ci_") else m
        a, b = rows[f"{col}_old"].to_numpy(float), rows[f"{col}_new"].to_numpy(float)
        both_nan = np.isnan(a) & np.isnan(b)
        d = np.where(both_nan, 0.0, np.abs(a - b))
        out[col] = float(np.nanmax(np.where(np.isnan(d), np.inf, d))) if len(d) else 0.0
    return out


def matrix_difference(new: pd.DataFrame, families=None) -> float:
    old = pd.read_csv(HERE / "matrices.csv")
    if families is not None:
        old = old[old.model.isin(families)]
    m = old.merge(new, on=["model", "layer_i", "layer_j", "statistic"], how="left", suffixes=("_old", "_new"))
    return float(np.nanmax(np.abs(m.value_old - m.value_new).fillna(np.inf))) if len(m) else 0.0


if __name__ == "__main__":
    from tlm_probe.stats.alignment import PER_TOKEN

    with tempfile.TemporaryDirectory() as tmp:
        table, mats = golden_tables(Path(tmp))
    m = merged(table)
    print(
        "rows only in golden:",
        int((m._merge == "left_only").sum()),
        " only new:",
        int((m._merge == "right_only").sum()),
    )
    both = m[m._merge == "both"]
    print("max |difference| per column:", differences(both, set(PER_TOKEN)))
    print("matrices max |difference|:", matrix_difference(mats))
    new_ci = both[~both.statistic.isin(set(PER_TOKEN))]
    print(
        "importance CI columns changed (by design) on",
        int((new_ci.ci_low_old.fillna(0) != new_ci.ci_low_new.fillna(0)).sum()),
        "rows",
    )
