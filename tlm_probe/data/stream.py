"""Token streams for training: the train and validation ids, the batch order and the fixed eval set.

The batch order is a pure function of (train ids, seq_len, seed, step): epoch e visits the
non-overlapping windows of the train stream in the order of a permutation drawn from
numpy.random.default_rng([seed, e]). It never depends on the model, so every arm of a comparison sees the
same tokens, and the data position of a run is just its step count (resume needs nothing else).
Global sample k of step s is s·G + k (G = global batch); rank r of W, micro-step m takes samples
[m·W·B + r·B, m·W·B + (r+1)·B), so 1 process with batch G and W processes with batch G/W see one batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tlm_probe.data.sources import iter_documents
from tlm_probe.data.tokens import check_shard_ids, is_prepared, lazy_token_ids, load_token_ids
from tlm_probe.data.windows import documents_covered, pick
from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import int_field, read_json_object
from tlm_probe.models.tokenizer_meta import TOKENIZER_META
from tlm_probe.tokenizer import load_saved_tokenizer, make_tokenizer

TOKEN_SUFFIXES = (".npy", ".pt", ".pth", ".tok")
RAW_VAL_FRACTION = 0.05
"""Tail of a bare token file held out for validation (it has no documents to hash)."""


@dataclass
class TokenData:
    """Training and validation ids of one source under one tokenizer (None for bare token files)."""

    train: np.ndarray
    val: np.ndarray
    tokenizer: object | None
    source: str
    vocab_size: int
    info: dict = field(default_factory=dict)


def tokenize_documents(docs, tokenizer) -> np.ndarray:
    """Concatenate the documents' ids, each followed by the tokenizer's end-of-text id (when it has one)."""
    docs = list(docs)
    encode_batch = getattr(tokenizer, "encode_batch", None)
    parts = encode_batch(docs) if encode_batch else [tokenizer.encode(d) for d in docs]
    sep = np.array([tokenizer.eos_id] if tokenizer.eos_id is not None else [], dtype=np.uint32)
    return np.concatenate([x for p in parts for x in (p, sep)]).astype(np.uint32)


def load_token_data(source: str, tokenizer_spec: str = "byte") -> TokenData:
    """Tokenize a text source (train and val split), or read a prepared folder or bare token file."""
    if is_prepared(source):
        return _prepared(source)
    if Path(source).suffix in TOKEN_SUFFIXES and Path(source).is_file():
        return _bare_tokens(source)
    train_docs = list(iter_documents(source, "train"))
    val_docs = list(iter_documents(source, "val"))
    tok = make_tokenizer(tokenizer_spec, train_docs)
    train, val = tokenize_documents(train_docs, tok), tokenize_documents(val_docs, tok)
    info = {
        "train_documents": len(train_docs),
        "val_documents": len(val_docs),
        "tokenizer": tok.name,
        "tokenizer_hash": tok.hash,
    }
    return TokenData(train, val, tok, source, tok.vocab_size, info)


def _prepared(source: str) -> TokenData:
    """A `tlm data prepare` folder, its files checked first: meta.json, the tokenizer's record of its
    kind, and every id against the vocabulary (each fault one line naming the file)."""
    meta_path = Path(source) / "meta.json"
    meta = read_json_object(meta_path)
    vocab = int_field(meta, "vocab_size", meta_path, low=1)
    tok_meta = Path(source) / "tokenizer" / TOKENIZER_META
    if tok_meta.is_file() and not isinstance(read_json_object(tok_meta).get("kind"), str):
        raise UserError(f"{tok_meta} has no tokenizer 'kind' (byte, bpe or hf)")
    tok = load_saved_tokenizer(Path(source) / "tokenizer")
    check_shard_ids(Path(source), vocab, str(meta_path))
    train, val = lazy_token_ids(source, "train"), lazy_token_ids(source, "val")
    return TokenData(train, val, tok, source, vocab, meta)


def _bare_tokens(source: str) -> TokenData:
    ids = load_token_ids(source)
    n_val = max(1, int(len(ids) * RAW_VAL_FRACTION))
    if len(ids) - n_val < 2:
        raise UserError(f"{source} holds only {len(ids)} tokens: too few to train on")
    return TokenData(ids[:-n_val], ids[-n_val:], None, source, int(ids.max()) + 1, {"val_fraction": 0.05})


class BatchOrder:
    """Which train windows form each batch; see the module docstring."""

    def __init__(self, ids: np.ndarray, seq_len: int, seed: int):
        self.ids, self.seq_len, self.seed = ids, seq_len, seed
        self.n_windows = (len(ids) - 1) // seq_len
        if self.n_windows < 1:
            raise UserError(f"the training split has {len(ids)} tokens, fewer than seq_len+1={seq_len + 1}")
        self._epoch, self._perm = -1, np.zeros(0, dtype=np.int64)

    def _window_start(self, k: int) -> int:
        epoch, i = divmod(k, self.n_windows)
        if epoch != self._epoch:
            self._epoch = epoch
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_windows)
        return int(self._perm[i]) * self.seq_len

    def samples(self, first: int, count: int) -> torch.Tensor:
        """Global samples first..first+count-1 as a (count, seq_len + 1) int64 tensor."""
        starts = [self._window_start(k) for k in range(first, first + count)]
        rows = np.stack([np.asarray(self.ids[s : s + self.seq_len + 1], dtype=np.int64) for s in starts])
        return torch.from_numpy(rows)

    def micro_batch(self, step: int, micro: int, rank: int, batch: int, accum: int, world: int):
        """Rank `rank`'s part of micro-step `micro` of optimizer step `step`: (batch, seq_len + 1)."""
        first = step * batch * accum * world + (micro * world + rank) * batch
        return self.samples(first, batch)


def eval_windows(val: np.ndarray, seq_len: int, max_tokens: int, sample: str = "spread",
                 seed: int = 0) -> torch.Tensor:
    """The fixed validation set: windows of seq_len + 1 ids from the grid of consecutive windows that
    overlap by one (each validation id after the first is predicted by exactly one grid window); at most
    `max_tokens` predicted ids. Which grid windows: data/windows.py (spread across the whole split by
    default, the same draw for every model and training seed; prefix: the first ones)."""
    n_grid = (len(val) - 1) // seq_len
    if n_grid < 1:
        raise UserError(f"the validation split has {len(val)} tokens, fewer than seq_len+1={seq_len + 1}")
    chosen = pick(n_grid, max(1, max_tokens // seq_len), sample, seed)
    rows = [np.asarray(val[i * seq_len : i * seq_len + seq_len + 1], dtype=np.int64) for i in chosen]
    return torch.from_numpy(np.stack(rows))


def eval_documents(val: np.ndarray, seq_len: int, max_tokens: int, tokenizer, sample: str = "spread",
                   seed: int = 0) -> tuple[int, int] | None:
    """(documents the validation set's predicted ids touch, documents in the split); see eval_windows."""
    n_grid = (len(val) - 1) // seq_len
    chosen = pick(n_grid, max(1, max_tokens // seq_len), sample, seed)
    spans = [(int(i) * seq_len + 1, int(i) * seq_len + seq_len) for i in chosen]
    return documents_covered(val, spans, getattr(tokenizer, "eos_id", None))


def target_bytes(windows: torch.Tensor, tokenizer) -> int | None:
    """UTF-8 bytes of the predicted ids (for bits per byte); None without a tokenizer."""
    if tokenizer is None:
        return None
    return int(sum(tokenizer.n_bytes(row[1:].numpy()) for row in windows))

