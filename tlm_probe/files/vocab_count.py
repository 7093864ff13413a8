"""How many entries a tokenizer.json holds (its model's vocabulary plus its added tokens), counted without
parsing the file (issue 49): json.loads of a 2M-entry file took ~4 s of CPU (~11 s of wall on a busy
machine) before the size bound could refuse it. Byte counts that run in C instead: with every escape pair
blanked, each `"` opens or closes a string, so a `}` or `]` after an even number of quotes stands outside
any string, and `model.vocab` (an object of token -> id, or a list of [token, score] pairs) holds exactly one
string per entry.

A file whose layout this does not recognise gives None, and one whose vocabulary nests deeper than the
tokenizers library writes is undercounted: either way the caller parses it whole (the bounded reader) and
counts the parsed document, as before (tokenizer.py check_vocab_size)."""

from __future__ import annotations

import re

_KEY = {name: re.compile(rb'"' + name.encode() + rb'"\s*:\s*') for name in ("model", "vocab", "added_tokens")}
_CLOSE = {b"{": re.compile(rb"\}"), b"[": re.compile(rb"\]\s*\]")}
"""What ends the vocabulary: an object of scalars at its first `}`, a list of flat lists at its first `]]`."""
_ADDED_END = re.compile(rb"\}\s*\]")
_STRING = re.compile(rb'"[^"]*"')


def _blanked(raw: bytes) -> bytes:
    """`raw` with every escape pair blanked, same length: every `"` left opens or closes a string."""
    return raw.replace(b"\\\\", b"  ").replace(b'\\"', b"  ")


def _value_at(blanked: bytes, name: str, start: int = 0) -> int | None:
    """The offset of the value of the first key `name` at or after `start` (None: no such key)."""
    m = _KEY[name].search(blanked, start)
    return m.end() if m else None


def _closing(blanked: bytes, at: int, pattern: re.Pattern) -> int | None:
    """The end of the first match of `pattern` after `at` that stands outside every string."""
    pos, quotes = at, 0
    for m in pattern.finditer(blanked, at):
        quotes += blanked.count(b'"', pos, m.start())
        pos = m.start()
        if quotes % 2 == 0:
            return m.end()
    return None


def _empty(blanked: bytes, at: int) -> bool:
    return blanked[at + 1 : at + 1 + 64].lstrip()[:1] in (b"]", b"}")


def _vocab_entries(blanked: bytes, at: int) -> int | None:
    opening = blanked[at : at + 1]
    if opening not in _CLOSE:
        return None
    if _empty(blanked, at):
        return 0
    end = _closing(blanked, at, _CLOSE[opening])
    return None if end is None else blanked.count(b'"', at, end) // 2


def _added_entries(blanked: bytes, at: int | None) -> int | None:
    """added_tokens: a list of flat objects, counted by their braces outside strings."""
    if at is None:
        return 0
    if blanked[at : at + 1] != b"[":
        return None
    if _empty(blanked, at):
        return 0
    end = _closing(blanked, at, _ADDED_END)
    return None if end is None else _STRING.sub(b"", blanked[at:end]).count(b"{")


def count_entries(raw: bytes) -> int | None:
    """len(model.vocab) + len(added_tokens) of a tokenizer.json's bytes, or None when its layout is not
    the one the tokenizers library writes."""
    blanked = _blanked(raw)
    model = _value_at(blanked, "model")
    vocab = _value_at(blanked, "vocab", model) if model is not None else None
    n = _vocab_entries(blanked, vocab) if vocab is not None else None
    added = _added_entries(blanked, _value_at(blanked, "added_tokens"))
    return None if n is None or added is None else n + added
