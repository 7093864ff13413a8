"""Checkpoint folders: config.json (model_type "tlm") + model.safetensors (+ tokenizer files).

Weights are only ever read from safetensors. Pickle files (.bin/.pt/.pth) are refused unless the caller
passes unsafe_pickle=True (the CLI's --unsafe-pickle; allow_pickle= is its deprecated name), because
unpickling runs arbitrary code. Every check of a folder before loading
(config types, weights file, tensor names and shapes) is models/verify.py, shared with `tlm info` and
`tlm generate`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from tlm_probe.api_names import renamed_keywords
from tlm_probe.errors import UserError
from tlm_probe.files.fileio import atomic_path, atomic_write_text
from tlm_probe.models.config_file import CONFIG, read_config_json  # noqa: F401 (re-exported)
from tlm_probe.models.remote_code import hf_keys, write_code_file
from tlm_probe.models.safetensors_header import read_safetensors_header  # noqa: F401 (re-exported)
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.models.verify import (  # noqa: F401 (check_weights, weights_path: re-exported)
    PICKLE_WEIGHTS,
    WEIGHTS_FILE,
    check_weights,
    verify_checkpoint,
    weights_path,
)


def save_tlm(model: TaperedLM, folder: str | Path) -> Path:
    """Write model.safetensors, modeling_tlm.py and config.json (with the `auto_map` that names the code file:
    models/remote_code.py), each atomically (temporary file + rename)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    need = sum(p.numel() * p.element_size() for p in model.parameters())
    with atomic_path(folder / WEIGHTS_FILE, need) as tmp:
        save_model(model, str(tmp), metadata={"format": "pt", "model_type": "tlm"})  # drops tied copies
    write_code_file(folder)
    atomic_write_text(folder / CONFIG, json.dumps({**model.cfg.to_dict(), **hf_keys()}, indent=2) + "\n")
    return folder


@renamed_keywords(allow_pickle="unsafe_pickle")
def load_tlm(folder: str | Path, device: str = "cpu", unsafe_pickle: bool = False) -> TaperedLM:
    # config, weights file and every tensor's shape are checked before the model is allocated (a
    # config.json with vocab_size 10**10 is refused, not allocated); names the mismatching tensor, where
    # load_model's message is cut
    cfg, path = verify_checkpoint(Path(folder), unsafe_pickle)
    model = TaperedLM(cfg)
    try:
        if path.suffix == ".safetensors":
            missing, unexpected = load_model(model, path, strict=True, device=device)
        else:
            model.load_state_dict(torch.load(path, map_location=device, weights_only=False))
    except Exception as e:  # safetensors raises several types for truncated or mismatched files
        raise UserError(f"cannot load weights from {path}: {str(e).splitlines()[0]}") from e
    model._tokenizer_folder = folder  # model.tokenizer reads the run's on first use (models/tl_habits.py)
    return model.to(device).eval()
