"""Data -> sequences of token ids -> padded batches with attention masks (the probe's and diff's token
preparation: model-free, it takes the tokenizer and the vocabulary size; what a model accepts, its
positions, is capture/inputs.py's).

Text is tokenised document by document with the model's tokenizer and each document is cut into chunks of
seq_len tokens (document-aligned; the last chunk of a document is shorter and padded in its batch). Special
tokens ([CLS]/[SEP], BOS) are added to every chunk the way the tokenizer adds them to a sentence.
Token-id data (.npy, .pt, our .tok shards, prepared folders) is cut into consecutive chunks of seq_len;
a 2-D array's rows are its sequences: never packed across rows, seq_len defaults to the row length, a
shorter seq_len cuts each row into chunks, and a longer one is refused (rows are not padded: an error
says so, rather than a silent change of what a sequence is).
Batches are right-padded, so real tokens keep positions 0..n-1 (the default position ids are correct) and
position 0 is each sequence's first token.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeAlias

import numpy as np
import torch

from tlm_probe.data.sources import iter_documents
from tlm_probe.data.stream import TOKEN_SUFFIXES
from tlm_probe.data.tokens import load_token_rows
from tlm_probe.errors import UserError

Corpus: TypeAlias = str | Path | Sequence[str] | np.ndarray | torch.Tensor
"""A corpus as the library takes it: what --data takes (builtin:pydoc, a text file, folder or glob, a .jsonl,
hf:NAME, a token file or folder), a list of texts, or token ids in memory (1-D: a stream; 2-D: rows)."""


def is_token_source(data) -> bool:
    if isinstance(data, (np.ndarray, torch.Tensor)):
        return True
    if not isinstance(data, (str, Path)):
        return False
    p = Path(data)
    return (p.is_file() and p.suffix in TOKEN_SUFFIXES) or (
        p.is_dir() and ((p / "meta.json").is_file() or any(p.glob("*.tok")))
    )


def token_sequences(
    data, seq_len: int, tokenizer, vocab_size: int, split: str = "all", where: str | None = None,
    model: str = "the model",
) -> Iterator[list[int]]:
    """Sequences (lists of ids, length <= seq_len) from a source string, a token array, or texts (cut with
    `tokenizer`; ids are checked against `vocab_size`). where: the source's name in error messages
    (default: the data itself, cut to 80 characters); model: the model's name in them."""
    if is_token_source(data):
        return _id_chunks(_load_ids(data, split), seq_len, vocab_size, where or str(data)[:80])
    if tokenizer is None:
        raise UserError(
            f"{model} has no tokenizer: give token ids (.npy, .pt, .tok shards) instead of text "
            f"data {str(data)[:80]!r}"
        )
    if isinstance(data, (str, Path)):
        docs: Iterable[str] = iter_documents(str(data), split)
    elif isinstance(data, Iterable) and not isinstance(data, bytes | Mapping):
        docs = data
    else:
        raise UserError(f"data is a source (builtin:pydoc, a file, a folder, hf:NAME), token ids or a list "
                        f"of texts, not {type(data).__name__}")
    return _text_chunks(tokenizer, docs, seq_len)


def read_source(data: Corpus, split: str = "all") -> Corpus:
    """A token file or folder read into its array once (its row length and its sequences both need it:
    read twice, a large token file cost two full reads per probe); any other source as given."""
    return _load_ids(data, split) if is_token_source(data) else data


def _load_ids(data, split: str) -> np.ndarray:
    """1-D (a token stream) or 2-D (one sequence per row) ids; anything else is a UserError."""
    if isinstance(data, torch.Tensor):
        data = data.cpu().numpy()
    if isinstance(data, np.ndarray):
        if data.ndim > 2:
            raise UserError(
                f"token array of shape {tuple(data.shape)}: expected 1-D or 2-D (rows = sequences)"
            )
        return data
    return load_token_rows(data, split)


def row_length(data, split: str = "all") -> int | None:
    """The row length of a 2-D token array (the default seq_len for it), else None."""
    if not is_token_source(data):
        return None
    ids = _load_ids(data, split)
    return int(ids.shape[1]) if ids.ndim == 2 else None


def _id_chunks(ids: np.ndarray, seq_len: int, vocab: int, where: str) -> Iterator[list[int]]:
    if ids.size == 0:
        raise UserError(f"no tokens in {where}")
    top = int(ids.max())
    if top >= vocab or int(ids.min()) < 0:
        raise UserError(f"token id {top} in {where} is out of range for the model's vocabulary of {vocab}")
    if ids.ndim == 2 and seq_len > ids.shape[1]:
        raise UserError(
            f"--seq-len {seq_len} is longer than the rows of {where} ({ids.shape[1]} tokens): rows are "
            "sequences and are not packed together; use --seq-len <= the row length"
        )
    for row in ids if ids.ndim == 2 else (ids,):
        for i in range(0, row.size, seq_len):
            yield row[i : i + seq_len].astype(np.int64).tolist()


def _text_chunks(tok, docs: Iterable[str], seq_len: int) -> Iterator[list[int]]:
    prefix, suffix = special_affixes(tok)
    body = seq_len - len(prefix) - len(suffix)
    if body < 1:
        raise UserError(f"--seq-len {seq_len} leaves no room for text next to the special tokens")
    for doc in docs:
        if not isinstance(doc, str):
            raise UserError(f"a list of texts holds texts, not {type(doc).__name__} ({str(doc)[:40]!r})")
        ids = tok(doc, add_special_tokens=False, verbose=False)["input_ids"]
        for i in range(0, len(ids), body):
            yield prefix + ids[i : i + body] + suffix


def special_affixes(tok) -> tuple[list[int], list[int]]:
    """The ids a tokenizer puts before and after a text ([CLS] ... [SEP], <s> ..., nothing for GPT-2)."""
    plain = tok("a", add_special_tokens=False)["input_ids"]
    full = tok("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return full[:start], full[start + len(plain) :]
    return [], []


def limit_tokens(seqs: Iterable[list[int]], max_tokens: int | None) -> Iterator[list[int]]:
    """Stop after exactly max_tokens tokens (the last sequence is cut short)."""
    left = max_tokens if max_tokens is not None else float("inf")
    for s in seqs:
        if left <= 0:
            return
        s = s[: int(min(len(s), left))]
        left -= len(s)
        yield s


def shard(seqs: Iterable[list[int]], rank: int, world: int) -> Iterator[list[int]]:
    """Data-parallel split: sequence i goes to rank i % world."""
    for i, s in enumerate(seqs):
        if i % world == rank:
            yield s


def pad_id(tok) -> int:
    """The tokenizer's padding id (else its end-of-text id, else 0)."""
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tok, attr, None) if tok is not None else None
        if isinstance(value, int):
            return value
    return 0  # any id works: padded positions are masked and never counted


def batches(seqs: Iterable[list[int]], batch_size: int, pad: int, device: str = "cpu"):
    """Yield (input_ids, attention_mask), each (B, T_max), right-padded."""
    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {batch_size}")
    buf: list[list[int]] = []
    for s in seqs:
        if s:
            buf.append(s)
        if len(buf) == batch_size:
            yield _pad(buf, pad, device)
            buf = []
    if buf:
        yield _pad(buf, pad, device)


def _pad(buf: list[list[int]], pad: int, device: str):
    T = max(len(s) for s in buf)
    ids = torch.full((len(buf), T), pad, dtype=torch.long)
    mask = torch.zeros((len(buf), T), dtype=torch.long)
    for i, s in enumerate(buf):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids.to(device), mask.to(device)
