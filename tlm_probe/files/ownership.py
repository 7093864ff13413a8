"""Who owns an output folder, and what a command may touch in it: the manifest's kind of command, the
safety of each entry it names and the bytes of each file it names. Pure checks on paths and manifests
(fileio does the writing, out_folder checks an --out before any work); every refusal is one UserError
line.

Content hashes (issue 36): the manifest records the sha256 of every file written whole through
fileio.publish (`sha256`: entry -> digest). A file whose manifest records a digest is deleted or replaced
only while its bytes still hash to it; otherwise the command refuses, naming the file, before anything
is touched (check_unchanged) — so a manifest copied beside someone's files, or a user's results.csv put
where tlm's was, costs nothing. A manifest is data, not proof: whoever forges one can also omit digests,
so for the kinds of folder tlm always hashes (HASHED_KINDS: probe, eval, report, export, diff, trust,
data prepare) a file entry WITHOUT a digest is refused too. That includes folders written before digests
were recorded (tlm before issue 36): `--overwrite` then stops with one line naming the file, and the user
moves or deletes it (nothing is lost either way). Not hashed, and deleted by the name and kind rules
alone (check_kind, out_folder.check_entries_are_ours, entry_problem): folder entries (runs/…, checkpoints,
shards) and the folders of train, compare, sweep and demo, whose files are rewritten in place or appended
to while a run lives (metrics.jsonl gets a line per logged step)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from tlm_probe.errors import UserError
from tlm_probe.files.content_hash import file_sha256
from tlm_probe.files.jsonfile import read_json

MANIFEST = ".tlm-manifest.json"
HASHES = "sha256"
"""The manifest's map: entry -> the sha256 of the bytes tlm wrote there (a list of the accepted digests
while fileio.publish replaces the file: the old bytes' or the new's, so a kill at any point leaves every
file matching its manifest)."""
HASHED_KINDS = frozenset({"probe", "eval", "report", "export", "convert llama2c", "diff", "trust",
                          "data prepare"})
"""The kinds of folder written only through fileio.publish, which records a digest of every file."""

# The kind of command whose folder it is ("kind"; "command" is the last one that recorded entries).
# Manifests written before kinds were recorded hold only "command": sweep and demo recorded theirs into
# a comparison's folder, and eval results went through the probe's writer (recorded "probe") — such a
# folder is told from a probe by its provenance, which only eval's gives a "perplexity" list. A manifest
# naming no command at all is trusted for nothing: no command replaces its entries.
LEGACY_KIND = {"sweep": "compare", "demo": "compare"}
ALSO_WRITES = {"demo": ("compare",), "sweep": ("compare",)}
"""Commands that write into a folder of another kind by design: the demo and a sweep run a comparison
in their folder and add their own files to it."""


def manifest_doc(folder: Path) -> dict:
    path = folder / MANIFEST
    if path.is_symlink():
        raise UserError(f"refusing to use {path}: it is a symbolic link, not a manifest tlm wrote")
    try:
        doc = read_json(path)  # bounded: size, nesting, UTF-8
    except UserError:  # none, unreadable, not JSON or absurd: the folder counts as not tlm's
        return {}
    return doc if isinstance(doc, dict) else {}


def entry_problem(folder: Path, entry) -> str:
    """Why `entry` may not be deleted or replaced ('' when it may): only names strictly inside `folder`
    whose every component on disk is a real folder or, last, a regular file or folder."""
    if not isinstance(entry, str) or not entry or "\0" in entry:
        return "is not a file name"
    parts = PurePosixPath(entry).parts
    if PurePosixPath(entry).is_absolute():
        return "is an absolute path"
    if ".." in parts:
        return "climbs out of the folder with '..'"
    if not parts:
        return "names the folder itself"
    node, mode = folder, stat.S_IFDIR
    for part in parts:
        node = node / part
        try:
            mode = os.lstat(node).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return ""  # not written (yet): nothing there to delete
        if stat.S_ISLNK(mode):
            return f"passes through the symbolic link {node}"
    return "" if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "is not a regular file or folder"


def manifest_kind(folder: str | Path) -> str | None:
    """The kind of command whose output `folder` is, per its manifest (None: no command recorded)."""
    folder = Path(folder)
    doc = manifest_doc(folder)
    if isinstance(doc.get("kind"), str):
        return doc["kind"]
    command = doc.get("command")
    if not isinstance(command, str):
        return None
    if command == "probe" and _is_eval_provenance(folder / "provenance.json"):
        return "eval"
    return LEGACY_KIND.get(command, command)


def _is_eval_provenance(path: Path) -> bool:
    try:
        doc = read_json(path)
    except UserError:
        return False
    return isinstance(doc, dict) and "perplexity" in doc


def recorded_hashes(folder: Path) -> dict[str, list[str]]:
    """entry -> the digests its manifest accepts for it (entries without one are absent)."""
    raw = manifest_doc(folder).get(HASHES)
    if not isinstance(raw, dict):
        return {}
    found = {k: v if isinstance(v, list) else [v] for k, v in raw.items()}
    return {k: [d for d in v if isinstance(d, str)] for k, v in found.items()}


def hashes_of(folder: Path, entries: Iterable[str]) -> dict[str, list[str]]:
    """entry -> [sha256] of every entry of `folder` that is a regular file (no link, no folder)."""
    return {e: [file_sha256(folder / e)] for e in entries
            if (folder / e).is_file() and not (folder / e).is_symlink()}


def changed(folder: Path, entry: str, hashes: dict[str, list[str]], strict: bool) -> str:
    """Why the file `entry` does not hold the bytes tlm wrote ('' when it does, or is not a file)."""
    path = folder / entry
    if path.is_symlink() or not path.is_file():
        return ""  # absent, or a folder: entry_problem and the name rules decide
    if entry not in hashes:
        return ("the manifest records no content hash of it (a folder written by a tlm from before hashes "
                "were recorded, or a manifest tlm did not write)") if strict else ""
    if file_sha256(path) not in hashes[entry]:
        return ("its bytes are not the ones tlm wrote there (the file changed since, or the manifest is not "
                "tlm's)")
    return ""


def check_unchanged(folder: Path, entries: Iterable[str]) -> None:
    """Refuse (one UserError naming the file) unless every file among `entries` still holds the bytes its
    manifest records: call it before the first entry is deleted or replaced."""
    hashes = recorded_hashes(folder)
    strict = manifest_kind(folder) in HASHED_KINDS
    for entry in entries:
        problem = changed(folder, entry, hashes, strict)
        if problem:
            raise UserError(f"refusing to replace or delete {folder / entry}: {problem}; nothing was "
                            "touched: move it away (or delete it yourself) and run again")


def check_kind(folder: str | Path, kind: str | None) -> None:
    """Refuse (UserError naming the other command) when `folder` holds a manifest of another kind of
    command than `kind`: --overwrite replaces only what the same kind of command wrote."""
    folder = Path(folder)
    if kind is None or not manifest_doc(folder):
        return
    found = manifest_kind(folder)
    if found in (kind, *ALSO_WRITES.get(kind, ())):
        return
    if found is None:
        raise UserError(f"{folder} was written by a tlm command its manifest does not name; `tlm {kind}` "
                        "will not replace anything there: choose another folder")
    raise UserError(f"{folder} holds the output of `tlm {found}`; `tlm {kind}` will not replace or mix "
                    "with it: choose another folder")
