"""The result contract: tidy columns, provenance, and the result folders on disk (results.csv/.parquet,
matrices.csv/.parquet, agreement.csv/.parquet, provenance.json; a run's metrics.jsonl).

Writes are all-or-nothing: every file goes to a temporary folder next to DIR first and is then renamed
into place (fileio.publish), so an interrupted run never leaves a half-written result; in an existing DIR
only the files of an earlier result (its manifest) are replaced or removed, every other file stays.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tlm_probe.environment import machine, versions
from tlm_probe.errors import UserError
from tlm_probe.files.bounded import read_bounded
from tlm_probe.files.content_hash import content_hash
from tlm_probe.files.fileio import publish, temp_folder
from tlm_probe.files.jsonfile import loads_bounded, read_json_object
from tlm_probe.files.tablefile import SUFFIXES, numeric_columns, read_table_file
from tlm_probe.result_checks import check_layers_of, check_probe_table
from tlm_probe.result_files import AGREEMENT, MATRICES, PROVENANCE, RESULTS

# the columns of every result table, in order; statistics may add columns after these
RESULT_COLUMNS = [
    "model", "layer", "depth", "statistic", "value", "ci_low", "ci_high", "n_tokens", "d_ff", "std"
]
MATRIX_COLUMNS = ["model", "layer_i", "layer_j", "statistic", "value"]
# one row per model and proxy: the Spearman rank agreement across layers of the proxy with the ablation
# effect (target), with its 95% CI over n_layers; a per-model number, so not a row of the per-layer table
AGREEMENT_COLUMNS = ["model", "statistic", "proxy", "target", "value", "ci_low", "ci_high", "n_layers"]
METRICS_FILE = "metrics.jsonl"
METRICS_MAX_BYTES = 256 * 2**20
"""The largest metrics.jsonl read (a line per logged step: a long run's is a few megabytes)."""
TRUST_FILES = ("trust.json", "trust.csv", "values.csv")
"""What every `tlm trust` folder holds (trust/engine.py writes them; halves.csv and task_target.csv when
asked): the summary, one row per statistic, and every corpus x layer x statistic value."""


def is_trust_folder(path: str | Path) -> bool:
    return all((Path(path) / name).is_file() for name in TRUST_FILES)


@dataclass
class ProbeResult:
    """One probe's tables and provenance; `path` is the folder it was read from (None: not written)."""

    table: pd.DataFrame
    matrices: pd.DataFrame | None
    provenance: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    agreement: pd.DataFrame | None = None
    """AGREEMENT_COLUMNS rows (--stats with spearman_*), None when none were asked or computed."""


def build_provenance(pm, opts, n_tokens: int, world: int, seconds: float,
                     data_sha256: str | None = None, device: str | None = None) -> dict:
    """`data_sha256`: of the token ids probed (probe/engine.py says how they are serialised); `device`:
    where the model computes (capture.dispatch.input_device), for the machine record."""
    import torch

    return {
        "model": pm.name,
        "model_path": str(pm.path.resolve()) if pm.path else pm.name,
        "content_hash": content_hash(pm.path),
        "architecture": {
            "family": pm.family,
            "model_type": pm.model_type,
            "block_kind": pm.block_kind,
            "n_layers": pm.n_layers,
            "d_ff": list(pm.d_ff),
            "d_model": pm.d_model,
            "vocab_size": pm.vocab_size,
            "is_causal": pm.is_causal,
            "adapter": pm.describe(),
        },
        "backend": opts.backend,
        "data": {
            "source": str(opts.data) if isinstance(opts.data, (str, Path)) else type(opts.data).__name__,
            "split": opts.split,
            "n_tokens": n_tokens,
            "sha256": data_sha256,
        },
        "threads": torch.get_num_threads(),  # the run's, after --threads set them
        "options": {k: v for k, v in asdict(opts).items() if k not in ("data",)},
        "world_size": world,
        "versions": versions(),
        "machine": machine(device),
        "seed": None,  # the probe draws no random numbers: the result is a function of model and data
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds, 3),
    }


