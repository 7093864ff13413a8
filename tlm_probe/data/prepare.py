"""`tlm data prepare`: tokenize a source into uint32 shards, train/ and val/ (the hash split; test/
too for a source with a test split), plus the tokenizer and meta.json (token counts and a content hash
per split: BLAKE2b over the documents' texts in order). Written into a temporary sibling folder and
renamed at the end, so an interrupted run leaves nothing half-written under the output name; --overwrite
replaces only what an earlier `tlm data prepare` wrote there (its manifest)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np

from tlm_probe.data.env_corpus import corpus_manifest
from tlm_probe.data.options import PrepareOptions
from tlm_probe.data.sources import has_test_split, iter_documents
from tlm_probe.data.tokens import SHARD_SUFFIX, write_shard
from tlm_probe.files.fileio import publish, temp_folder
from tlm_probe.files.folder_lock import folder_lock
from tlm_probe.files.out_folder import check_apart, claim
from tlm_probe.tokenizer import make_tokenizer, parse_bpe


class ShardWriter:
    """Buffers ids and writes a shard every `shard_tokens` ids."""

    def __init__(self, folder: Path, tokenizer, shard_tokens: int):
        self.folder, self.tok, self.limit = folder, tokenizer, shard_tokens
        folder.mkdir(parents=True)
        self.parts: list[np.ndarray] = []
        self.n_buffered = self.n_bytes = self.n_tokens = self.n_docs = self.n_shards = 0
        self.content = hashlib.blake2b(digest_size=16)

    def add(self, text: str) -> None:
        ids = self.tok.encode(text)
        self.content.update(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
        eos = [] if self.tok.eos_id is None else [self.tok.eos_id]
        self.parts.append(np.concatenate([ids, np.array(eos, dtype=np.uint32)]))
        self.n_buffered += len(self.parts[-1])
        self.n_bytes += len(text.encode("utf-8"))
        self.n_docs += 1
        if self.n_buffered >= self.limit:
            self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        ids = np.concatenate(self.parts)
        path = self.folder / f"shard_{self.n_shards:05d}{SHARD_SUFFIX}"
        write_shard(path, ids, self.tok.vocab_size, self.tok.hash, self.n_bytes_in_buffer(ids))
        self.n_tokens += len(ids)
        self.n_shards += 1
        self.parts, self.n_buffered = [], 0

    def n_bytes_in_buffer(self, ids: np.ndarray) -> int:
        return self.tok.n_bytes(ids)

    def summary(self) -> dict:
        return {
            "documents": self.n_docs,
            "tokens": self.n_tokens,
            "bytes": self.n_bytes,
            "shards": self.n_shards,
            "content_hash": self.content.hexdigest(),
        }


def prepare(
    source: str,
    out: Path,
    options: PrepareOptions | None = None,
    *,
    overwrite: bool = False,
    on_doc: Callable[[], None] | None = None,
    **fields,
) -> dict:
    """Tokenize `source` into OUT/{train,val}/shard_*.tok + OUT/tokenizer/ + OUT/meta.json.

    `options` is a PrepareOptions (`tlm data prepare`'s options), or give its fields as keywords
    (`tokenizer=`, `shard_tokens=`), which replace those of `options`. overwrite: --overwrite."""
    out = Path(out)
    opts = replace(options or PrepareOptions(), **fields)
    check_inputs(source, out, opts, overwrite)
    train_docs = iter_documents(source, "train")
    if parse_bpe(opts.tokenizer) is not None:  # the BPE learns from the training split only
        train_docs = list(train_docs)
    tok = make_tokenizer(opts.tokenizer, train_docs if isinstance(train_docs, list) else None)
    with folder_lock(out), temp_folder(out) as tmp:
        meta = _write_splits(source, tmp, tok, train_docs, opts.shard_tokens, on_doc)
        publish(tmp, out, "data prepare")
    return meta


def check_inputs(source: str, out: Path, options: PrepareOptions, overwrite: bool) -> None:
    """Fail fast (before any progress bar or file) on a bad output or source (the options checked
    themselves when they were made)."""
    check_apart(out, [source])
    claim(out, overwrite=overwrite, writes=("train", "val", "test", "tokenizer", "meta.json"),
          kind="data prepare")
    for split in splits_of(source):
        next(iter(iter_documents(source, split)))  # a UserError when the split is empty


def splits_of(source: str) -> tuple[str, ...]:
    return ("train", "val", "test") if has_test_split(source) else ("train", "val")


def _write_splits(source, tmp: Path, tok, train_docs: Iterable[str], shard_tokens: int, on_doc) -> dict:
    meta = {
        "source": source,
        "tokenizer": tok.name,
        "tokenizer_hash": tok.hash,
        "vocab_size": tok.vocab_size,
        "dtype": "uint32",
        "eos_id": tok.eos_id,
    }
    if source == "builtin:env":
        meta["distributions"] = corpus_manifest()
    held_out = [(s, iter_documents(source, s)) for s in splits_of(source)[1:]]
    for split, docs in (("train", train_docs), *held_out):
        writer = ShardWriter(tmp / split, tok, shard_tokens)
        for doc in docs:
            writer.add(doc)
            if on_doc:
                on_doc()
        writer.flush()
        meta[split] = writer.summary()
    (tmp / "tokenizer").mkdir()
    tok.save(tmp / "tokenizer")
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta
