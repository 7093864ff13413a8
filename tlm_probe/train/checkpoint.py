"""Resumable training state, written atomically and pruned to the last k.

RUN/state/step_NNNNNNN/ holds model.safetensors (weights), trainer.pt (optimizer state, torch RNG
states and any other training state, e.g. accumulated gradients of slow continuum-memory levels under
"extra": tensors and plain containers only, so torch.load(weights_only=True) reads it) and state.json
(step, tokens, Python and NumPy RNG states). Each folder is written under a temporary name and renamed
into place, so a crash mid-write leaves the previous checkpoint intact; the newest complete folder wins.
The data position needs no saving: the batch order is a function of the step (data.stream.BatchOrder).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from tlm_probe.errors import UserError
from tlm_probe.files.fileio import follow_umask, replace_entry, temp_folder
from tlm_probe.files.jsonfile import int_field, read_json_object

STATE_DIR = "state"
PREFIX = "step_"


@dataclass
class Restored:
    step: int
    tokens: int
    folder: Path
    extra: dict
    """Further training state saved with the checkpoint ({} when none)."""


def step_folders(run: Path) -> list[Path]:
    root = run / STATE_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX))


def rng_state() -> tuple[dict, dict]:
    """(tensors for trainer.pt, JSON-able states for state.json) of every RNG the run touches."""
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["torch_cuda"] = torch.cuda.get_rng_state_all()
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    py = random.getstate()
    plain = {"numpy": [kind, keys.tolist(), pos, has_gauss, gauss], "python": [py[0], list(py[1]), py[2]]}
    return tensors, plain


def set_rng_state(tensors: dict, plain: dict) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    if "torch_cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(tensors["torch_cuda"])
    kind, keys, pos, has_gauss, gauss = plain["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    v, state, g = plain["python"]
    random.setstate((v, tuple(state), g))


def save_state(
    run: Path, model_sd: dict, optim_sd: dict, step: int, tokens: int, keep_last: int,
    extra: dict | None = None,
) -> Path:
    """Write RUN/state/step_<step> atomically and keep only the newest `keep_last` folders. A full disk
    is one UserError; the partial folder is removed and the previous checkpoints stay. `extra`: trainer
    state beyond the optimizer (e.g. Hope's accumulated slow-level gradients)."""
    root = run / STATE_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:07d}"
    tensors, plain = rng_state()
    with temp_folder(final, need=nbytes(model_sd) + nbytes(optim_sd)) as tmp:
        _save_weights(model_sd, tmp / "model.safetensors")
        torch.save({"optimizer": optim_sd, "rng": tensors, "extra": extra or {}}, tmp / "trainer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, "tokens": tokens, "rng": plain}) + "\n")
        follow_umask(tmp)
        replace_entry(tmp, final)  # re-saving the same step (Ctrl-C right after a checkpoint) swaps it
    for stale in step_folders(run)[:-keep_last]:
        shutil.rmtree(stale)
    for crashed in [*root.glob(f".tmp-{PREFIX}*"), *root.glob(f".{PREFIX}*.tmp-*")]:  # never read
        shutil.rmtree(crashed, ignore_errors=True)
    return final


def nbytes(obj) -> int:
    """Bytes of every tensor in a (nested) state dict: the space a checkpoint of it needs."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v) for v in obj)
    return 0


def _save_weights(sd: dict, path: Path) -> None:
    # tied embeddings share storage; safetensors refuses shared tensors, and load_model re-ties them
    seen: dict[int, str] = {}
    out = {}
    for k, v in sd.items():
        ptr = v.untyped_storage().data_ptr()
        if ptr in seen and v.numel() > 0:  # empty tensors (d_l = 0 MLPs) all have data_ptr 0: not tied
            continue
        seen[ptr] = k
        out[k] = v.detach().contiguous().cpu()
    save_file(out, str(path), metadata={"format": "pt"})


def load_state(run: Path) -> tuple[dict, dict, Restored]:
    """(model state dict, optimizer state dict, step info) of the newest checkpoint of `run`; the RNG
    states are restored here, so call this last, right before the first resumed step."""
    folders = step_folders(run)
    if not folders:
        raise UserError(f"{run} has no training checkpoint to resume from (no {STATE_DIR}/{PREFIX}*)")
    folder = folders[-1]
    step, tokens, plain = read_step_info(folder)
    try:
        model_sd = load_file(str(folder / "model.safetensors"))
        blob = torch.load(folder / "trainer.pt", map_location="cpu", weights_only=True)
    except Exception as e:  # truncated or foreign files
        raise UserError(f"cannot read checkpoint {folder}: {str(e).splitlines()[0]}") from None
    if not isinstance(blob, dict) or not {"optimizer", "rng"} <= blob.keys():
        raise UserError(f"{folder / 'trainer.pt'} is not a tlm trainer state (no optimizer and rng)")
    try:
        set_rng_state(blob["rng"], plain)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"{folder / 'trainer.pt'} holds no valid RNG state ({e})") from None
    return model_sd, blob["optimizer"], Restored(step, tokens, folder, blob.get("extra", {}))


def read_step_info(folder: Path) -> tuple[int, int, dict]:
    """(step, tokens, Python and NumPy RNG states) from folder/state.json, each checked: a state.json
    edited or cut short is one UserError before the run touches anything. The RNG states are tried on
    private generators, so a malformed one fails here rather than half-way through restoring."""
    path = folder / "state.json"
    meta = read_json_object(path)
    step, tokens = int_field(meta, "step", path), int_field(meta, "tokens", path)
    plain = meta.get("rng")
    try:
        kind, keys, pos, has_gauss, gauss = plain["numpy"]
        np.random.RandomState().set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
        v, state, g = plain["python"]
        random.Random().setstate((v, tuple(state), g))
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        what = "no 'rng'" if plain is None else f"no valid RNG state ({type(e).__name__}: {e})"
        raise UserError(f"{path} holds {what}"[:300]) from None
    return step, tokens, plain


def check_state(run: Path, cfg) -> None:
    """Before a resume writes anything: the newest checkpoint's state.json is sound and its weights are
    exactly those of the run's model config (names and shapes, from the safetensors header alone)."""
    from tlm_probe.models.io import read_safetensors_header
    from tlm_probe.models.tlm import TaperedLM

    folder = step_folders(run)[-1]
    read_step_info(folder)
    path = folder / "model.safetensors"
    for name in ("model.safetensors", "trainer.pt"):
        if not (folder / name).is_file():
            raise UserError(f"checkpoint {folder} has no {name}")
    header = read_safetensors_header(path)
    with torch.device("meta"):
        model = TaperedLM(cfg)
    expected = {k: list(v.shape) for k, v in model.state_dict().items()}
    for name, info in header.items():
        if name not in expected:
            raise UserError(f"{path} holds {name!r}, which the run's model does not have")
        if list(info.get("shape", [])) != expected[name]:
            raise UserError(f"{path}: {name} has shape {info.get('shape')}, the run's config implies "
                            f"{expected[name]}")
    groups: dict[int, list[str]] = {}  # tied parameters: one tensor saved under one of its names
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    missing = [names[0] for names in groups.values() if not any(n in header for n in names)]
    if missing:
        raise UserError(f"{path} lacks {len(missing)} weight(s) of the run's model, e.g. {missing[0]}")
