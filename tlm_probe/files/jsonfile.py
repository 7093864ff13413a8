"""Reading the small JSON files tlm writes and later reads back (train_config.json, state.json, run.json,
meta.json, compare.json, ...): each is data from disk that a user may have edited, cut short or replaced,
so every way it can be wrong is one UserError naming the file, never a traceback from deep inside."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.bounded import read_bounded

JSON_MAX_BYTES = 256 * 2**20
"""The largest JSON file tlm reads (its own files are kilobytes; a tokenizer.json some megabytes)."""
MAX_DEPTH = 64
"""The deepest nesting accepted: tlm's files nest a few levels; 100,000 would exhaust Python's stack."""
MAX_LINE_BYTES = 64 * 2**20
"""The longest line of a JSONL file tlm reads (a corpus record is a document: a book is a few megabytes)."""
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")


def nesting_depth(raw: bytes) -> int:
    """How deep `raw`'s arrays and objects nest (strings skipped), without parsing it: checked before
    json.loads, whose recursion a deeply nested file would overflow."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(_STRINGS.sub(b'""', raw)):
        depth += 1 if m.group() in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


def loads_bounded(raw: bytes, where: str, max_depth: int = MAX_DEPTH):
    """json.loads of bytes from disk, bounded: UTF-8, nesting at most `max_depth`, every failure one
    UserError naming `where` (the one JSON parser of untrusted bytes; issue 36)."""
    text = decode_utf8(raw, where)
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise UserError(f"{where} nests {depth} levels deep (the limit is {max_depth}): not a file tlm reads")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{where} is not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # an integer of more than sys.get_int_max_str_digits() digits
        raise UserError(f"{where} holds a number tlm does not read ({str(e).split(';')[0]})") from None


def decode_utf8(raw: bytes, where: str) -> str:
    """`raw` as UTF-8 text, or a UserError naming `where` and the first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = f"byte 0x{raw[e.start]:02x} at offset {e.start}"
        raise UserError(f"{where} is not UTF-8 text ({bad})") from None


def jsonl_records(path: str | Path, max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[str, object]]:
    """("path:line", record) for each non-blank line of a JSONL file, read line by line: a line is read
    only up to `max_line` bytes (a longer one is refused before more of it is held), and parsed by
    loads_bounded (UTF-8, nesting). Every failure is one UserError naming the file, the line and the limit."""
    with open(path, "rb") as f:  # bytes, so that a line that is not UTF-8 is named by its number
        for lineno, raw in enumerate(iter(lambda: f.readline(max_line + 1), b""), 1):
            where = f"{path}:{lineno}"
            if len(raw) > max_line:
                raise UserError(f"{where} is longer than the {max_line:,} bytes allowed for a line of a "
                                "JSONL file")
            if raw.strip():
                yield where, loads_bounded(raw, where)


def read_json(path: str | Path):
    """The JSON document in `path`, read within JSON_MAX_BYTES (checked before reading) and MAX_DEPTH."""
    return loads_bounded(read_bounded(path, JSON_MAX_BYTES, "a JSON file tlm reads"), str(path))


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
