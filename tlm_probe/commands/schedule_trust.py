"""`tlm schedule --from-probe` and a `tlm trust` folder: the folder as the probe, and the stability it tells.

A trust folder (trust.json, values.csv, halves.csv) holds a statistic's per-layer values on each corpus and
on each corpus's two disjoint halves (every other sequence). Given as --from-probe, the schedule derives
from the mean over corpora; given as --trust (or as --from-probe), the same rule derives the widths from
each corpus and from each half (pooled over corpora), and the schedule is refused, nothing written, when
two corpora or the two halves give widths further apart than --max-unstable rounding units (written with
a warning under --allow-unstable). The check and its widths are recorded in the schedule file.
"""

from __future__ import annotations

import dataclasses
import sys
from itertools import combinations
from pathlib import Path

import pandas as pd

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json_object
from tlm_probe.files.tablefile import numeric_columns, read_table_file
from tlm_probe.results import TRUST_FILES, is_trust_folder

VALUE_COLUMNS = ("layer", "statistic", "value")
HALVES = "halves.csv"


def _table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    df = read_table_file(path)  # bounded: size
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"{path} is not a tlm trust table: no column {missing[0]!r}")
    numeric_columns(df, path, ("layer", "value"))
    return df


def trust_as_probe(folder: Path) -> tuple[pd.DataFrame, dict]:
    """(a probe-like table: model, layer, statistic, value = the mean over corpora, d_ff; a provenance-like
    dict: content_hash, data.n_tokens, architecture) of a trust folder."""
    doc = read_json_object(folder / "trust.json")
    values = _table(folder / "values.csv", ("corpus", *VALUE_COLUMNS))
    table = values.groupby(["statistic", "layer"], as_index=False)["value"].mean()
    arch = doc.get("architecture") or {}
    d_ff = arch.get("d_ff")
    if isinstance(d_ff, list):
        table["d_ff"] = table["layer"].map(dict(enumerate(d_ff)))
    n_tokens = [n for n in (doc.get("n_tokens") or {}).values() if isinstance(n, int)]
    prov = {"content_hash": doc.get("content_hash"), "architecture": arch,
            "data": {"n_tokens": sum(n_tokens) if n_tokens else None}}
    return table.assign(model=str(doc.get("model") or folder.name)), prov


def _per_layer(rows: pd.DataFrame, n_layers: int, what: str, where: Path) -> list[float]:
    values = rows.groupby("layer")["value"].mean().reindex(range(n_layers))
    if values.isna().any():
        raise UserError(f"--trust {where}: {what} has no value at layer {int(values.index[values.isna()][0])}"
                        f" of {n_layers}")
    return [float(v) for v in values]


def variants(folder: Path, statistic: str, n_layers: int) -> dict[str, list[tuple[str, list[float]]]]:
    """{"corpora": [(corpus, values)], "halves": [("a", values pooled over corpora), ("b", ...)]}; a group
    is left out where the folder has fewer than two corpora, or no halves.csv."""
    values = _table(folder / "values.csv", ("corpus", *VALUE_COLUMNS))
    rows = values[values["statistic"].astype(str) == statistic]
    if rows.empty:
        raise UserError(f"--trust {folder} has no {statistic} values (tlm trust again with --stats "
                        f"{statistic})")
    groups = {}
    corpora = list(dict.fromkeys(rows["corpus"].astype(str)))
    if len(corpora) >= 2:
        groups["corpora"] = [(c, _per_layer(rows[rows["corpus"].astype(str) == c], n_layers, c, folder))
                             for c in corpora]
    if (folder / HALVES).is_file():
        halves = _table(folder / HALVES, ("corpus", "half", *VALUE_COLUMNS))
        halves = halves[halves["statistic"].astype(str) == statistic]
        # a half's value at a layer: the mean over corpora of that half (as the schedule's over corpora)
        pooled = halves.groupby(["half", "layer"], as_index=False)["value"].mean()
        found = sorted(set(pooled["half"].astype(str)))
        if found == ["a", "b"]:
            groups["halves"] = [(h, _per_layer(pooled[pooled["half"].astype(str) == h], n_layers,
                                               f"half {h}", folder)) for h in found]
    return groups


def _spread(widths: dict[str, list[int]], unit: int) -> tuple[float, int]:
    """(the largest width difference between any two, in rounding units; the layers where they differ)."""
    rows = list(widths.values())
    units = max(abs(x - y) / unit for a, b in combinations(rows, 2) for x, y in zip(a, b, strict=True))
    moved = sum(len(set(col)) > 1 for col in zip(*rows, strict=True))
    return units, moved


def _check_model(derived, doc: dict, folder: Path) -> None:
    ours, theirs = derived.data["source"].get("model_hash"), doc.get("content_hash")
    if ours and theirs and ours != theirs:
        raise UserError(f"--trust {folder} probed another model (content hash {theirs[:12]}, the probe's "
                        f"{ours[:12]}); run tlm trust on the probed model")


_WHAT = {"corpora": "the corpora", "halves": "the two halves of the tokens"}


def check_trust_stability(derived, opts, folder, unit: int):
    """The schedule's widths on each corpus and each half of `folder` (a trust folder), compared; refused
    beyond opts.max_unstable rounding units unless opts.allow_unstable (then a warning). Returns `derived`
    with the check recorded in its source."""
    from tlm_probe.schedules.rules import weights, widths_from_statistic

    folder = Path(folder)
    if not is_trust_folder(folder):
        raise UserError(f"--trust {folder} is not a tlm trust folder (no {', '.join(TRUST_FILES)})")
    _check_model(derived, read_json_object(folder / "trust.json"), folder)
    stat, rule = opts.statistic, opts.how
    record, unstable = {"trust_dir": str(folder.resolve()), "limit_units": opts.max_unstable}, []
    groups = variants(folder, stat, derived.n_layers)
    for group, found in groups.items():
        for label, values in found:  # the main values passed schedule_from_probe._check_weights
            if not any(weights(values, rule)):
                raise UserError(f"--statistic {stat} gives no layer a positive weight on {label} of --trust "
                                f"{folder}: no schedule to compare with")
        widths = {label: widths_from_statistic(v, derived.d_ff, unit, rule)[0] for label, v in found}
        units, moved = _spread(widths, unit)
        stable = units <= opts.max_unstable
        print(f"stability of {stat} across {_WHAT[group]} ({', '.join(widths)}): widths differ by at most "
              f"{units:g} rounding unit(s) of {unit} ({moved} of {derived.n_layers} layers move): "
              f"{'stable' if stable else 'NOT stable'} (limit {opts.max_unstable})", file=sys.stderr)
        record[group] = {"widths": widths, "max_diff_units": units, "layers_moved": moved, "stable": stable}
        unstable += [] if stable else [f"{_WHAT[group]} ({units:g} rounding units apart)"]
    if not groups:
        print(f"stability: not checked: {folder} holds neither two corpora nor halves.csv", file=sys.stderr)
    if unstable and not opts.allow_unstable:
        raise UserError(f"the schedule from {stat} is not stable across {' and '.join(unstable)}, limit "
                        f"{opts.max_unstable}: nothing written; probe more tokens, choose a gentler rule or "
                        "another statistic, or pass --allow-unstable")
    if unstable:
        print(f"warning: writing a schedule that is not stable across {' and '.join(unstable)} "
              "(--allow-unstable)", file=sys.stderr)
    source = {**derived.data["source"], "trust_stability": record}
    return dataclasses.replace(derived, data={**derived.data, "source": source})
