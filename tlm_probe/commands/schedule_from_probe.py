"""`tlm schedule --from-probe PROBE_DIR --statistic NAME`: a schedule file from a probe's per-layer statistic
(PROBE_DIR may be a `tlm trust` folder: the mean over its corpora; commands/schedule_trust.py).

The arithmetic is schedules/rules.py; this reads the probe folder, picks one model's per-layer values,
and writes the schedule file (JSON, format tlm-schedule) that `tlm train/compare/sweep --schedule FILE`
read. The file records its source: the probe folder, the sha256 of its results file, the probed model and
its content hash, the statistic, the rule, the per-layer values and the ratios before rounding.

The probe table is input like any other, not trusted: no per-layer row, a layer beyond MAX_LAYERS, a
layer with no value, a statistic that gives no layer a positive weight under the rule, or a width beyond
MAX_WIDTH is one UserError, and nothing is written. derive_from_probe does every check and returns the
schedule without writing it, so that the command can also build the model it describes before it writes.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.content_hash import hash_files
from tlm_probe.files.fileio import atomic_write_text
from tlm_probe.files.jsonfile import read_json
from tlm_probe.schedules.options import MAX_LAYERS, MAX_WIDTH, FromProbeOptions
from tlm_probe.schedules.rules import Rule, check_rule, weights, widths_from_statistic
from tlm_probe.schedules.widths import FILE, SCHEDULE_FORMAT, ScheduleSpec, schedule_file_dict


def check_schedule_out(out: Path | None) -> Path:
    """--out must be a .json path in an existing folder, new or a schedule file (ours to replace)."""
    if out is None:
        raise UserError("--from-probe writes a schedule file: give --out FILE.json")
    if out.suffix != ".json":
        raise UserError(f"--out {out} must end in .json (a schedule file)")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: no folder {out.parent}")
    if out.exists():
        try:
            doc = read_json(out)  # bounded: a huge, deep or endless file is not a schedule file either
        except UserError:
            doc = None
        ours = isinstance(doc, dict) and doc.get("format") == SCHEDULE_FORMAT
        if not ours:
            raise UserError(f"--out {out} exists and is not a schedule file; refusing to replace it")
    return out


def _results_file(folder: Path) -> Path:
    for name in ("results.parquet", "results.csv"):
        if (folder / name).is_file():
            return folder / name
    raise UserError(f"no results.csv or results.parquet in {folder}")


def _one_model(table, model: str | None, where: Path):
    per_layer = table[table["layer"] >= 0]
    models = list(dict.fromkeys(per_layer["model"].astype(str)))
    if not models:
        raise UserError(f"the probe in {where} holds no per-layer row (an empty results table?)")
    if model is None and len(models) > 1:
        raise UserError(f"the probe holds {len(models)} models ({', '.join(models)}); choose one: --model")
    model = model or models[0]
    if model not in models:
        raise UserError(f"no model {model!r} in the probe; it holds: {', '.join(models)}")
    return model, per_layer[per_layer["model"].astype(str) == model]


def _listed(items: list[int], most: int = 5) -> str:
    return ", ".join(map(str, items[:most])) + (f", ... ({len(items)} in all)" if len(items) > most else "")


def per_layer_values(table, statistic: str, model: str | None,
                     where: Path = Path(".")) -> tuple[str, list[float], list[int]]:
    """(model, the statistic's value at each layer 0..L-1, the probed widths); refused unless every layer
    0..L-1 has a value and L <= MAX_LAYERS."""
    model, rows = _one_model(table, model, where)
    stats = sorted(set(rows["statistic"].astype(str)))
    if statistic not in stats:
        has = f"it has: {', '.join(stats)}" if stats else "it has no per-layer statistic at all"
        raise UserError(f"statistic {statistic!r} is not in the probe {where}; {has} (probe again with "
                        f"--stats {statistic})")
    layer = rows["layer"]
    if (layer % 1 != 0).any():
        bad = layer[layer % 1 != 0].iloc[0]
        raise UserError(f"the probe table in {where} has a non-integer layer ({bad})")
    top = int(layer.max())
    if top >= MAX_LAYERS:  # before a table of `top` rows is made: a corrupt row must not cost memory or time
        raise UserError(f"the probe table in {where} has a row at layer {top:,}: more than {MAX_LAYERS:,} "
                        "layers is no probed model's; check the table")
    layers = range(top + 1)
    values = rows[rows["statistic"].astype(str) == statistic].groupby("layer")["value"].mean().reindex(layers)
    missing = [int(i) for i in values.index[values.isna()]]
    if missing:
        raise UserError(f"statistic {statistic!r} has no value at layer(s) {_listed(missing)} of the "
                        f"{len(layers)} layers in {where}; a schedule needs one at every layer")
    widths = rows.groupby("layer")["d_ff"].first().reindex(layers) if "d_ff" in rows else None
    probed = [] if widths is None or widths.isna().any() else [int(w) for w in widths]
    return model, [float(v) for v in values], probed


def _budget(probed: list[int], d_ff: int | None) -> int:
    if d_ff is None:
        if not probed or sum(probed) % len(probed):
            raise UserError("the probe does not give the model's mean MLP width as an integer; pass --d-ff")
        d_ff = sum(probed) // len(probed)
        if not 1 <= d_ff <= MAX_WIDTH:
            raise UserError(f"the probe's mean MLP width {d_ff:,} is outside 1..{MAX_WIDTH:,}: no real "
                            "model's; check its d_ff column, or pass --d-ff")
    if not 1 <= d_ff <= MAX_WIDTH:
        raise UserError(f"--d-ff must be in 1..{MAX_WIDTH:,}, got {d_ff:,}")
    return d_ff


def _check_weights(values: list[float], statistic: str, rule: Rule) -> None:
    """Refuse a statistic that gives every layer weight 0 (it would pass for a uniform schedule derived
    from the probe) or a weight too large for a float."""
    w = weights(values, rule)  # refuses a missing or non-finite value
    if not all(math.isfinite(x) for x in w):
        raise UserError(f"--statistic {statistic}: a weight max(0, f(x))^{rule.power:g} overflows a float; "
                        "lower --power")
    if not any(w):
        raise UserError(f"--statistic {statistic} gives no layer a positive weight under --rule "
                        f"{rule.transform} (max(0, f(x)) is 0 at all {len(values)} layers): nothing to share "
                        "the budget by; choose a rule for which it is positive somewhere (e.g. -x or abs)")


@dataclass(frozen=True)
class Derived:
    """A schedule derived from a probe, checked and not yet written: the file's JSON object and the spec
    that reading the file back gives (read_schedule_file)."""

    out: Path
    data: dict

    @property
    def n_layers(self) -> int:
        return self.data["n_layers"]

    @property
    def d_ff(self) -> int:
        return self.data["d_ff"]

    @property
    def spec(self) -> ScheduleSpec:
        d = self.data
        source = {"file": str(self.out), "n_layers": d["n_layers"], "d_ff": d["d_ff"], **d["source"]}
        return ScheduleSpec(name=FILE, widths=tuple(d["widths"]), multiple_of=d["multiple_of"], source=source)

    def write(self) -> Path:
        check_schedule_out(self.out)  # again: the check and the write are apart in time
        atomic_write_text(self.out, json.dumps(self.data, indent=2) + "\n")
        return self.out


def _read_source(folder: Path):
    """(table, provenance, the file its hash is of) of a probe folder, or of a `tlm trust` folder (its
    values' mean over corpora, commands/schedule_trust.py)."""
    from tlm_probe.commands.schedule_trust import trust_as_probe
    from tlm_probe.results import is_trust_folder, read_results

    if is_trust_folder(folder):
        return (*trust_as_probe(folder), folder / "values.csv")
    table, _, prov = read_results(folder)
    return table, prov, _results_file(folder)


def derive_from_probe(opts: FromProbeOptions, d_ff: int | None = None,
                      multiple_of: int = ScheduleSpec.multiple_of) -> Derived:
    """The schedule file of `opts` with budget d_ff per layer (None: the probed model's mean width), every
    input checked; nothing is written."""
    if opts.from_probe is None:
        raise UserError("derive_from_probe needs a probe folder (from_probe=)")
    probe_dir = Path(opts.from_probe)
    out = check_schedule_out(opts.out)
    rule = opts.how
    table, prov, results = _read_source(probe_dir)
    model, values, probed = per_layer_values(table, opts.statistic, opts.model, probe_dir)
    check_rule(rule, len(values))
    _check_weights(values, opts.statistic, rule)
    d_ff = _budget(probed, d_ff)
    widths, ratios = widths_from_statistic(values, d_ff, multiple_of, rule)
    source = {
        "kind": "from-probe", "probe_dir": str(probe_dir.resolve()),
        "probe_hash": hash_files([results]), "model": model,
        "model_hash": prov.get("content_hash"), "n_tokens": (prov.get("data") or {}).get("n_tokens"),
        "statistic": opts.statistic, "rule": rule.to_dict(), "values": values, "probed_d_ff": probed,
        "ratios": ratios,
        "probed_model": {k: (prov.get("architecture") or {}).get(k) for k in ("d_model", "vocab_size")},
        "tokens": _tokens_read(prov),
    }
    return Derived(out, schedule_file_dict(widths, d_ff, multiple_of, source))


def check_stability(derived: Derived, opts: FromProbeOptions, budget: int | None, unit: int) -> Derived:
    """Derive the same schedule from --check-with (a probe on disjoint tokens) and compare the widths in
    rounding units; refused (nothing written) beyond --max-unstable unless --allow-unstable. The result is
    recorded in the schedule file and printed either way."""
    import dataclasses

    if Path(opts.check_with).resolve() == Path(opts.from_probe).resolve():
        raise UserError(f"--check-with {opts.check_with} is the --from-probe folder itself: a stability "
                        "check needs a second probe on disjoint tokens (tlm probe --half b)")
    other = derive_from_probe(dataclasses.replace(opts, from_probe=opts.check_with, check_with=None),
                              budget, unit)
    _check_not_vacuous(derived.data["source"], other.data["source"], opts)
    a, b = derived.data["widths"], other.data["widths"]
    if len(a) != len(b):
        raise UserError(f"--check-with {opts.check_with} has {len(b)} layers, --from-probe {len(a)}")
    units = max(abs(x - y) for x, y in zip(a, b, strict=True)) / unit
    moved = sum(x != y for x, y in zip(a, b, strict=True))
    stable = units <= opts.max_unstable
    say = (f"stability: the widths from {opts.from_probe} and {opts.check_with} differ by at most "
           f"{units:g} rounding unit(s) of {unit} ({moved} of {len(a)} layers move): "
           f"{'stable' if stable else 'NOT stable'} (limit {opts.max_unstable})")
    print(say, file=sys.stderr)
    if not stable and not opts.allow_unstable:
        raise UserError(f"the schedule is not stable across the two probes ({units:g} > {opts.max_unstable} "
                        "rounding units): nothing written; probe more tokens, choose a gentler rule "
                        "(--power 0.5, narrower --min-ratio/--max-ratio), or pass --allow-unstable")
    source = {**derived.data["source"], "stability": {"check_with": str(opts.check_with), "widths_check": b,
                                                      "max_diff_units": units, "layers_moved": moved,
                                                      "stable": stable, "limit_units": opts.max_unstable}}
    return dataclasses.replace(derived, data={**derived.data, "source": source})


def _tokens_read(prov: dict) -> dict:
    """Which tokens a probe read (its provenance): the source, the split and the half (a | b | "")."""
    data, options = prov.get("data") or {}, prov.get("options") or {}
    return {"source": data.get("source"), "split": data.get("split"), "half": options.get("half") or ""}


def _check_not_vacuous(a: dict, b: dict, opts: FromProbeOptions) -> None:
    """Two probes that make the stability check vacuous are refused (issue 49): another model (the content
    hashes both provenances record differ), or the same tokens (the same half of the same source and split,
    or both of all of it)."""
    if a.get("model_hash") and b.get("model_hash") and a["model_hash"] != b["model_hash"]:
        raise UserError(f"--check-with {opts.check_with} probed another model than --from-probe "
                        f"{opts.from_probe} (weights hash {b['model_hash'][:12]} vs {a['model_hash'][:12]}): "
                        "a stability check compares two probes of one model")
    ta, tb = a.get("tokens") or {}, b.get("tokens") or {}
    if ta and ta == tb and ta.get("source") is not None:
        half = f"half {ta['half']!r} of " if ta["half"] else ""
        raise UserError(f"--check-with {opts.check_with} and --from-probe {opts.from_probe} both probed "
                        f"{half}{ta['source']} ({ta['split']} split): the same tokens agree by construction; "
                        "probe the other half (tlm probe --half a / --half b) or another split")


