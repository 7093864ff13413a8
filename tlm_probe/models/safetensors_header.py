"""The header of a safetensors file, read and checked without torch or the safetensors package.

A safetensors file is an 8-byte little-endian header length n, n bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then the tensor bytes,
offsets counted from the end of the header. Every entry is checked here, so a hand-edited or damaged file
fails with one line naming the entry instead of a KeyError in our code or a parse error from the reader.
"""

from __future__ import annotations

import math
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import loads_bounded

# bytes per element of each safetensors dtype (the format's own names)
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _entry_problem(info) -> str | None:
    """What is wrong with one tensor entry of the header, or None."""
    if not isinstance(info, dict):
        return "is not an object"
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if info.get("dtype") not in DTYPE_BYTES:
        return f"has an unknown dtype {repr(info.get('dtype'))[:40]}"
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        return f"has a malformed shape {repr(shape)[:40]}"
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        return f"has malformed data_offsets {repr(offsets)[:40]} (two integers expected)"
    begin, end = offsets
    if not 0 <= begin <= end or end - begin != math.prod(shape) * DTYPE_BYTES[info["dtype"]]:
        return f"has data_offsets {offsets} that do not hold a {info['dtype']} tensor of shape {shape}"
    return None


def read_safetensors_header(path: Path) -> dict:
    """{tensor name: {"dtype", "shape", "data_offsets"}} of a safetensors file, after checking every entry
    and that the file is as long as its header says (a copy cut short fails here, not half-way through
    a run)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or n > size - 8:
            raise UserError(f"{path} is truncated or not a safetensors file ({size} bytes)")
        try:
            header = loads_bounded(f.read(n), f"{path}'s safetensors header")
        except UserError as e:
            raise UserError(f"{path} has a corrupt safetensors header: {e}") from None
    if not isinstance(header, dict):
        raise UserError(f"{path} has a corrupt safetensors header")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        # the format's __metadata__ is a string -> string map; the safetensors reader refuses anything else
        raise UserError(f"{path}: its safetensors __metadata__ is not a map of strings (a corrupt header)")
    for name, info in header.items():
        problem = _entry_problem(info)
        if problem:
            raise UserError(f"{path}: tensor {name!r} {problem}")
    end = max((t["data_offsets"][1] for t in header.values()), default=0)
    if size != 8 + n + end:
        raise UserError(f"{path} is truncated: {size:,} bytes, its header says {8 + n + end:,}")
    return header
