"""Reading received bytes within a size bound (issue 36), the one place that does it: the JSON, YAML and
table readers beside it all start here.

A file is read only when it is a regular file (a pipe would be waited on forever, /dev/zero read forever,
a folder is not a document) of at most `limit` bytes, the size checked before a byte is read; and no more
than limit + 1 bytes are ever read, so a file that grows while it is read is cut and refused at the limit.
Every failure is one UserError naming the file and the limit."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tlm_probe.errors import UserError


def _not_regular(label: str) -> UserError:
    return UserError(f"{label} is not a regular file (a device, a pipe or a folder): refusing to read it")


def checked_size(path: str | Path, limit: int, what: str, label: str = "") -> int:
    """The size of `path` in bytes, refused (one UserError naming `label` or the path, and `limit`) unless
    it is a regular file of at most `limit` bytes. `what`: whose limit it is, for the message ("a JSON
    file tlm reads")."""
    label = label or str(path)
    try:
        info = os.stat(path)
    except OSError as e:
        raise UserError(f"cannot read {label}: {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(label)
    if info.st_size > limit:
        raise UserError(f"{label} holds {info.st_size:,} bytes, more than the {limit:,} allowed for {what}")
    return info.st_size


def read_bounded(path: str | Path, limit: int, what: str, label: str = "") -> bytes:
    """The bytes of `path`, within `limit` (checked before reading, and no more than that read). The file
    is opened without waiting (a pipe put there after the check is refused, not waited on)."""
    label = label or str(path)
    checked_size(path, limit, what, label)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise UserError(f"cannot read {label}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_regular(label)
        try:
            raw = f.read(limit + 1)
        except OSError as e:
            raise UserError(f"cannot read {label}: {e.strerror}") from None
    if len(raw) > limit:
        raise UserError(f"{label} holds more than the {limit:,} bytes allowed for {what} (it grew while "
                        "read)")
    return raw
