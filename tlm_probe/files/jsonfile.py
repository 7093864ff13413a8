"""Reading the small JSON files tlm writes and later reads back (train_config.json, state.json, run.json,
meta.json, compare.json, ...): each is data from disk that a user may have edited, cut short or replaced,
so every way it can be wrong is one UserError naming the file, never a traceback from deep inside."""

from __future__ import annotations

import json
from pathlib import Path

from tlm_probe.errors import UserError


def decode_utf8(raw: bytes, where: str) -> str:
    """`raw` as UTF-8 text, or a UserError naming `where` and the first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = f"byte 0x{raw[e.start]:02x} at offset {e.start}"
        raise UserError(f"{where} is not UTF-8 text ({bad})") from None


def read_json(path: str | Path):
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    try:
        return json.loads(decode_utf8(raw, str(path)))
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") from None


def read_json_object(path: str | Path) -> dict:
    """The JSON object (dict) in `path`; a list, a string or a number there is refused."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise UserError(f"{path} does not hold a JSON object (it holds a {type(doc).__name__})")
    return doc


def int_field(doc: dict, key: str, where: str | Path, low: int = 0) -> int:
    """doc[key] as an integer >= low (True/False and 1.5 are not integers), or a UserError naming it."""
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise UserError(f"{where} has no integer {key!r} >= {low} (found {value!r})")
    return value
