"""The output folder's lock (one writer at a time).

An exclusive flock on .OUT.lock beside the resolved OUT (holding the pid) for the life of the
writer, opened without following symbolic links; the kernel drops it when the process dies, so the lock
of a killed process is simply taken over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.files.fileio import clean_stale_temps, file_mode
from tlm_probe.files.out_folder import ensure_writable

_held: dict[Path, tuple[int, int]] = {}
"""Locks this process holds: path -> (file descriptor, depth), so that nested writers (demo -> compare
-> train) may take the lock of a folder they already hold."""


def lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


@contextlib.contextmanager
def folder_lock(out: str | Path, *, file: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the output folder `out` for the block. A second writer gets a one-line
    UserError naming the holder's pid. Stale .OUT.tmp-* of a killed writer are removed once it is held.
    file=True: `out` is one output file (`tlm export --gguf`), locked the same way (.OUT.lock beside it)."""
    out = Path(out).resolve()  # one lock per folder, whichever path (a symbolic link) reaches it
    path = lock_path(out)
    if path in _held:
        fd, depth = _held[path]
        _held[path] = (fd, depth + 1)
    else:
        ensure_writable(out.parent if file else out)
        out.parent.mkdir(parents=True, exist_ok=True)
        _held[path] = (_acquire(path, out), 1)
        clean_stale_temps(out)
    try:
        yield
    finally:
        fd, depth = _held[path]
        if depth > 1:
            _held[path] = (fd, depth - 1)
        else:
            del _held[path]
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.close(fd)  # closing drops the flock


def _acquire(path: Path, out: Path) -> int:
    while True:
        fd = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UserError(f"{out} is being written by another tlm process (pid {holder})") from None
        try:
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else the holder removed the file between our open and flock: lock the new one
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _open_lock(path: Path) -> int:
    """Open (or create) the lock file without following a symbolic link; a link, a hard link or anything
    but a small regular file there is someone else's file, which truncating would destroy."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, file_mode())
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"refusing to lock through {path}: it is a symbolic link; remove it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > 64:
        os.close(fd)
        raise UserError(f"refusing to use {path} as a lock: it is not a tlm lock file; remove it")
    return fd
