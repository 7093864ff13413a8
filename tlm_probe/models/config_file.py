"""Reading a checkpoint's config.json: plain JSON, no torch (`tlm info` starts as fast as `tlm schedule`)."""

from __future__ import annotations

import json
from pathlib import Path

from tlm_probe.errors import UserError

CONFIG = "config.json"


def read_config_json(folder: Path) -> dict:
    path = folder / CONFIG
    if not folder.is_dir():
        raise UserError(f"checkpoint folder not found: {folder}")
    if not path.is_file():
        raise UserError(f"no config.json in {folder}: not a checkpoint folder")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"corrupt config.json in {folder}: {e}") from e
