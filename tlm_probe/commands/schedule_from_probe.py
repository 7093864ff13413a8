"""`tlm schedule --from-probe PROBE_DIR --statistic NAME`: a schedule file from a probe's per-layer statistic.

The arithmetic is schedules/rules.py; this reads the probe folder, picks one model's per-layer values,
and writes the schedule file (JSON, format tlm-schedule) that `tlm train/compare/sweep --schedule FILE`
read. The file records its source: the probe folder, the sha256 of its results file, the probed model and
its content hash, the statistic, the rule, the per-layer values and the ratios before rounding.
"""

from __future__ import annotations

import json
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.content_hash import hash_files
from tlm_probe.files.fileio import atomic_write_text
from tlm_probe.schedules.rules import Rule, check_rule, widths_from_statistic
from tlm_probe.schedules.widths import SCHEDULE_FORMAT, schedule_file_dict


def check_out(out: Path | None) -> Path:
    """--out must be a .json path in an existing folder, new or a schedule file (ours to replace)."""
    if out is None:
        raise UserError("--from-probe writes a schedule file: give --out FILE.json")
    if out.suffix != ".json":
        raise UserError(f"--out {out} must end in .json (a schedule file)")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: no folder {out.parent}")
    if out.exists():
        try:
            ours = json.loads(out.read_text()).get("format") == SCHEDULE_FORMAT
        except (OSError, ValueError, AttributeError):
            ours = False
        if not ours:
            raise UserError(f"--out {out} exists and is not a schedule file; refusing to replace it")
    return out


def _results_file(folder: Path) -> Path:
    for name in ("results.parquet", "results.csv"):
        if (folder / name).is_file():
            return folder / name
    raise UserError(f"no results.csv or results.parquet in {folder}")


def _one_model(table, model: str | None):
    models = list(dict.fromkeys(table["model"].astype(str)))
    if model is None and len(models) > 1:
        raise UserError(f"the probe holds {len(models)} models ({', '.join(models)}); choose one: --model")
    model = model or models[0]
    if model not in models:
        raise UserError(f"no model {model!r} in the probe; it holds: {', '.join(models)}")
    return model, table[(table["model"].astype(str) == model) & (table["layer"] >= 0)]


def per_layer_values(table, statistic: str, model: str | None) -> tuple[str, list[float], list[int]]:
    """(model, the statistic's value at each layer 0..L-1 (NaN where missing), the probed widths)."""
    model, rows = _one_model(table, model)
    stats = sorted(set(rows["statistic"]))
    if statistic not in stats:
        raise UserError(f"statistic {statistic!r} is not in the probe; it has: {', '.join(stats)}")
    n_layers = int(rows["layer"].max()) + 1
    layers = range(n_layers)
    values = rows[rows["statistic"] == statistic].groupby("layer")["value"].mean().reindex(layers)
    widths = rows.groupby("layer")["d_ff"].first().reindex(layers) if "d_ff" in rows else None
    probed = [] if widths is None or widths.isna().any() else [int(w) for w in widths]
    return model, [float(v) for v in values], probed


def _budget(probed: list[int], d_ff: int | None) -> int:
    if d_ff is not None:
        return d_ff
    if not probed or sum(probed) % len(probed):
        raise UserError("the probe does not give the model's mean MLP width as an integer; pass --d-ff")
    return sum(probed) // len(probed)


def write_from_probe(probe_dir: Path, statistic: str, rule: Rule, out: Path, d_ff: int | None,
                     multiple_of: int, model: str | None) -> tuple[Path, int, int]:
    """Write the schedule file; returns (path, n_layers, d_ff). Every input is checked before writing."""
    from tlm_probe.results import read_results

    out = check_out(out)
    table, _, prov = read_results(probe_dir)
    model, values, probed = per_layer_values(table, statistic, model)
    check_rule(rule, len(values))
    d_ff = _budget(probed, d_ff)
    widths, ratios = widths_from_statistic(values, d_ff, multiple_of, rule)
    source = {
        "kind": "from-probe", "probe_dir": str(Path(probe_dir).resolve()),
        "probe_hash": hash_files([_results_file(Path(probe_dir))]), "model": model,
        "model_hash": prov.get("content_hash"), "n_tokens": (prov.get("data") or {}).get("n_tokens"),
        "statistic": statistic, "rule": rule.to_dict(), "values": values, "probed_d_ff": probed,
        "ratios": ratios,
    }
    text = json.dumps(schedule_file_dict(widths, d_ff, multiple_of, source), indent=2) + "\n"
    atomic_write_text(out, text)
    return out, len(values), d_ff
