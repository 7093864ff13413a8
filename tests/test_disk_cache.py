"""The on-disk cache (built corpora, weight hashes): verified reads, atomic writes, keys that invalidate."""

import hashlib
import os

import pytest

from tlm_probe.data import corpus_cache
from tlm_probe.files import content_hash as ch
from tlm_probe.files import disk_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(corpus_cache, "_LOADED", {})
    return tmp_path / "cache"


def test_round_trip_and_every_mismatch_is_a_miss(cache):
    assert disk_cache.read("e", "k") is None
    assert disk_cache.write("e", "k", b"payload\nwith lines")
    assert disk_cache.read("e", "k") == b"payload\nwith lines"
    assert disk_cache.read("e", "other key") is None
    path = cache / "e"
    head, body = path.read_bytes().split(b"\n", 1)
    path.write_bytes(head + b"\n" + body.replace(b"payload", b"PAYLOAD"))  # same size, wrong checksum
    assert disk_cache.read("e", "k") is None
    path.write_bytes(head + b"\n" + body[:-3])  # truncated
    assert disk_cache.read("e", "k") is None
    path.write_bytes(b"garbage")
    assert disk_cache.read("e", "k") is None
    assert [p.name for p in cache.iterdir()] == ["e"]  # no temporary files left behind


def test_location_env_and_off(tmp_path, monkeypatch):
    monkeypatch.delenv(disk_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.cache_dir() == tmp_path / "xdg" / "tlm_probe"
    monkeypatch.setenv(disk_cache.ENV, "off")
    assert disk_cache.cache_dir() is None
    assert not disk_cache.write("e", "k", b"x") and disk_cache.read("e", "k") is None


def test_unwritable_cache_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(disk_cache.ENV, str(blocker / "cache"))
    assert disk_cache.write("e", "k", b"x") is False
    assert disk_cache.read("e", "k") is None


def test_corpus_is_built_once_then_read_from_disk(cache, monkeypatch):
    calls = []

    def build():
        calls.append(1)
        return iter(["doc one", "doc two \u00e9\U0001f600"])

    assert corpus_cache.cached_corpus("toy", build) == ("doc one", "doc two \u00e9\U0001f600")
    monkeypatch.setattr(corpus_cache, "_LOADED", {})  # a new process
    assert corpus_cache.cached_corpus("toy", build) == ("doc one", "doc two \u00e9\U0001f600")
    assert len(calls) == 1
    for entry in cache.iterdir():  # corrupt the entry: rebuilt, not trusted
        entry.write_bytes(entry.read_bytes()[:-2])
    monkeypatch.setattr(corpus_cache, "_LOADED", {})
    assert corpus_cache.cached_corpus("toy", build)[0] == "doc one" and len(calls) == 2


def test_cached_pydoc_equals_a_fresh_build(cache, monkeypatch):
    from tlm_probe.data import iter_documents, sources

    fresh = sources._pydoc_corpus.__wrapped__()  # the builder itself, bypassing every cache
    first = list(iter_documents("builtin:pydoc"))
    monkeypatch.setattr(corpus_cache, "_LOADED", {})
    monkeypatch.setattr(sources, "_pydoc", lambda rest: pytest.fail("rebuilt despite the disk cache"))
    assert list(iter_documents("builtin:pydoc")) == first == list(fresh)
    assert corpus_cache.corpus_key("pydoc") != corpus_cache.corpus_key("stdlib")


def test_weight_hash_is_cached_and_invalidated_by_a_rewrite(cache, tmp_path, monkeypatch):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights-1")
    (folder / "config.json").write_text("{}")

    def independent():
        h = hashlib.sha256()
        for p in sorted(folder.glob("*.safetensors")):
            h.update(p.name.encode() + p.read_bytes())
        return h.hexdigest()

    assert ch.content_hash(folder) == independent()
    real = ch.hash_files
    monkeypatch.setattr(ch, "hash_files", lambda files: pytest.fail("re-hashed an unchanged file"))
    assert ch.content_hash(folder) == independent()
    monkeypatch.setattr(ch, "hash_files", real)
    st = (folder / "model.safetensors").stat()
    (folder / "model.safetensors").write_bytes(b"weights-2")  # same size
    os.utime(folder / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime
    assert ch.content_hash(folder) == independent()
    assert ch.content_hash(tmp_path / "missing") is None


def test_weight_hash_is_read_from_disk_once_a_process_and_follows_a_rewrite(cache, tmp_path, monkeypatch):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights-1")
    monkeypatch.setattr(ch, "_KNOWN", {})
    first = ch.content_hash(folder)
    monkeypatch.setattr(ch.disk_cache, "read", lambda *a: pytest.fail("read the disk entry again"))
    assert ch.content_hash(folder) == first
    (folder / "model.safetensors").write_bytes(b"weights-2")  # a new key: hashed again, not remembered
    monkeypatch.setattr(ch.disk_cache, "read", lambda *a: None)
    assert ch.content_hash(folder) == hashlib.sha256(b"model.safetensors" + b"weights-2").hexdigest()
