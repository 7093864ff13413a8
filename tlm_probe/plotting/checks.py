"""Checks on the tables a figure draws from: a wrong table is a UserError naming what is wrong."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from tlm_probe.errors import UserError
from tlm_probe.statistic_names import AGREEMENT

PER_MODEL = ("has one value per model, not per layer: nothing to draw against depth (it is in agreement.csv "
             "and the report's agreement table)")

# the result columns a figure draws from (results.RESULT_COLUMNS less the optional ones)
DRAWN_COLUMNS = ("model", "layer", "depth", "statistic", "value", "ci_low", "ci_high", "n_tokens", "d_ff")
CURVE_COLUMNS = ("arm", "metric", "tokens", "mean", "std", "n_seeds")
SCHEDULE_COLUMNS = ("schedule", "layer", "width")


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> pd.DataFrame:
    """The table, checked, as a shallow copy without `attrs`: probe() keeps a DataFrame in attrs, and
    pandas compares attrs on every concat, which fails for DataFrame values."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"{what} table lacks column(s) {', '.join(missing)}")
    plain = df.copy(deep=False)
    plain.attrs = {}
    return plain


def select_statistic(df: pd.DataFrame, statistic: str, what: str = "result") -> pd.DataFrame:
    """Rows of one statistic; an unknown name lists the ones that exist."""
    rows = df[df["statistic"] == statistic]
    if rows.empty and statistic in AGREEMENT:
        raise UserError(f"statistic {statistic!r} {PER_MODEL}")
    if rows.empty:
        have = ", ".join(sorted(df["statistic"].astype(str).unique())) or "none"
        raise UserError(f"statistic {statistic!r} is not in the {what} table (available: {have})")
    return rows


def per_layer(rows: pd.DataFrame, statistic: str) -> pd.DataFrame:
    """Rows with a layer index (>= 0); per-model rows (layer -1 in a table written before agreement.csv, or
    built by hand) have no depth."""
    layered = rows[rows["layer"] >= 0]
    if layered.empty:
        raise UserError(f"statistic {statistic!r} {PER_MODEL}")
    return layered


def models_in_order(df: pd.DataFrame) -> list[str]:
    """Models in order of first appearance, so legends follow the order the user gave the inputs."""
    return list(dict.fromkeys(df["model"].astype(str)))
