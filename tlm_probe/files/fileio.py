"""Writing files safely: atomic writes and manifests of written files (the one copy of each; the folder
lock that guards them is tlm_probe/files/folder_lock.py; the checks of an output folder before any work,
claim among them, are tlm_probe/files/out_folder.py).

- Atomic: a file (or folder) is written under a temporary name next to its final one and renamed into
  place, so a crash never leaves it half-written; a failed write removes its temporary. Outputs follow the
  user's umask (mkstemp/mkdtemp alone would make them 0600/0700).
- Manifest: OUT/.tlm-manifest.json names the entries a command wrote in OUT (written before the entries
  themselves, so a crash cannot leave an unlisted file) and the kind of command whose folder OUT is. A
  command deletes or replaces only those entries, only in a folder of its own kind (`tlm eval` never
  replaces a probe's results, `tlm train --overwrite` never a comparison), never a folder it did not
  create, and leaves every other file where it is. The manifest is data from disk, not an instruction:
  an entry that is absolute, holds '..', names the folder itself or passes through a symbolic link is
  refused, and only regular files and real folders strictly inside OUT are ever deleted.
- Content hashes: publish records the sha256 of every file it writes; remove_owned and publish replace or
  delete a file only while its bytes still hash to what its manifest records (the rule, and the folders
  where a file without a hash is refused too: tlm_probe/files/ownership.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from tlm_probe.errors import UserError
from tlm_probe.files.ownership import (  # noqa: F401 (manifest_kind: for the commands)
    HASHES,
    MANIFEST,
    changed,
    check_kind,
    check_unchanged,
    entry_problem,
    hashes_of,
    manifest_doc,
    manifest_kind,
    recorded_hashes,
)

DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


# ---- modes and disk-full errors -------------------------------------------------------------------
def umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask is not thread safe)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        lines = Path("/proc/self/status").read_text().splitlines()
        return int(next(ln for ln in lines if ln.startswith("Umask:")).split()[1], 8)
    old = os.umask(0o022)
    os.umask(old)
    return old


def file_mode() -> int:
    return 0o666 & ~umask()


def dir_mode() -> int:
    return 0o777 & ~umask()


# torch.save's zip writer reports a short write on a full disk without errno: "[enforce fail at
# inline_container.cc:…] . unexpected pos 1152 vs 1046" or "PytorchStreamWriter failed writing file
# data/0: file write failed"; a short write of a local file is a full disk (or quota) in practice
TORCH_SHORT_WRITE = ("unexpected pos", "PytorchStreamWriter failed writing")
# numpy's ndarray.tofile (gguf's tensor writer) reports a short write as OSError("1024 requested and 312
# written"), without errno: alone, that was the whole error line (issue 36)
NUMPY_SHORT_WRITE = re.compile(r"^\d+ requested and \d+ written$")
FREE_SPACE_HINT = "free some space there (or write somewhere else) and run it again"


def is_disk_full(e: BaseException) -> bool:
    # torch.save and safetensors report a full disk as RuntimeError/SafetensorError, not OSError
    if isinstance(e, OSError) and e.errno in DISK_FULL:
        return True
    text = str(e)
    short_write = isinstance(e, RuntimeError) and any(m in text for m in TORCH_SHORT_WRITE)
    numpy_short = isinstance(e, OSError) and e.errno is None and bool(NUMPY_SHORT_WRITE.match(text.strip()))
    return "No space left" in text or short_write or numpy_short


class DiskFull(UserError):
    """A write that ran out of space (a UserError: the one line names the path, the bytes needed or
    written, the space free and what to do)."""


def disk_full_error(path: Path, need: int, written: int = 0) -> UserError:
    """The one line of a full disk while writing `path`: `need` bytes when the writer knew them (0: not
    known; then the `written` bytes so far are what is known: the need is more), and the space free on
    the file system that holds it."""
    where = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    try:
        free = f"{human(shutil.disk_usage(where).free)} free"
    except OSError:
        free = "free space unknown"
    if need > 0:
        asked = f"it needs about {human(need)}"
    elif written > 0:
        asked = f"it needs more than the {human(written)} written before the disk filled"
    else:
        asked = "no byte of it could be written"
    return DiskFull(f"disk full writing {path}: {asked}, {free} on the disk that holds {where.resolve()}; "
                    f"{FREE_SPACE_HINT}")


def written_bytes(path: Path) -> int:
    """Bytes in the file or folder `path` (what a failed write had put there; 0 when it is gone)."""
    with contextlib.suppress(OSError):
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return 0


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# ---- atomic files and folders ---------------------------------------------------------------------
@contextlib.contextmanager
def atomic_path(path: str | Path, need: int = 0) -> Iterator[Path]:
    """A temporary file next to `path` to write; renamed onto `path` when the block succeeds, removed
    when it fails. A full disk becomes one UserError naming `path` and `need` (bytes)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException as e:
        written = written_bytes(Path(tmp)) if not need and is_disk_full(e) else 0
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(e):
            raise disk_full_error(path, need, written) from None
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    with atomic_path(path, len(data)) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def append_line(path: str | Path, line: str) -> None:
    """Append `line` (a newline is added) and flush. A failed write (a full disk) leaves the file exactly as
    it was, never a torn last line; a full disk becomes one UserError naming `path`."""
    path = Path(path)
    data = (line + "\n").encode("utf-8")
    size = path.stat().st_size if path.exists() else 0
    try:
        with path.open("ab") as f:
            f.write(data)
            f.flush()
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.truncate(path, size)
        if is_disk_full(e):
            raise disk_full_error(path, len(data)) from None
        raise


