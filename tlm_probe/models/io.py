"""Checkpoint folders: config.json (model_type "tlm") + model.safetensors (+ tokenizer files).

Weights are only ever read from safetensors. Pickle files (.bin/.pt/.pth) are refused unless the caller
passes allow_pickle=True, because unpickling runs arbitrary code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from tlm_probe.errors import UserError
from tlm_probe.fileio import atomic_path, atomic_write_text
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.config_file import CONFIG, read_config_json
from tlm_probe.models.tlm import TaperedLM

WEIGHTS = "model.safetensors"
PICKLE_WEIGHTS = ("pytorch_model.bin", "model.pt", "model.pth", "model.bin")


def save_tlm(model: TaperedLM, folder: str | Path) -> Path:
    """Write config.json and model.safetensors, each atomically (temporary file + rename)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    need = sum(p.numel() * p.element_size() for p in model.parameters())
    with atomic_path(folder / WEIGHTS, need) as tmp:
        save_model(model, str(tmp), metadata={"format": "pt", "model_type": "tlm"})  # drops tied copies
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


def read_safetensors_header(path: Path) -> dict:
    """{tensor name: {"dtype", "shape", "data_offsets"}} of a safetensors file, after checking that the
    file is as long as its header says (a copy cut short fails here, not half-way through a run)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or n > size - 8:
            raise UserError(f"{path} is truncated or not a safetensors file ({size} bytes)")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UserError(f"{path} has a corrupt safetensors header") from None
    if not isinstance(header, dict):
        raise UserError(f"{path} has a corrupt safetensors header")
    header.pop("__metadata__", None)
    end = max((t["data_offsets"][1] for t in header.values()), default=0)
    if size != 8 + n + end:
        raise UserError(f"{path} is truncated: {size:,} bytes, its header says {8 + n + end:,}")
    return header


def check_weights(folder: Path, cfg: TLMConfig) -> None:
    """The tensors of folder/model.safetensors are exactly the weights config.json describes (names and
    shapes; tied weights may be stored under either name). One line naming the first difference."""
    path = folder / WEIGHTS
    if not path.is_file():
        raise UserError(f"no {WEIGHTS} in {folder}")
    header = read_safetensors_header(path)
    with torch.device("meta"):
        model = TaperedLM(cfg)
    expected = {k: list(v.shape) for k, v in model.state_dict().items()}
    for name, info in header.items():
        if name not in expected:
            raise UserError(f"{path} holds {name!r}, which a model of its config.json does not have")
        if list(info["shape"]) != expected[name]:
            raise UserError(f"{path}: {name} has shape {info['shape']}, config.json implies {expected[name]}")
    groups: dict[int, list[str]] = {}  # tied parameters: one tensor, several names
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    missing = [names[0] for names in groups.values() if not any(n in header for n in names)]
    if missing:
        raise UserError(f"{path} lacks {len(missing)} weight(s) of its config.json, e.g. {missing[0]}")


def load_tlm(folder: str | Path, device: str = "cpu", allow_pickle: bool = False) -> TaperedLM:
    folder = Path(folder)
    raw = read_config_json(folder)
    if raw.get("model_type") != "tlm":
        raise UserError(f"{folder} holds a {raw.get('model_type')!r} model, not a tlm checkpoint")
    cfg = TLMConfig.from_dict(raw)
    model = TaperedLM(cfg)
    path = weights_path(folder, allow_pickle)
    if path.suffix == ".safetensors":
        check_weights(folder, cfg)  # names the mismatching tensor, where load_model's message is cut
    try:
        if path.suffix == ".safetensors":
            missing, unexpected = load_model(model, path, strict=True, device=device)
        else:
            model.load_state_dict(torch.load(path, map_location=device, weights_only=False))
    except Exception as e:  # safetensors raises several types for truncated or mismatched files
        raise UserError(f"cannot load weights from {path}: {str(e).splitlines()[0]}") from e
    return model.to(device).eval()
