"""What a `tlm diff` or `tlm trust` folder read back must hold before a figure or a report draws it
(issue 49): types, ranges, finiteness and row counts (the checks themselves: files/value_checks.py), each
failure one UserError naming the file and the field. The files were read by the bounded readers (files/);
this checks what they hold, so that a NaN, a word where a number belongs, a layer at 10**6 or -1, or a
million rows is refused instead of drawn, crashed on, or allocated (a cka.csv row at layer 10**6 once asked
for a 7 TiB grid)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json
from tlm_probe.files.value_checks import MAX_PLOTTED_LAYERS, MAX_STATISTICS
from tlm_probe.files.value_checks import column_in as _column_in
from tlm_probe.files.value_checks import is_int as _int
from tlm_probe.files.value_checks import is_num as _num
from tlm_probe.files.value_checks import max_rows as _rows
from tlm_probe.files.value_checks import need as _need
from tlm_probe.files.value_checks import need_list as _list

if TYPE_CHECKING:  # pandas is not imported here: `tlm plot`/`report` check the JSON before importing it
    import pandas as pd

MAX_BUCKETS = 64
"""The most rows tokens.csv may hold (tlm diff writes 11 buckets, by position and by target count)."""
MAX_CORPORA = 256
"""The most corpora trust.json may name."""
CKA_SLACK = 1e-3
"""CKA is in [0, 1]; float64 sums land a few ulps outside."""
CKA_STATISTICS = ("cka_resid", "cka_mlp")


def check_diff_summary(s: dict, where: Path) -> tuple[int, int]:
    """diff.json's fields the figure and the report read; returns (layers of A, layers of B)."""
    for key in ("model_a", "model_b"):
        _need(isinstance(s.get(key), str), where, key, "a string", s.get(key))
    _need(_int(s.get("n_tokens"), 0, 2**62), where, "n_tokens", "an integer >= 0", s.get("n_tokens"))
    _list(s.get("n_layers"), 2, lambda x: _int(x, 1, MAX_PLOTTED_LAYERS + 1), where, "n_layers",
          f"an integer in 1..{MAX_PLOTTED_LAYERS}")
    n_a, n_b = s["n_layers"]
    for key in ("cka", "cka_mlp"):
        if key == "cka" or s.get(key) is not None:
            _list(s.get(key), n_a, lambda row: isinstance(row, list) and len(row) == n_b, where, key,
                  f"a list of {n_b} values")
            for i, row in enumerate(s[key]):
                _list(row, n_b, lambda x: _num(x, -CKA_SLACK, 1 + CKA_SLACK), where, f"{key}[{i}]",
                      "a CKA in [0, 1] or null")
    _list(s.get("best_match"), n_a, lambda x: x is None or _int(x, 0, n_b), where, "best_match",
          f"a layer of B (0..{n_b - 1}) or null")
    _list(s.get("drift"), n_a, lambda x: _num(x, 0.0), where, "drift", "a finite number >= 0 or null")
    if s.get("drift_layers_b") is not None:
        _list(s["drift_layers_b"], n_a, lambda x: _int(x, 0, n_b), where, "drift_layers_b",
              f"a layer of B (0..{n_b - 1})")
    for key in ("kl_mean", "dnll_mean"):
        _need(_num(s.get(key)), where, key, "a finite number or null", s.get(key))
    _need(isinstance(s.get("drift_pairing", ""), str), where, "drift_pairing", "a string",
          s.get("drift_pairing"))
    _need(isinstance(s.get("options", {}), dict), where, "options", "an object", s.get("options"))
    if s.get("stats") is not None:
        _check_stats(s["stats"], n_a, where)
    return n_a, n_b


def _check_stats(rows, n_a: int, where) -> None:
    _need(isinstance(rows, list) and len(rows) <= MAX_STATISTICS * n_a, where, "stats",
          f"a list of at most {MAX_STATISTICS * n_a} rows", type(rows).__name__)
    for i, r in enumerate(rows):
        _need(isinstance(r, dict) and isinstance(r.get("statistic"), str) and _int(r.get("layer"), 0, n_a),
              where, f"stats[{i}]", "an object with a statistic and a layer of A", r)
        for key in ("value_a", "value_b", "diff", "ci_low", "ci_high"):
            _need(_num(r.get(key)), where, f"stats[{i}].{key}", "a finite number or null", r.get(key))