@contextlib.contextmanager
def temp_folder(near: str | Path, need: int = 0) -> Iterator[Path]:
    """An empty folder beside `near` (same file system, so it can be renamed into place), mode per the
    umask; removed afterwards unless the block renamed it away. A full disk becomes one UserError."""
    near = Path(near)
    near.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=near.parent, prefix=f".{near.name}.tmp-"))
    os.chmod(tmp, dir_mode())
    try:
        yield tmp
    except BaseException as e:
        if is_disk_full(e):
            written = 0 if need else written_bytes(tmp)
            shutil.rmtree(tmp, ignore_errors=True)  # first, so that the free space reported is true
            raise disk_full_error(near, need, written) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def follow_umask(root: Path) -> None:
    """Give `root` and everything under it the umask's modes (safetensors writes its files 0600)."""
    fmode, dmode = file_mode(), dir_mode()
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, dmode if p.is_dir() else fmode)


def clean_stale_temps(out: Path) -> None:
    """Remove .OUT.tmp-* left beside `out` by a writer that was killed (call it holding OUT's lock)."""
    if out.parent.is_dir():
        for stale in out.parent.glob(f".{out.name}.tmp-*"):
            _remove(stale)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def replace_entry(src: Path, dst: Path) -> None:
    """Rename src onto dst; a folder at dst is moved aside first (rename cannot replace a full folder)."""
    if dst.is_dir() and not dst.is_symlink():
        old = dst.parent / f".{dst.name}.old-{os.getpid()}"
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)


# ---- manifests ------------------------------------------------------------------------------------
def read_manifest(folder: str | Path) -> list[str]:
    """Entries (relative paths) that tlm wrote in `folder`; [] when it has no readable manifest. An entry
    that could reach outside the folder or through a link is refused with a UserError, never skipped."""
    folder = Path(folder)
    entries = manifest_doc(folder).get("entries", [])
    entries = entries if isinstance(entries, list) else []
    for entry in entries:
        problem = entry_problem(folder, entry)
        if problem:
            raise UserError(f"refusing to use the manifest {folder / MANIFEST}: entry {entry!r} {problem}")
    return list(entries)


