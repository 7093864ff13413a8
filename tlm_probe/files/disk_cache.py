"""A small on-disk cache of derived data (built corpora, weight hashes) that is safe to lose or corrupt.

Where: $TLM_PROBE_CACHE if set ("off" disables the cache), else $XDG_CACHE_HOME/tlm_probe, else
~/.cache/tlm_probe. Each entry is one file: a JSON header line (format, key, sha256 and size of the
payload) and the payload. A write goes to a temporary file in the same folder, is fsynced and renamed into
place, so a reader sees a whole entry or none. A read checks the key and the checksum; anything that does
not verify is a miss (and the caller rebuilds and rewrites it). A cache that cannot be written (read-only
home, full disk) only costs the rebuild: no error reaches the user.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

ENV = "TLM_PROBE_CACHE"
FORMAT = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def cache_dir() -> Path | None:
    """The cache folder (not created here), or None when the user turned the cache off."""
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tlm_probe"


def key_digest(*parts: object) -> str:
    """A short stable digest of a key's parts (for file names)."""
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:24]


def _entry(name: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / _SAFE.sub("_", name)


def read(name: str, key: str) -> bytes | None:
    """The payload stored under `name` for `key`, or None (missing, other key, corrupt, unreadable)."""
    path = _entry(name)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
            payload = f.read()
    except (OSError, ValueError):
        return None
    ok = (
        isinstance(header, dict)
        and header.get("format") == FORMAT
        and header.get("key") == key
        and header.get("size") == len(payload)
        and header.get("sha256") == hashlib.sha256(payload).hexdigest()
    )
    return payload if ok else None


def write(name: str, key: str, payload: bytes) -> bool:
    """Store `payload` under `name` atomically; False (and nothing left behind) if that is not possible."""
    path = _entry(name)
    if path is None:
        return False
    digest = hashlib.sha256(payload).hexdigest()
    header = {"format": FORMAT, "key": key, "size": len(payload), "sha256": digest}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return True
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False
