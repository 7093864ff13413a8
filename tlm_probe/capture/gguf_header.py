"""The metadata section of a GGUF file, walked and bounds-checked before transformers' reader sees it.

GGUF (llama.cpp's format, v2 and v3): magic "GGUF", version u32, tensor count u64, key/value count u64, then
each key/value (key: u64 length + UTF-8 bytes; value type u32; value), then each tensor's info (name,
n_dims u32, n_dims u64 dims, type u32, offset u64). A length or count comes from the file, so a damaged
or hostile file may declare a 2**60-byte string: the `gguf` reader then tries to allocate it (a multi-line
allocator error) or reads past the end. Here every length and count must fit in the bytes that remain.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from tlm_probe.errors import UserError

_MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
STRING, ARRAY = 8, 9
# value type -> bytes of one scalar (GGUF's type codes)
SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class _Cursor:
    """Reads little-endian fields from a buffer, refusing any read past its end."""

    def __init__(self, buf, path: Path):
        self.buf, self.pos, self.path = buf, 0, path

    def need(self, n: int, what: str) -> None:
        left = len(self.buf) - self.pos
        if n > left:
            raise UserError(f"corrupt GGUF file {self.path}: {what} declares {n:,} bytes at offset "
                            f"{self.pos:,}, only {left:,} remain")

    def take(self, fmt: str, what: str):
        size = struct.calcsize(fmt)
        self.need(size, what)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def string(self, what: str) -> str:
        """Skips a string; returns its first 200 characters (names in messages)."""
        n, start = self.take("<Q", what), self.pos
        self.skip(n, what)
        return bytes(self.buf[start : start + min(n, 200)]).decode("utf-8", "replace")


def _value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> None:
    if vtype == STRING:
        cur.string(f"the string of {key!r}")
    elif vtype == ARRAY and depth == 0:  # GGUF arrays hold scalars or strings; nesting is not used
        etype, count = cur.take("<I", key), cur.take("<Q", key)
        if etype in SCALAR_BYTES:
            cur.skip(count * SCALAR_BYTES[etype], f"the array of {key!r}")
            return
        cur.need(count, f"the array of {key!r}")  # each element takes at least one byte
        for _ in range(count):
            _value(cur, etype, key, depth + 1)
    elif vtype in SCALAR_BYTES:
        cur.skip(SCALAR_BYTES[vtype], key)
    else:
        raise UserError(f"corrupt GGUF file {cur.path}: {key!r} has an unknown value type {vtype}")


def _tensor_info(cur: _Cursor) -> None:
    cur.string("a tensor name")
    n_dims = cur.take("<I", "a tensor's dimension count")
    if n_dims > MAX_DIMS:
        raise UserError(f"corrupt GGUF file {cur.path}: a tensor of {n_dims} dimensions (at most {MAX_DIMS})")
    cur.skip(8 * n_dims + 4 + 8, "a tensor's shape, type and offset")


def check_gguf(path: Path) -> None:
    """One line for a file that is not GGUF, a version we cannot read, or metadata that overruns the file."""
    if not path.is_file():
        raise UserError(f"GGUF file not found: {path}")
    with path.open("rb") as f:
        if path.stat().st_size < 24:
            raise UserError(f"{path} is not a GGUF file ({path.stat().st_size} bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, path)
            if buf[:4] != _MAGIC:
                raise UserError(f"{path} is not a GGUF file (no GGUF magic)")
            cur.pos = 4
            version = cur.take("<I", "the version")
            if version not in VERSIONS:
                raise UserError(f"{path}: GGUF version {version} is not supported (only {VERSIONS})")
            n_tensors, n_kv = cur.take("<Q", "the tensor count"), cur.take("<Q", "the key/value count")
            cur.need(n_kv + n_tensors, "the key/value and tensor counts")
            for _ in range(n_kv):
                key = cur.string("a key")
                _value(cur, cur.take("<I", "a value type"), key)
            for _ in range(n_tensors):
                _tensor_info(cur)
