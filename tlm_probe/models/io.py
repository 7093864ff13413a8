"""Checkpoint folders: config.json (model_type "tlm") + model.safetensors (+ tokenizer files).

Weights are only ever read from safetensors. Pickle files (.bin/.pt/.pth) are refused unless the caller
passes allow_pickle=True, because unpickling runs arbitrary code.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.config_file import CONFIG, read_config_json
from tlm_probe.models.tlm import TaperedLM

WEIGHTS = "model.safetensors"
PICKLE_WEIGHTS = ("pytorch_model.bin", "model.pt", "model.pth", "model.bin")


def atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def save_tlm(model: TaperedLM, folder: str | Path) -> Path:
    """Write config.json and model.safetensors, each atomically (temporary file + rename)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".model.", suffix=".safetensors")
    os.close(fd)
    save_model(model, tmp, metadata={"format": "pt", "model_type": "tlm"})  # drops tied duplicates
    os.replace(tmp, folder / WEIGHTS)
    atomic_write_text(folder / CONFIG, json.dumps(model.cfg.to_dict(), indent=2) + "\n")
    return folder


def weights_path(folder: Path, allow_pickle: bool = False) -> Path:
    """The safetensors file of a folder; pickle-only folders are refused unless allow_pickle."""
    if (folder / WEIGHTS).is_file():
        return folder / WEIGHTS
    pickles = [folder / p for p in PICKLE_WEIGHTS if (folder / p).is_file()]
    if pickles and not allow_pickle:
        raise UserError(
            f"{folder} has only pickle weights ({pickles[0].name}); refusing to unpickle "
            "(pass --unsafe-pickle if you trust this file)"
        )
    if pickles:
        return pickles[0]
    raise UserError(f"no model.safetensors in {folder}")


def load_tlm(folder: str | Path, device: str = "cpu", allow_pickle: bool = False) -> TaperedLM:
    folder = Path(folder)
    raw = read_config_json(folder)
    if raw.get("model_type") != "tlm":
        raise UserError(f"{folder} holds a {raw.get('model_type')!r} model, not a tlm checkpoint")
    cfg = TLMConfig.from_dict(raw)
    model = TaperedLM(cfg)
    path = weights_path(folder, allow_pickle)
    try:
        if path.suffix == ".safetensors":
            missing, unexpected = load_model(model, path, strict=True, device=device)
        else:
            model.load_state_dict(torch.load(path, map_location=device, weights_only=False))
    except Exception as e:  # safetensors raises several types for truncated or mismatched files
        raise UserError(f"cannot load weights from {path}: {str(e).splitlines()[0]}") from e
    return model.to(device).eval()
