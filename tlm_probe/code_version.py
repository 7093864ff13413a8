"""Which code made a result: the git commit of the tlm_probe checkout when it runs from one, else None
(an installed package; its version is recorded next to it).

Read from the .git files directly, not by running `git`: a probe or eval spawns no process (tlm eval's
test checks that), and a missing git binary or a foreign repository cannot print errors into a log.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

SHA = re.compile(r"^[0-9a-f]{40}$")


def _git_dir(start: Path) -> Path | None:
    """The .git folder of the checkout holding `start` (a worktree's .git file points to its own)."""
    for folder in (start, *start.parents):
        dot = folder / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():
            text = dot.read_text().strip()
            if text.startswith("gitdir:"):
                found = Path(text.split(":", 1)[1].strip())
                return found if found.is_absolute() else (folder / found).resolve()
    return None


def _resolve(git: Path, ref: str) -> str | None:
    """A ref's commit: loose ref files first (in the worktree's folder, then the common one), then
    packed-refs."""
    common = git / "commondir"
    roots = [git] + ([(git / common.read_text().strip()).resolve()] if common.is_file() else [])
    for root in roots:
        loose = root / ref
        if loose.is_file():
            sha = loose.read_text().strip()
            return sha if SHA.match(sha) else None
    for root in roots:
        packed = root / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref and SHA.match(parts[0]):
                    return parts[0]
    return None


@lru_cache(maxsize=1)
def code_commit() -> str | None:
    """The 40-hex commit checked out where this package's files live, or None outside a git checkout."""
    try:
        git = _git_dir(Path(__file__).resolve().parent)
        if git is None or not (git / "HEAD").is_file():
            return None
        head = (git / "HEAD").read_text().strip()
        if SHA.match(head):  # a detached HEAD
            return head
        return _resolve(git, head[len("ref:"):].strip()) if head.startswith("ref:") else None
    except OSError:  # an unreadable .git is no reason to fail a probe
        return None
