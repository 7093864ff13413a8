"""builtin:env — the Python source and documentation of the installed environment, as documents.

The corpus the confirmatory study trains on (issue 31): large enough (tens of millions of BPE tokens) that
a 0.7M-parameter model sees every training token at most once, offline, and identical on every machine
that ran the README set-up, because every distribution in that environment is pinned by constraints.txt.

A document is one file (.py, .pyi, .md, .rst, .txt) listed in a distribution's RECORD, read as UTF-8.
Left out: the bootstrap tools that come with the interpreter rather than the pins (pip, setuptools,
wheel), tlm_probe itself (it changes with every commit), *.dist-info metadata, and files over MAX_BYTES
(generated tables, not prose or code). Files are visited in (distribution name, path) order and a file
whose text was already seen (same BLAKE2b digest) is skipped: vendored copies are one document.
`corpus_manifest()` names the distributions and versions, which `tlm data prepare` records in meta.json
beside the content hash of every split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

SUFFIXES = (".py", ".pyi", ".md", ".rst", ".txt")
MAX_BYTES = 1_000_000
EXCLUDED = frozenset({"pip", "setuptools", "wheel", "tlm-probe", "tlm_probe"})
"""Distributions left out: interpreter bootstrap tools and this package itself."""


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _distributions() -> list[metadata.Distribution]:
    """Installed distributions (first of each name on sys.path), sorted by canonical name."""
    seen: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        name = _canonical(dist.metadata["Name"] or "")
        if name and name not in EXCLUDED and name not in seen:
            seen[name] = dist
    return [seen[k] for k in sorted(seen)]


def corpus_manifest() -> list[str]:
    """`name==version` of every distribution the corpus reads, in reading order."""
    return [f"{_canonical(d.metadata['Name'])}=={d.version}" for d in _distributions()]


def _files(dist: metadata.Distribution) -> Iterator[Path]:
    paths = [p for p in dist.files or () if p.suffix in SUFFIXES and ".dist-info" not in p.parts[0]]
    for rel in sorted(paths, key=lambda p: p.as_posix()):
        path = Path(dist.locate_file(rel))
        if path.is_file() and path.stat().st_size <= MAX_BYTES:
            yield path


def env_documents(rest: str = "") -> Iterator[str]:
    """Every distinct document of the corpus, in a fixed order."""
    seen: set[bytes] = set()
    for dist in _distributions():
        for path in _files(dist):
            text = path.read_text(encoding="utf-8", errors="replace")
            digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            if text.strip() and digest not in seen:
                seen.add(digest)
                yield text