def record(folder: str | Path, entries: Iterable[str], command: str) -> None:
    """Add `entries` to the folder's manifest (creating both); call it before writing the entries. The
    folder keeps the kind of the command that first recorded into it. A recorded entry's old content hash
    is dropped (it is about to be rewritten); the other entries keep theirs."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    check_kind(folder, command)
    entries = list(entries)
    old = read_manifest(folder)
    new = list(dict.fromkeys([*old, *entries]))
    kind = manifest_kind(folder) or command
    had = recorded_hashes(folder)
    hashes = {e: h for e, h in had.items() if e in new and e not in entries}
    if new != old or not (folder / MANIFEST).is_file() or manifest_doc(folder).get("kind") != kind \
            or hashes != had:
        _write_manifest(folder, kind, command, new, hashes)


def _write_manifest(folder: Path, kind: str, command: str, entries: list[str],
                    hashes: dict[str, list[str]] | None = None) -> None:
    doc = {"written_by": "tlm_probe", "kind": kind, "command": command, "entries": entries}
    kept = {e: h[0] if len(h) == 1 else h for e, h in (hashes or {}).items() if e in entries and h}
    if kept:
        doc[HASHES] = kept
    atomic_write_text(folder / MANIFEST, json.dumps(doc, indent=1) + "\n")


def _owned_top(folder: Path) -> set[str]:
    return {PurePosixPath(e).parts[0] for e in read_manifest(folder)}


def foreign(folder: str | Path) -> list[str]:
    """Top-level names in `folder` that no manifest entry covers (files tlm did not write)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    owned = _owned_top(folder) | {MANIFEST}
    return sorted(p.name for p in folder.iterdir() if p.name not in owned)


def remove_owned(folder: str | Path) -> list[str]:
    """Delete the entries the manifest names (and folders they leave empty); keep everything else.
    Returns the names kept."""
    folder = Path(folder)
    entries = read_manifest(folder)  # every entry checked (place, then bytes) before the first is deleted
    check_unchanged(folder, entries)
    for entry in entries:
        _remove_entry(folder, entry)
    with contextlib.suppress(FileNotFoundError):
        (folder / MANIFEST).unlink()
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def drop_entry(folder: str | Path, entry: str, command: str) -> bool:
    """Delete one entry tlm wrote and take it out of the manifest (a figure whose data a re-run no longer
    has); an entry the manifest does not name, or a file that changed since tlm wrote it, is left alone.
    Returns whether it was dropped."""
    folder = Path(folder)
    entries, hashes = read_manifest(folder), recorded_hashes(folder)
    if entry not in entries or changed(folder, entry, hashes, strict=False):
        return False
    _remove_entry(folder, entry)
    kept = [e for e in entries if e != entry]
    _write_manifest(folder, manifest_kind(folder) or command, command, kept, hashes)
    return True


def _remove_entry(folder: Path, entry: str) -> None:
    if entry_problem(folder, entry):  # changed on disk since it was checked: leave it
        return
    _remove(folder / entry)  # rmtree never follows a link inside the folder it removes
    for parent in (folder / entry).parents:  # runs/uniform-s0 -> runs/ too when nothing else is in it
        if parent == folder or not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()


def publish(tmp: Path, out: Path, command: str) -> list[str]:
    """Move every entry of the temporary folder `tmp` into `out` and record them in out's manifest.
    A new `out` is `tmp` renamed (one atomic step); an existing one loses the entries of its manifest
    that the new output lacks, gets the new ones renamed in one at a time, and keeps every other file.
    Refuses to replace an entry that tlm did not write, or to write into another command's folder.
    Returns the names of the files kept."""
    entries = sorted(p.name for p in tmp.iterdir() if p.name != MANIFEST)
    follow_umask(tmp)
    hashes = hashes_of(tmp, entries)  # what tlm writes: --overwrite later replaces only these bytes
    if not out.exists():
        _write_manifest(tmp, command, command, entries, hashes)
        os.replace(tmp, out)
        return []
    check_kind(out, command)
    clash = sorted(set(entries) & set(foreign(out)))
    if clash:
        raise UserError(f"refusing to replace {out / clash[0]}: tlm did not write it")
    _publish_into(tmp, out, command, entries, hashes)
    return foreign(out)


def _publish_into(tmp: Path, out: Path, command: str, entries: list[str], hashes: dict) -> None:
    """publish() into an existing `out`: every entry it replaces or deletes is checked to hold tlm's bytes
    first; while the new entries go in, the manifest accepts either the old or the new bytes of each."""
    old = read_manifest(out)
    check_unchanged(out, old)
    kind = manifest_kind(out) or command
    had = recorded_hashes(out)
    for stale in set(old) - set(entries):
        _remove_entry(out, stale)
    either = {e: [*had.get(e, []), *hashes.get(e, [])] for e in {*had, *hashes}}
    _write_manifest(out, kind, command, list(dict.fromkeys([*old, *entries])), either)
    for name in entries:
        replace_entry(tmp / name, out / name)
    _write_manifest(out, kind, command, entries, hashes)