def check_diff_tables(tables: dict[str, pd.DataFrame], n_a: int, n_b: int, folder: Path) -> None:
    """cka.csv, layers.csv and tokens.csv against diff.json's depths: layers in range, values finite."""
    cka, layers, tokens = tables["cka.csv"], tables["layers.csv"], tables["tokens.csv"]
    _rows(cka, len(CKA_STATISTICS) * n_a * n_b, folder / "cka.csv")
    _need(cka["statistic"].isin(CKA_STATISTICS).all(), folder / "cka.csv", "column 'statistic'",
          " or ".join(CKA_STATISTICS), next(iter(set(cka["statistic"]) - set(CKA_STATISTICS)), ""))
    for col, n in (("layer_i", n_a), ("layer_j", n_b)):
        _column_in(cka, col, 0, n - 1, folder / "cka.csv", integer=True, nan=False)
    _column_in(cka, "value", -CKA_SLACK, 1 + CKA_SLACK, folder / "cka.csv")
    _rows(layers, 3 * n_a, folder / "layers.csv")
    _column_in(layers, "layer", 0, n_a - 1, folder / "layers.csv", integer=True, nan=False)
    _column_in(layers, "depth", 0.0, 1.0, folder / "layers.csv", nan=False)
    _column_in(layers, "value", -math.inf, math.inf, folder / "layers.csv")
    _rows(tokens, MAX_BUCKETS, folder / "tokens.csv")
    for col in ("kl_mean", "dnll_mean"):
        _column_in(tokens, col, -math.inf, math.inf, folder / "tokens.csv")
    _column_in(tokens, "n", 0, 2**62, folder / "tokens.csv", integer=True, nan=False)


def read_diff_summary(folder: Path) -> dict:
    """diff.json of a `tlm diff` folder (bounded read), its fields checked."""
    summary = _summary(folder / "diff.json", "diff", ("model_a", "model_b", "n_tokens"))
    check_diff_summary(summary, folder / "diff.json")
    return summary


def read_trust_summary(folder: Path) -> dict:
    """trust.json of a `tlm trust` folder (bounded read), its fields checked."""
    summary = _summary(folder / "trust.json", "trust", ("corpora", "min_w", "min_spearman"))
    check_trust_summary(summary, folder)
    return summary


def _summary(where: Path, command: str, keys: tuple[str, ...]) -> dict:
    """The JSON object at `where` (bounded read), refused unless it holds `keys`."""
    summary = read_json(where)
    if not isinstance(summary, dict) or not set(keys) <= set(summary):
        raise UserError(f"{where} is not a tlm {command} summary (no {', '.join(keys)})")
    return summary


def check_trust_summary(s: dict, folder: Path) -> None:
    """trust.json's fields the figure and the report read."""
    where = folder / "trust.json"
    _need(isinstance(s["corpora"], list) and 0 < len(s["corpora"]) <= MAX_CORPORA
          and all(isinstance(c, str) for c in s["corpora"]), where, "corpora",
          f"a list of 1..{MAX_CORPORA} names", s["corpora"])
    for key in ("min_w", "min_spearman"):
        _need(_num(s[key], -1.0, 1.0, none=False), where, key, "a number in -1..1", s[key])
    model = s.get("model")
    _need(model is None or isinstance(model, str), where, "model", "a string", model)
    _need(s.get("n_tokens") is None or isinstance(s.get("n_tokens"), dict), where, "n_tokens",
          "an object", s.get("n_tokens"))
    for c, n in (s.get("n_tokens") or {}).items():
        _need(n is None or _int(n, 0, 2**62), where, f"n_tokens[{c!r}]", "an integer >= 0 or null", n)
    _check_task(s.get("task_target"), where)


def check_trust_table(table: pd.DataFrame, folder: Path) -> None:
    """trust.csv's rows: one per statistic, at most MAX_STATISTICS, agreements in range."""
    csv = folder / "trust.csv"
    _rows(table, MAX_STATISTICS, csv)
    _need(not table["statistic"].duplicated().any(), csv, "column 'statistic'", "one row per statistic",
          table["statistic"][table["statistic"].duplicated()].head(1).tolist())
    _column_in(table, "kendall_w", 0.0, 1.0, csv)
    for col in ("min_pairwise_spearman", "spearman_with_target", "spearman_with_task"):
        if col in table.columns:
            _column_in(table, col, -1.0, 1.0, csv)


def _check_task(task, where: Path) -> None:
    if task is None:
        return
    _need(isinstance(task, dict) and isinstance(task.get("statistic"), str)
          and isinstance(task.get("tasks", []), list), where, "task_target",
          "an object with a statistic and a list of tasks", task)
    for i, t in enumerate(task.get("tasks", [])):
        _need(isinstance(t, dict) and isinstance(t.get("task"), str) and _int(t.get("n"), 0, 2**62)
              and _num(t.get("acc_clean"), 0.0, 1.0, none=False), where, f"task_target.tasks[{i}]",
              "an object with task, n and acc_clean in 0..1", t)