def write_results(
    out: str | Path, table: pd.DataFrame, matrices: pd.DataFrame | None, provenance: dict,
    kind: str = "probe", agreement: pd.DataFrame | None = None,
) -> Path:
    """Write DIR/results.{csv,parquet}, DIR/matrices.{csv,parquet} and DIR/agreement.{csv,parquet} (if any)
    and DIR/provenance.json; `kind`: the command whose folder DIR is (probe or eval: neither replaces the
    other's results)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    with temp_folder(out) as tmp:
        _write_all(tmp, {RESULTS: table, MATRICES: matrices, AGREEMENT: agreement}, provenance)
        publish(tmp, out, kind)  # matrices of an earlier run with other stats go; other files stay
    return out


def write_probe(out: str | Path, res: ProbeResult) -> Path:
    """Every table of a probe (results, matrices, agreement) and its provenance into the folder `out`."""
    return write_results(out, res.table, res.matrices, res.provenance, agreement=res.agreement)


def _write_all(folder: Path, tables: dict[str, pd.DataFrame | None], provenance) -> None:
    for stem, frame in tables.items():
        if frame is not None and (stem == RESULTS or len(frame)):
            frame.to_csv(folder / f"{stem}.csv", index=False)
            frame.to_parquet(folder / f"{stem}.parquet", index=False)
    (folder / PROVENANCE).write_text(json.dumps(provenance, indent=2, default=str) + "\n")


READERS = SUFFIXES  # the table formats of a result folder, preferred first
NUMERIC = ("layer", "depth", "value", "ci_low", "ci_high", "n_tokens", "d_ff", "layer_i", "layer_j",
           "n_layers")
_REQUIRED = {RESULTS: ("model", "layer", "statistic", "value"), MATRICES: ("model", "statistic", "value"),
            AGREEMENT: ("model", "statistic", "value")}


def _read_file(path: Path, stem: str) -> pd.DataFrame:
    """One table file, checked: an empty, corrupt or non-numeric file is one UserError naming it."""
    df = read_table_file(path)  # bounded: size, and what a Parquet footer declares
    return _checked_table(df, stem, path, f"{path} is not a tlm {stem} table")


def _checked_table(df: pd.DataFrame, stem: str, where: Path, what: str) -> pd.DataFrame:
    """`df` checked as a `stem` table, read from a file or held in memory: its columns (`what`: the
    refusal's words), its numbers (made numeric in place), ranges, finiteness and rows."""
    missing = [c for c in _REQUIRED[stem] if c not in df.columns]
    if missing:
        raise UserError(f"{what}: no column {missing[0]!r}")
    numeric_columns(df, where, [c for c in NUMERIC if c in df.columns])
    check_probe_table(stem, df, where)  # ranges, finiteness, rows (result_checks.py)
    return df


def _read_table(folder: Path, stem: str) -> pd.DataFrame | None:
    for suffix in READERS:
        if (folder / f"{stem}{suffix}").is_file():
            return _read_file(folder / f"{stem}{suffix}", stem)
    return None


def read_results(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """(results, matrices or None, provenance) from a result folder or one of its results files."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if path.is_file() and path.suffix in READERS:
        table = _read_file(path, RESULTS)
    else:
        table = _read_table(folder, RESULTS)
    if table is None:
        raise UserError(f"no results.csv or results.parquet in {folder}")
    prov_path = folder / PROVENANCE
    prov = read_json_object(prov_path) if prov_path.is_file() else {}
    per_layer = table["layer"] >= 0  # a folder written before agreement.csv kept those rows as layer -1
    check_layers_of(table[per_layer], prov, path)
    if not per_layer.all():
        table = table[per_layer].reset_index(drop=True)
    return table, _read_table(folder, MATRICES), prov


def checked_in_memory(given, label: str) -> ProbeResult:
    """A probe held in memory (tp.probe's table, with its provenance in attrs, or a ProbeResult), checked
    as its results file would be (columns, numbers, ranges, layers): for a figure drawn from it. `label`
    names it in a refusal and stands for its folder (two tables of one model stay two lines)."""
    where = Path(label)
    if isinstance(given, ProbeResult):
        table, matrices, provenance = given.table, given.matrices, given.provenance
    elif isinstance(given, pd.DataFrame):
        table, matrices, provenance = given, None, given.attrs.get("provenance") or {}
    else:
        raise UserError(f"{label}: a probe result is a folder, a tp.probe table or a ProbeResult, not "
                        f"{type(given).__name__}")
    table = _checked_table(table.copy(), RESULTS, where, f"{label} is not a probe table (tp.probe's)")
    check_layers_of(table, provenance, where)
    if matrices is not None:
        matrices = _checked_table(matrices.copy(), MATRICES, where, f"{label}'s matrices are not tlm's")
    return ProbeResult(table, matrices, provenance, where)


def read_agreement(path: str | Path) -> pd.DataFrame | None:
    """The agreement table of a result folder (or of the folder of one of its files), None without one;
    a folder written before agreement.csv existed has its rows as layer -1 of results.csv: those."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    found = _read_table(folder, AGREEMENT)
    if found is not None:
        return found
    table = _read_table(folder, RESULTS)
    old = table[table["layer"] < 0] if table is not None else None
    if old is None or old.empty:
        return None
    prov = read_json_object(folder / PROVENANCE) if (folder / PROVENANCE).is_file() else {}
    return legacy_agreement(old, prov)


def legacy_agreement(rows: pd.DataFrame, provenance: dict) -> pd.DataFrame:
    """Layer -1 rows of an old results table as AGREEMENT_COLUMNS (n_tokens held the number of layers)."""
    target = (provenance.get("importance") or {}).get("agreement_target")
    out = rows.assign(proxy=rows["statistic"].str.removeprefix("spearman_"), target=target,
                      n_layers=rows["n_tokens"])
    extra = [c for c in ("step",) if c in out]
    return out[AGREEMENT_COLUMNS + extra].reset_index(drop=True)


def read_metrics(run: str | Path) -> list[dict]:
    """A run folder's metrics.jsonl, one dict per line ([] if there is none); a bad line is a UserError
    naming it. A last line cut short (no newline, not JSON) is left out: the writer was killed mid-line,
    or is still writing it."""
    return [rec for _, rec in metrics_lines(Path(run) / METRICS_FILE)]


def metrics_lines(path: Path) -> list[tuple[str, dict]]:
    """(text, record) of each line of a metrics.jsonl; every record is a JSON object with an integer
    "step" (what resume, plots and reports rely on)."""
    if not path.is_file():
        return []
    raw = read_bounded(path, METRICS_MAX_BYTES, f"a {METRICS_FILE}")
    lines = raw.split(b"\n")
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(_metrics_record(line, f"{path}:{number}"))
        except UserError:
            if number == len(lines) and not raw.endswith(b"\n"):  # torn last line
                break
            raise
    return out


def _metrics_record(line: bytes, where: str) -> tuple[str, dict]:
    rec = loads_bounded(line, where)  # the one bounded JSON parser: UTF-8, nesting depth
    if not isinstance(rec, dict):
        raise UserError(f"{where} is not a JSON object (it holds a {type(rec).__name__})")
    step = rec.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise UserError(f"{where} has no integer 'step' (found {step!r})")
    return line.decode("utf-8"), rec
