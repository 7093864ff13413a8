"""builtin:env — the Python source and documentation of the installed environment, as documents.

The corpus the confirmatory study trains on (issue 31): large enough (tens of millions of BPE tokens) that
a 0.7M-parameter model sees every training token at most once, offline, and identical on every machine
that ran the README set-up. The distributions it reads are a frozen list, env_corpus_v1.txt (name==version,
all pinned by constraints.txt), so adding a dependency to the project later changes nothing here; a
listed distribution that is missing or at another version is an error naming it, never a silently
different corpus.

A document is one file (.py, .pyi, .md, .rst, .txt) listed in a distribution's RECORD, read as UTF-8.
The list left out the bootstrap tools that come with the interpreter rather than the pins (pip,
setuptools, wheel) and tlm_probe itself (it changes with every commit); *.dist-info metadata and files over
_MAX_BYTES (generated tables, not prose or code) are skipped. Files are visited in (distribution name,
path) order and a file whose text was already seen (same BLAKE2b digest) is skipped: vendored copies are
one document.
`corpus_manifest()` names the distributions and versions, which `tlm data prepare` records in meta.json
beside the content hash of every split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from tlm_probe.errors import UserError

_SUFFIXES = (".py", ".pyi", ".md", ".rst", ".txt")
_MAX_BYTES = 1_000_000
DISTRIBUTIONS = Path(__file__).with_name("env_corpus_v1.txt")


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def pinned() -> list[tuple[str, str]]:
    """(name, version) of every distribution the corpus reads, in reading order (DISTRIBUTIONS)."""
    lines = [ln.strip() for ln in DISTRIBUTIONS.read_text().splitlines()]
    return [tuple(ln.split("==")) for ln in lines if ln and not ln.startswith("#")]


def _distributions() -> list[metadata.Distribution]:
    """The installed distributions of DISTRIBUTIONS (first of each name on sys.path), in its order."""
    installed: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        installed.setdefault(_canonical(dist.metadata["Name"] or ""), dist)
    out = []
    for name, version in pinned():
        dist = installed.get(name)
        if dist is None or dist.version != version:
            found = "not installed" if dist is None else f"{dist.version} is installed"
            raise UserError(f"builtin:env reads {name}=={version} ({found}): run the README set-up "
                            "(pip install -c constraints.txt) to get the environment it is made from")
        out.append(dist)
    return out


def corpus_manifest() -> list[str]:
    """`name==version` of every distribution the corpus reads, in reading order."""
    return [f"{_canonical(d.metadata['Name'])}=={d.version}" for d in _distributions()]


def _files(dist: metadata.Distribution) -> Iterator[Path]:
    paths = [p for p in dist.files or () if p.suffix in _SUFFIXES and ".dist-info" not in p.parts[0]]
    for rel in sorted(paths, key=lambda p: p.as_posix()):
        path = Path(dist.locate_file(rel))
        if path.is_file() and path.stat().st_size <= _MAX_BYTES:
            yield path


def env_documents(rest: str = "") -> Iterator[str]:
    """Every distinct document of the corpus, in a fixed order."""
    for _, _, text in env_files():
        yield text


def env_files() -> Iterator[tuple[str, Path, str]]:
    """(distribution name, file, text) of every distinct document, in the corpus' order."""
    seen: set[bytes] = set()
    for dist in _distributions():
        for path in _files(dist):
            text = path.read_text(encoding="utf-8", errors="replace")
            digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            if text.strip() and digest not in seen:
                seen.add(digest)
                yield dist.metadata["Name"], path, text
