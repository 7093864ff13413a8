"""Result tables on disk: results.csv/.parquet, matrices.csv/.parquet and provenance.json (the contract).

Writes are all-or-nothing: every file goes to a temporary folder next to DIR first and is then renamed
into place, so an interrupted run never leaves a half-written result.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from tlm_probe.errors import UserError

RESULTS, MATRICES, PROVENANCE = "results", "matrices", "provenance.json"
OURS = {f"{stem}.{ext}" for stem in (RESULTS, MATRICES) for ext in ("csv", "parquet")} | {PROVENANCE}


def content_hash(folder: Path | None) -> str | None:
    """sha256 over the weight files of a checkpoint folder (names and bytes, sorted by name), or over one
    weight file (a .gguf)."""
    if folder is None or not Path(folder).exists():
        return None
    h = hashlib.sha256()
    weights = (".safetensors", ".bin", ".pt", ".pth")
    one = Path(folder).is_file()
    files = [Path(folder)] if one else sorted(p for p in Path(folder).iterdir() if p.suffix in weights)
    for p in files:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest() if files else None


def _versions() -> dict:
    import torch
    import transformers

    import tlm_probe

    return {
        "tlm_probe": getattr(tlm_probe, "__version__", "0.1.0"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def build_provenance(pm, opts, n_tokens: int, world: int, seconds: float) -> dict:
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
            "is_causal": pm.is_causal,
        },
        "backend": opts.backend,
        "data": {
            "source": str(opts.data) if isinstance(opts.data, (str, Path)) else type(opts.data).__name__,
            "split": opts.split,
            "n_tokens": n_tokens,
        },
        "options": {k: v for k, v in asdict(opts).items() if k not in ("data",)},
        "world_size": world,
        "versions": _versions(),
        "seed": None,  # the probe draws no random numbers: the result is a function of model and data
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds, 3),
    }


def write_results(
    out: str | Path, table: pd.DataFrame, matrices: pd.DataFrame | None, provenance: dict
) -> Path:
    """Write DIR/results.{csv,parquet}, DIR/matrices.{csv,parquet} (if any) and DIR/provenance.json."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        _write_all(tmp, table, matrices, provenance)
        if not out.exists():
            os.replace(tmp, out)
        else:  # keep other files in DIR; replace ours one atomic rename at a time
            written = {f.name for f in tmp.iterdir()}
            for name in written:
                os.replace(tmp / name, out / name)
            for stale in OURS - written:
                (out / stale).unlink(missing_ok=True)  # e.g. matrices from an earlier run with other stats
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _write_all(folder: Path, table, matrices, provenance) -> None:
    table.to_csv(folder / f"{RESULTS}.csv", index=False)
    table.to_parquet(folder / f"{RESULTS}.parquet", index=False)
    if matrices is not None and len(matrices):
        matrices.to_csv(folder / f"{MATRICES}.csv", index=False)
        matrices.to_parquet(folder / f"{MATRICES}.parquet", index=False)
    (folder / PROVENANCE).write_text(json.dumps(provenance, indent=2, default=str) + "\n")


def _read_table(folder: Path, stem: str) -> pd.DataFrame | None:
    for suffix, reader in ((".parquet", pd.read_parquet), (".csv", pd.read_csv)):
        if (folder / f"{stem}{suffix}").is_file():
            return reader(folder / f"{stem}{suffix}")
    return None


def read_results(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """(results, matrices or None, provenance) from a result folder or one of its results files."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if path.is_file() and path.suffix in (".csv", ".parquet"):
        table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    else:
        table = _read_table(folder, RESULTS)
    if table is None:
        raise UserError(f"no results.csv or results.parquet in {folder}")
    prov_path = folder / PROVENANCE
    try:
        prov = json.loads(prov_path.read_text()) if prov_path.is_file() else {}
    except json.JSONDecodeError as e:
        raise UserError(f"corrupt {prov_path}: {e}") from e
    return table, _read_table(folder, MATRICES), prov
