"""The probe's rows after the stream: MLP rows of blocks without an MLP dropped, the Spearman agreement
rows, and the tidy tables (results.csv, matrices.csv and agreement.csv) probe() returns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tlm_probe import importance as imp
from tlm_probe.capture import ProbeModel
from tlm_probe.results import AGREEMENT_COLUMNS, MATRIX_COLUMNS, RESULT_COLUMNS
from tlm_probe.statistic_names import value_range


def why_no_agreement(stat: str, skipped: dict, refused: dict) -> str:
    proxy = stat.removeprefix("spearman_")
    why = skipped.get(proxy) or refused.get(proxy) or "constant or missing across layers"
    return f"no agreement row: its proxy {proxy} is unavailable ({why})"


NEURON_STATISTICS = ("dead_neuron_frac",)
"""Statistics of the MLP's neurons whose names do not say "mlp"."""
NO_MLP_NOTE = ("blocks with d_l = 0 have no MLP: no rows of MLP statistics (names with 'mlp', "
               "dead_neuron_frac) for them, and Spearman agreement leaves them out; block-level rows stay")


def describes_mlp(statistic: str) -> bool:
    """A statistic of the block's MLP (undefined where the block has none)."""
    return "mlp" in statistic or statistic in NEURON_STATISTICS


def without_absent_mlps(rows: list[dict], d_ff) -> list[dict]:
    """Drop the MLP rows of blocks with d_l = 0: an MLP that is not there has no alignment or importance
    (its output is exactly 0, so its values would be 0 or 0/0, not measurements)."""
    absent = {l for l, w in enumerate(d_ff) if w == 0}
    return [r for r in rows if not (r["layer"] in absent and describes_mlp(r["statistic"]))]


def agreement_rows(rows: list[dict], plan, n_layers: int) -> tuple[list[dict], str | None]:
    """Spearman rows (AGREEMENT_COLUMNS but the model) of every asked proxy against the ablation effect of
    this run, and that effect's name. A layer missing from a statistic (no MLP) is NaN there, left out of
    its rank test."""
    wanted = [s for s in plan.asked if s in imp.AGREEMENT]
    if not wanted or not rows:
        return [], None
    df = pd.DataFrame(rows)
    per_layer = {s: g.groupby("layer")["value"].first().reindex(range(n_layers)).to_numpy(dtype=float)
                 for s, g in df.groupby("statistic")}
    target = next((t for t in imp.TARGETS if t in per_layer), None)
    if target is None:
        return [], None
    out = [dict(statistic=r["statistic"], proxy=r["statistic"].removeprefix("spearman_"), target=target,
                value=r["value"], ci_low=r["ci_low"], ci_high=r["ci_high"], n_layers=r["n_tokens"])
           for r in imp.spearman_rows(per_layer, target)]  # spearman_rows counts layers in n_tokens
    return [r for r in out if r["statistic"] in wanted], target


def agreement_table(pm: ProbeModel, rows: list[dict]) -> pd.DataFrame | None:
    """One row per model and proxy (results.AGREEMENT_COLUMNS), None when there is none."""
    if not rows:
        return None
    return pd.DataFrame(rows).assign(model=pm.name)[AGREEMENT_COLUMNS]


def result_table(pm: ProbeModel, rows: list[dict]) -> pd.DataFrame:
    """RESULT_COLUMNS (then any other key of the rows but n_sequences; a row without a key gets NaN there)
    in one constructor from plain columns: a fixed cost of every probe() call, paid cold after the stream
    (a frame built from the row dicts first, then another from its columns, took ~1.8x as long)."""
    keys = list(dict.fromkeys(k for r in rows for k in r)) if rows else ["layer", "statistic", "value"]
    given = {k: [r.get(k, np.nan) for r in rows] for k in keys}
    layer = np.asarray(given["layer"], dtype=np.int64)
    derived = {
        "model": pd.array([pm.name] * len(rows), dtype="str"),
        "layer": layer,
        "depth": layer / max(pm.n_layers - 1, 1),
        "d_ff": pd.array(np.asarray(pm.d_ff, dtype=np.int64)[layer], dtype="Int64"),
    }
    extra = [c for c in keys if c not in RESULT_COLUMNS and c != "n_sequences"]
    columns = RESULT_COLUMNS + extra
    table = pd.DataFrame({c: derived[c] if c in derived else given.get(c, np.nan) for c in columns})
    return within_range(table)


def within_range(table: pd.DataFrame) -> pd.DataFrame:
    """ci_low and ci_high cut to the values each row's statistic can take (statistic_names.value_range):
    the normal interval of a mean near a bound reaches past it (a block_influence of 0.001 ± 0.003)."""
    bounds = np.array([value_range(s) for s in table["statistic"]], dtype=float).reshape(-1, 2)
    for column in ("ci_low", "ci_high"):
        table[column] = np.clip(table[column].to_numpy(dtype=float), bounds[:, 0], bounds[:, 1])
    return table


def matrix_table(pm: ProbeModel, rows: list[dict]) -> pd.DataFrame | None:
    if not rows:
        return None
    df = pd.DataFrame(rows)
    df["model"] = pm.name
    return df[MATRIX_COLUMNS]
