"""Checking an output folder before any expensive work: that it lies apart from the command's inputs
(check_apart), that it can be written (ensure_writable), that its manifest is this command's
(check_entries_are_ours), and that the command may write there at all (claim: a folder tlm did not write
only beside its files with --overwrite; one of another kind never). The manifests themselves: fileio.py; the
ownership rule and its reasons: ownership.py."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from tlm_probe.errors import UserError
from tlm_probe.files.fileio import foreign, read_manifest
from tlm_probe.files.ownership import check_kind, check_unchanged


def ensure_writable(out: str | Path) -> None:
    """Raise a UserError unless `out` could be created: probe the nearest existing ancestor by actually
    making (and removing) a folder there, since permission bits say nothing when running as root."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"output {out} exists and is not a folder")
    parent = next((p for p in [out, *out.parents] if p.exists()), Path("."))
    if not parent.is_dir():
        raise UserError(f"output folder {out} cannot be created: {parent} is a file")
    try:
        probe = Path(tempfile.mkdtemp(dir=parent, prefix=".tlm-write-test-"))
        probe.rmdir()
    except OSError as e:
        raise UserError(f"output folder {out} cannot be written ({e.strerror}: {parent})") from None


def check_entries_are_ours(out: Path, writes: Iterable[str], kind: str | None) -> None:
    """A manifest whose entries name files this kind of command never writes was not written by it (a
    forged or hand-edited manifest, e.g. one that lists a checkpoint's model.safetensors in a probe
    folder): refuse before anything is deleted or replaced, naming the entry (issue 36)."""
    allowed = set(writes)
    for entry in read_manifest(out):
        top = PurePosixPath(entry).parts[0]
        if top not in allowed:
            what = f"`tlm {kind}`" if kind else "this command"
            raise UserError(f"the manifest of {out} lists {entry!r}, which {what} never writes: it is not a "
                            "manifest tlm wrote for this command; nothing will be replaced or deleted there "
                            "(choose another folder)")


def claim(out: str | Path, *, overwrite: bool, writes: Iterable[str] = (), own_needs_overwrite: bool = True,
          hint: str = "", kind: str | None = None, owned: Iterable[str] = ()) -> list[str]:
    """Check, before any expensive work, that a command may write `out`; returns the names of the files
    it will leave alone there. A non-empty folder that tlm did not write is refused without --overwrite;
    with it, tlm writes beside those files but never onto one of them (`writes`: the top-level names the
    command may write). A folder tlm wrote is refused without --overwrite when `own_needs_overwrite`, and
    always when another kind of command than `kind` wrote it (None: no kind check, for library callers
    that write plain files). A manifest entry outside `writes` and `owned` (what else a folder of this kind
    holds, e.g. a sweep's files in a comparison) is refused: that manifest is not this command's."""
    out = Path(out)
    ensure_writable(out)
    check_kind(out, kind)
    others = foreign(out)
    ours = bool(read_manifest(out))
    if ours and writes:
        check_entries_are_ours(out, (*writes, *owned), kind)
    if not others and not ours:
        return []
    if not overwrite and not ours:
        raise UserError(
            f"output folder {out} is not empty and tlm did not write it ({others[0]}, ...); "
            "choose another folder, or pass --overwrite to write beside its files"
        )
    if not overwrite and own_needs_overwrite:
        raise UserError(f"output folder {out} already exists; pass --overwrite to replace it{hint}")
    if ours:  # what the command will replace or delete still holds the bytes tlm wrote
        check_unchanged(out, read_manifest(out))
    clash = sorted(set(others) & set(writes))
    if clash:
        raise UserError(f"refusing to replace {out / clash[0]}: tlm did not write it (move it away first)")
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        print(f"note: {out} keeps {len(others)} file(s) tlm did not write: {shown}", file=sys.stderr)
    return others


def check_apart(out: str | Path, inputs: Iterable[str | Path]) -> None:
    """Refuse an --out that is, contains or lies inside one of the command's inputs, symbolic links
    resolved: writing there would replace or delete what the command reads. Inputs that name nothing on
    disk (hub names, builtin: sources, globs) are skipped."""
    target = Path(out).resolve()
    for given in inputs:
        path = _on_disk(str(given))
        if path is None:
            continue
        src = path.resolve()
        relation = ("is" if src == target else "lies inside" if src in target.parents
                    else "contains" if target in src.parents else "")
        if relation:
            raise UserError(f"--out {out} {relation} the input {given}; choose an output folder apart from "
                            "the inputs")


def _on_disk(given: str) -> Path | None:
    """The file or folder an argument names (a source FILE:FIELD names FILE), or None."""
    for candidate in (given, given.rpartition(":")[0]):
        if candidate and os.path.lexists(candidate):
            return Path(candidate)
    return None
