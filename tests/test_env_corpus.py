"""builtin:env (issue 31): the installed environment's source and docs, deduplicated, split 90/5/5 by
document hash, disjoint by document; `tlm data prepare` writes test/ and content hashes for it."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from tlm_probe.data import env_corpus, sources
from tlm_probe.data.sources import iter_documents, split_of
from tlm_probe.errors import UserError


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@pytest.fixture(scope="module")
def env_docs():
    return list(env_corpus.env_documents())


def test_env_corpus_is_large_distinct_and_leaves_out_tlm(env_docs):
    assert len(env_docs) > 5_000
    assert sum(len(d) for d in env_docs) > 50_000_000  # ~ tens of millions of BPE tokens, > 7.5M
    assert len({_digest(d) for d in env_docs}) == len(env_docs)  # deduplicated by document hash
    names = [m.split("==")[0] for m in env_corpus.corpus_manifest()]
    assert names == sorted(names) and "torch" in names
    assert not set(names) & {"tlm-probe", "pip", "setuptools", "wheel"}


def test_env_splits_are_disjoint_by_document_and_cover_it(env_docs):
    """Recomputed from the hash bands independently of iter_documents: each document in exactly one split."""
    by_split = {s: {_digest(d) for d in iter_documents("builtin:env", s)} for s in ("train", "val", "test")}
    assert not by_split["train"] & by_split["val"]
    assert not by_split["train"] & by_split["test"]
    assert not by_split["val"] & by_split["test"]
    assert set().union(*by_split.values()) == {_digest(d) for d in env_docs}
    for doc in env_docs[:2000]:
        band = int.from_bytes(hashlib.blake2b(doc.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                              "big") % 100
        want = "val" if band < 5 else "test" if band < 10 else "train"
        assert _digest(doc) in by_split[want]
    share = {s: len(v) / len(env_docs) for s, v in by_split.items()}
    assert 0.03 < share["val"] < 0.07 and 0.03 < share["test"] < 0.07


def test_other_sources_keep_their_two_way_split():
    """Adding the test band changed nothing for the existing corpora (no test split, same train/val)."""
    docs = list(iter_documents("builtin:pydoc", "all"))
    assert all(split_of(d) in ("train", "val") for d in docs)
    with pytest.raises(UserError, match="no documents in split 'test'"):
        list(iter_documents("builtin:pydoc", "test"))
    assert sources.TEST_PERCENT == {"builtin:env": 5}


def test_prepare_writes_test_split_and_content_hashes(tmp_path, monkeypatch):
    """A small stand-in for the env corpus (same split rule) through the real prepare."""
    from tlm_probe.data import prepare

    docs = [f"def f{i}(x):\n    return x * {i}  # document {i}\n" for i in range(400)]
    monkeypatch.setitem(sources.TEST_PERCENT, "builtin:env", 5)
    monkeypatch.setattr(sources, "env_documents", lambda rest="": iter(docs))
    monkeypatch.setattr(prepare, "corpus_manifest", lambda: ["x==1"])
    meta = prepare.prepare("builtin:env", tmp_path / "out", tokenizer="byte")
    want = {s: [d for d in docs if split_of(d, 5) == s] for s in ("train", "val", "test")}
    for split, texts in want.items():
        assert meta[split]["documents"] == len(texts)
        h = hashlib.blake2b(digest_size=16)
        for t in texts:
            h.update(hashlib.blake2b(t.encode(), digest_size=16).digest())
        assert meta[split]["content_hash"] == h.hexdigest()
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["distributions"] == ["x==1"]
    from tlm_probe.data.tokens import load_token_ids

    test_ids = np.asarray(load_token_ids(tmp_path / "out", "test"))
    assert len(test_ids) == sum(len(t.encode()) + 1 for t in want["test"])  # bytes + one EOS each


def test_env_corpus_is_a_frozen_list_and_refuses_another_environment(monkeypatch, tmp_path):
    """Installing another package changes nothing (the list is frozen); a listed one at another version
    is one error naming it, not a silently different corpus."""
    names = [n for n, _ in env_corpus.pinned()]
    assert "import-linter" not in names and "grimp" not in names  # dev tools added after the study began
    manifest = tmp_path / "m.txt"
    manifest.write_text("# test\ntorch==0.0.1\n")
    monkeypatch.setattr(env_corpus, "DISTRIBUTIONS", manifest)
    with pytest.raises(UserError, match=r"builtin:env reads torch==0.0.1 \(2\.13"):
        next(env_corpus.env_documents())
