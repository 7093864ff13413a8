"""The content hash of a checkpoint's weights (provenance), cached by each file's (path, size, mtime).

sha256 over the weight files (names and bytes, sorted by name) costs about a second per GB on every probe.
The value is stored in tlm_probe.files.disk_cache under a key made of the folder's resolved path and
each weight file's name, size, mtime_ns, ctime_ns and inode: rewriting, replacing or touching a file
changes the key, so a cached hash is only reused for the very same bytes on disk.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tlm_probe.files import disk_cache

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_KNOWN: dict[str, str] = {}
"""key -> hash already read or computed in this process (a probe() per call would read its entry again)."""


def weight_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).iterdir() if p.suffix in WEIGHT_SUFFIXES)


def _update(h, path: Path) -> None:
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def hash_files(files: list[Path]) -> str:
    """sha256 over each file's name and bytes, in the order given."""
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        _update(h, p)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of one file's bytes (what a folder's manifest records of each file tlm wrote)."""
    h = hashlib.sha256()
    _update(h, path)
    return h.hexdigest()


def _key(folder: Path, files: list[Path]) -> str:
    stats = [(p.name, (s := p.stat()).st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino) for p in files]
    return json.dumps({"folder": str(Path(folder).resolve()), "files": stats})


def content_hash(folder: Path | None) -> str | None:
    """sha256 over the weight files of a checkpoint folder, or over one weight file (a .gguf), or None
    when there is none."""
    if folder is None or not Path(folder).exists():
        return None
    files = [Path(folder)] if Path(folder).is_file() else weight_files(folder)
    if not files:
        return None
    key = _key(folder, files)
    if key in _KNOWN:
        return _KNOWN[key]
    entry = f"weights-hash-{disk_cache.key_digest(key)}.json"
    cached = disk_cache.read(entry, key)
    if cached is not None:
        _KNOWN[key] = cached.decode()
        return _KNOWN[key]
    value = hash_files(files)
    if _key(folder, files) == key:  # a file changed while we read it: do not keep a hash of mixed bytes
        disk_cache.write(entry, key, value.encode())
        _KNOWN[key] = value
    return value
