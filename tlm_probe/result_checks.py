"""What a probe folder (results, matrices, agreement) and a comparison folder (results.csv, summary.csv,
paired.csv, each run's metrics.jsonl) read back must hold before anything computes, draws or reports from
it (issue 49): each table's rows bounded, layers whole and in range, values finite (empty where tlm leaves a
cell empty, never inf), one row per key. The checks are files/value_checks.py's, as for diff and trust
folders (plotting/folder_checks.py); a folder that fails is one UserError naming the file, the column and
the row. Before these, a results.csv with a layer at 10**6, a depth of 7 or an inf value was drawn with exit
0, and one of a million rows kept `tlm report` busy for minutes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from tlm_probe.files.value_checks import MAX_PLOTTED_LAYERS, column_in, max_rows, one_row_each
from tlm_probe.result_files import AGREEMENT, MATRICES, RESULTS

if TYPE_CHECKING:
    import pandas as pd

MAX_PROBE_ROWS = 250_000
"""The most rows a probe table may hold: layers x statistics x checkpoints (100 layers x 50 statistics x
50 checkpoints is 250,000; a probe of one model writes a few thousand)."""
MAX_RUNS = 10_000
"""The most rows (arms x seeds) a comparison table may hold."""
WIDEST = 2**40
"""No MLP is wider (a d_ff column)."""
ANY = (-math.inf, math.inf)
"""A finite number, any size (column_in refuses inf and, unless allowed, NaN)."""


def _keys(df: pd.DataFrame, keys: tuple[str, ...]) -> list[str]:
    """The key columns, with the step and split columns that multi-checkpoint and merged tables add."""
    return [*keys, *(k for k in ("step", "split") if k in df.columns)]


def _finite(df: pd.DataFrame, where: Path, skip: tuple[str, ...]) -> None:
    """Every numeric column not checked more closely: finite or empty."""
    for col in df.columns:
        if col not in skip and df[col].dtype.kind in "fiu":
            column_in(df, col, *ANY, where)


def _results(df: pd.DataFrame, where: Path) -> None:
    """Layer -1 rows are an older folder's agreement rows (read_results sets them apart)."""
    max_rows(df, MAX_PROBE_ROWS, where)
    column_in(df, "layer", -1, MAX_PLOTTED_LAYERS - 1, where, integer=True, nan=False)
    if "depth" in df.columns:
        column_in(df[df["layer"] >= 0], "depth", 0.0, 1.0, where, nan=False)
    for col, lo, hi, whole in (("n_tokens", 0, 2**62, True), ("d_ff", 0, WIDEST, True), ("std", 0, math.inf,
                                                                                         False)):
        if col in df.columns:
            column_in(df, col, lo, hi, where, integer=whole)
    _finite(df, where, ("layer", "depth", "n_tokens", "d_ff", "std"))
    one_row_each(df, _keys(df, ("model", "layer", "statistic")), where)


def _matrices(df: pd.DataFrame, where: Path) -> None:
    max_rows(df, MAX_PROBE_ROWS, where)
    for col in ("layer_i", "layer_j"):
        column_in(df, col, 0, MAX_PLOTTED_LAYERS - 1, where, integer=True, nan=False)
    _finite(df, where, ("layer_i", "layer_j"))
    one_row_each(df, _keys(df, ("model", "statistic", "layer_i", "layer_j")), where)


def _agreement(df: pd.DataFrame, where: Path) -> None:
    max_rows(df, MAX_PROBE_ROWS, where)
    for col in ("value", "ci_low", "ci_high"):
        if col in df.columns:
            column_in(df, col, -1.0, 1.0, where)  # a Spearman correlation
    if "n_layers" in df.columns:
        column_in(df, "n_layers", 0, MAX_PLOTTED_LAYERS, where, integer=True)
    _finite(df, where, ("value", "ci_low", "ci_high", "n_layers"))


PROBE_CHECKS = {RESULTS: _results, MATRICES: _matrices, AGREEMENT: _agreement}


def check_probe_table(stem: str, df: pd.DataFrame, where: Path) -> None:
    """One probe table (results, matrices or agreement, by its file's stem), its numbers already numeric."""
    PROBE_CHECKS[stem](df, where)


def check_layers_of(df: pd.DataFrame, provenance: dict, where: Path) -> None:
    """The layers of a results table against the number its provenance records (when it records one)."""
    n = (provenance.get("architecture") or {}).get("n_layers") if isinstance(provenance, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_PLOTTED_LAYERS and len(df):
        column_in(df, "layer", 0, n - 1, where, integer=True, nan=False)


def _compare_results(df: pd.DataFrame, where: Path) -> None:
    max_rows(df, MAX_RUNS, where)
    for col, lo, whole in (("seed", 0, True), ("params", 0, True), ("flops_per_token", 0, True),
                           ("tokens", 0, True), ("val_loss", 0, False), ("val_ppl", 1, False),
                           ("val_bpb", 0, False), ("tokens_per_s", 0, False)):
        if col in df.columns:
            column_in(df, col, lo, 2**62 if whole else math.inf, where, integer=whole,
                      nan=col in ("val_bpb", "tokens_per_s"))
    _finite(df, where, ())
    one_row_each(df, [k for k in ("arm", "mixer", "seed") if k in df.columns], where)


def _compare_summary(df: pd.DataFrame, where: Path) -> None:
    max_rows(df, MAX_RUNS, where)
    if "n_seeds" in df.columns:
        column_in(df, "n_seeds", 1, 2**31, where, integer=True, nan=False)
    for col in (c for c in df.columns if c.endswith("_std")):
        column_in(df, col, 0, math.inf, where)
    _finite(df, where, ())
    one_row_each(df, [k for k in ("arm", "mixer") if k in df.columns], where)


def _compare_paired(df: pd.DataFrame, where: Path) -> None:
    max_rows(df, MAX_RUNS, where)
    if "n_pairs" in df.columns:
        column_in(df, "n_pairs", 0, 2**31, where, integer=True, nan=False)
    for col in (c for c in df.columns if c.endswith(("_p", "_p_holm"))):
        column_in(df, col, 0.0, 1.0, where)
    for col in (c for c in df.columns if c.endswith("_detectable")):
        column_in(df, col, 0.0, math.inf, where)
    _finite(df, where, ())
    one_row_each(df, [k for k in ("arm", "mixer") if k in df.columns], where)


COMPARE_CHECKS = {"results": _compare_results, "summary": _compare_summary, "paired": _compare_paired}


def check_compare_table(name: str, df: pd.DataFrame, where: Path) -> None:
    """One table of a comparison folder (results, summary or paired), its numbers already numeric."""
    if len(df.columns):  # a comparison with no finished run writes a blank table
        COMPARE_CHECKS[name](df, where)


def check_losses(losses: pd.DataFrame, where: Path) -> None:
    """The loss curves read from a run's metrics.jsonl: steps and token counts whole, losses finite."""
    column_in(losses, "step", 0, 2**62, where, integer=True, nan=False)
    column_in(losses, "tokens", 0, 2**62, where, nan=False)
    column_in(losses, "value", *ANY, where, nan=False)
