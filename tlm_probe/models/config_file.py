"""Reading a checkpoint's config.json: plain JSON, no torch (`tlm info` starts as fast as `tlm schedule`)."""

from __future__ import annotations

from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import read_json
from tlm_probe.models.config import ConfigError, TLMConfig

CONFIG = "config.json"


def read_config_json(folder: Path) -> dict:
    """config.json of a checkpoint folder as a dict; one line for a missing, corrupt or non-object file."""
    path = folder / CONFIG
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file, not a checkpoint folder (a folder holding config.json)")
    if not folder.is_dir():
        raise UserError(f"checkpoint folder not found: {folder}")
    if not path.is_file():
        raise UserError(f"no config.json in {folder}: not a checkpoint folder")
    try:
        raw = read_json(path)  # bounded: size, nesting, UTF-8
    except UserError as e:
        raise UserError(f"corrupt config.json in {folder}: {e}") from None
    if not isinstance(raw, dict):  # valid JSON, but a list or a number says nothing about a model
        raise UserError(f"corrupt config.json in {folder}: a JSON {type(raw).__name__}, not an object")
    return raw


def read_tlm_config(folder: Path) -> TLMConfig:
    """The TLMConfig of a tlm checkpoint folder (refusing other model types and mistyped fields)."""
    raw = read_config_json(folder)
    if raw.get("model_type") != "tlm":
        raise UserError(f"{folder} holds a {raw.get('model_type')!r} model, not a tlm checkpoint")
    try:
        return TLMConfig.from_dict(raw)
    except ConfigError as e:  # say which file: the message alone names only the field
        raise ConfigError(f"{folder / CONFIG}: {e}") from None
