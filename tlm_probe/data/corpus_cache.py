"""The built-in corpora (builtin:pydoc, builtin:stdlib) cached on disk, keyed by the Python that built them.

Building builtin:pydoc parses ~170 stdlib files (seconds per run); the result depends only on the Python
installation and on how we build it, so the key is the interpreter version, the stdlib folder and
CORPUS_VERSION (bump it whenever a builder changes what it yields). Storage, atomicity and verification are
tlm_probe.files.disk_cache's; a miss or an unusable cache just builds the corpus as before.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from collections.abc import Callable, Iterable

from tlm_probe.files import disk_cache
from tlm_probe.files.jsonfile import MAX_DEPTH, nesting_depth

CORPUS_VERSION = 1


def corpus_key(name: str) -> str:
    stdlib = sysconfig.get_paths()["stdlib"]
    return json.dumps({"corpus": name, "v": CORPUS_VERSION, "python": sys.version, "stdlib": stdlib})


_LOADED: dict[str, tuple[str, ...]] = {}  # this process's copy: a corpus never changes while we run


def cached_corpus(name: str, build: Callable[[], Iterable[str]]) -> tuple[str, ...]:
    """The documents of corpus `name`: from the disk cache when it verifies, else built and stored."""
    if name not in _LOADED:
        _LOADED[name] = _load_or_build(name, build)
    return _LOADED[name]


def _load_or_build(name: str, build: Callable[[], Iterable[str]]) -> tuple[str, ...]:
    key = corpus_key(name)
    entry = f"corpus-{name}-{sys.implementation.cache_tag}-{disk_cache.key_digest(key)}.json"
    payload = disk_cache.read(entry, key)
    if payload is not None:
        docs = _stored(payload)
        if isinstance(docs, list) and all(isinstance(d, str) for d in docs):
            return tuple(docs)
    docs = tuple(build())
    disk_cache.write(entry, key, json.dumps(docs, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return docs


def _stored(payload: bytes) -> object:
    """The cached documents, or None (a miss) when the payload is not JSON within the nesting bound: the
    stdlib's text can hold lone surrogates, stored escaped, so it is parsed as text, not as UTF-8."""
    text = payload.decode("utf-8", "surrogatepass")
    if nesting_depth(payload) > MAX_DEPTH:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
