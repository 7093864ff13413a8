"""Probe a training run's kept checkpoints (`tlm probe RUN --checkpoints all|STEPS`) into one tidy table.

RUN/state/step_NNNNNNN/ holds each kept checkpoint's weights (train/checkpoint.py); the run folder holds
config.json and the tokenizer. Each checkpoint is probed as a checkpoint folder made of links: the run's
files (config, tokenizer) and that step's model.safetensors, in a temporary folder that goes afterwards.
Every row gets a `step` column (and `tokens`, the training tokens seen at that step); the `model` column is
the run's name, so a figure overlays steps of one model. Only the checkpoints training kept are there
(`tlm train --keep-last N --ckpt-interval K` decides which).
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

from tlm_probe.errors import UserError
from tlm_probe.files.content_hash import WEIGHT_SUFFIXES
from tlm_probe.files.jsonfile import read_json_object
from tlm_probe.results import ProbeResult

STEP_PREFIX = "step_"


def kept_steps(run: Path) -> dict[int, Path]:
    """step -> its checkpoint folder, for every complete checkpoint of RUN (state/step_*/ with weights)."""
    root = run / "state"
    out = {}
    for p in sorted(root.iterdir()) if root.is_dir() else []:
        digits = p.name.removeprefix(STEP_PREFIX)
        complete = p.is_dir() and (p / "model.safetensors").is_file()  # temporaries are named .tmp-*
        if complete and p.name.startswith(STEP_PREFIX) and digits.isdigit():
            out[int(digits)] = p
    return out


def select_steps(run: str | Path, spec: str) -> list[tuple[int, Path]]:
    """'all' or 'S1,S2,...' -> [(step, folder)], checked against what RUN kept (before any probing)."""
    run = Path(run)
    if not (run / "config.json").is_file():
        raise UserError(f"--checkpoints needs a training run folder (config.json, state/); {run} is not one")
    from tlm_probe.models.config_file import read_config_json

    if read_config_json(run).get("model_type") != "tlm":
        raise UserError(f"--checkpoints probes runs of `tlm train`; {run} holds another kind of model")
    kept = kept_steps(run)
    if not kept:
        raise UserError(f"{run} kept no checkpoints (no state/step_*/model.safetensors)")
    if spec.strip() == "all":
        return sorted(kept.items())
    try:
        steps = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--checkpoints must be 'all' or comma-separated steps, got {spec!r}") from None
    missing = [s for s in steps if s not in kept]
    if missing or not steps:
        raise UserError(f"{run} kept no checkpoint at step(s) {', '.join(map(str, missing)) or spec!r}; "
                        f"kept: {', '.join(map(str, sorted(kept)))}")
    return [(s, kept[s]) for s in dict.fromkeys(steps)]


def _linked_checkpoint(run: Path, step_dir: Path, tmp: Path) -> Path:
    """A checkpoint folder of links: the run's non-weight files, and the step's weights."""
    for f in run.iterdir():
        if f.is_file() and f.suffix not in WEIGHT_SUFFIXES and f.name != "metrics.jsonl":
            (tmp / f.name).symlink_to(f.resolve())
    (tmp / "model.safetensors").symlink_to((step_dir / "model.safetensors").resolve())
    return tmp


def _tokens(step_dir: Path) -> int | None:
    """The training tokens a checkpoint's state.json records (None: no state.json, or no count in it); a
    state.json that is not JSON, too big or too deep is one UserError naming it (the bounded reader)."""
    path = step_dir / "state.json"
    if not path.is_file():
        return None
    tokens = read_json_object(path).get("tokens")
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def _tag(df: pd.DataFrame | None, name: str, step: int, tokens: int | None) -> pd.DataFrame | None:
    if df is None:
        return None
    return df.assign(model=name, step=step, tokens=tokens)


def probe_checkpoints(run: str | Path, steps: list[tuple[int, Path]], opts, run_probe, **kw) -> ProbeResult:
    """Probe each (step, folder) with `run_probe(model_folder, opts, **kw)`; one table, rows tagged."""
    run = Path(run)
    name = run.resolve().name
    tables, mats, agreements, provs = [], [], [], []
    seen = {step: _tokens(folder) for step, folder in steps}  # each state.json read before any probe
    for step, folder in steps:
        with tempfile.TemporaryDirectory(prefix="tlm-ckpt-") as tmp:
            res = run_probe(str(_linked_checkpoint(run, folder, Path(tmp))), replace(opts), **kw)
        tokens = seen[step]
        tables.append(_tag(res.table, name, step, tokens))
        mats.append(_tag(res.matrices, name, step, tokens))
        agreements.append(_tag(res.agreement, name, step, tokens))
        provs.append({"step": step, "tokens": tokens, "checkpoint": str(folder.resolve()),
                      "content_hash": res.provenance.get("content_hash")})
    prov = {**res.provenance, "model": name, "model_path": str(run.resolve()), "content_hash": None,
            "checkpoints": provs}
    mats = [m for m in mats if m is not None]
    agreements = [a for a in agreements if a is not None]
    return ProbeResult(pd.concat(tables, ignore_index=True),
                       pd.concat(mats, ignore_index=True) if mats else None, prov,
                       agreement=pd.concat(agreements, ignore_index=True) if agreements else None)
