"""Perplexity of a model on any data source the trainer reads: token-level perplexity and bits per byte.

Text sources are split by document hash exactly as in training and tokenized with the MODEL's tokenizer
(documents joined by its end-of-text id, as the trainer does); token files and prepared folders are read
as ids (their validation part).

Sliding-window rule: with context L (default: the model's maximum) and stride S (default L), window k
holds ids x[kS .. kS+L] (L+1 ids) and predicts x[kS+1 .. kS+L]. The first window scores all L targets;
every later window scores only its last S targets, so each id after the first is scored exactly once,
with at least L-S ids of context. Windows start while they fit; ids after the last full window are not
scored. With S = L these are the trainer's validation windows (data.stream.eval_windows), so the loss
equals the trainer's val_loss on the same ids. When --max-tokens scores fewer windows than the split holds,
which windows is data/windows.py's choice: by default a seeded sample spread uniformly over every window of
the split (the same for every model), with the standard error of the estimate over windows and the number
of documents the scored ids touch; `prefix` takes the first windows instead. Bits per byte = summed NLL /
(ln 2 · UTF-8 bytes of the scored ids), comparable across tokenizers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tlm_probe.data.sources import iter_documents
from tlm_probe.data.stream import TOKEN_SUFFIXES, load_token_data, tokenize_documents
from tlm_probe.data.tokens import is_prepared, load_token_ids
from tlm_probe.data.windows import documents_covered, pick, ratio_stderr
from tlm_probe.errors import UserError
from tlm_probe.eval.scorer import Scorer


@dataclass(frozen=True)
class PPLResult:
    source: str
    split: str
    nll_sum: float
    n_tokens: int
    n_bytes: int | None
    context: int
    stride: int
    sample: str = "spread"
    windows: int = 0
    """Windows scored, of windows_split in the split's grid."""
    windows_split: int = 0
    stderr: float | None = None
    """Standard error of the mean NLL over the sampled windows (None when every window is scored or the
    sample is a prefix: then there is no sampling error to state, or none that is random)."""
    documents: int | None = None
    """Documents the scored ids touch, of documents_split (None without an end-of-text id)."""
    documents_split: int | None = None

    @property
    def loss(self) -> float:
        return self.nll_sum / self.n_tokens

    def rows(self, model: str) -> list[dict]:
        bpb = self.nll_sum / (math.log(2) * self.n_bytes) if self.n_bytes else None
        metrics = {"token_nll": self.loss, "token_ppl": math.exp(min(self.loss, 700.0)), "bits_per_byte": bpb}
        task = f"ppl:{self.source}"
        errors = {"token_nll": self.stderr}
        return [
            {"model": model, "task": task, "metric": m, "value": v, "stderr": errors.get(m),
             "n": self.n_tokens}
            for m, v in metrics.items()
            if v is not None
        ]


NO_TOKENIZER = "this model has no tokenizer; tlm eval needs one to turn task text into ids"
_VOCAB_KEYS = ("vocab_size", "d_vocab")


class IdsOnly:
    """The codec of a model without a tokenizer: perplexity on token ids needs none (no bits per byte,
    which need the bytes each id stands for); anything that needs text is refused with one line."""

    is_byte, name, vocab_size, eos_id = False, "none (token ids)", 0, None

    def n_bytes(self, ids) -> int:
        return 0

    def encode(self, text: str):
        raise UserError(NO_TOKENIZER)

    encode_batch = decode = encode


def is_prepared_or_token_file(source: str) -> bool:
    return is_prepared(source) or (Path(source).suffix in TOKEN_SUFFIXES and Path(source).is_file())


def source_ids(source: str, split: str, codec) -> np.ndarray:
    """The ids the perplexity is measured on (see the module docstring); split "all" is every split."""
    if is_prepared(source):  # train/, val/ and (for a source that has one) test/ shards
        if split != "all" and not (Path(source) / split).is_dir():
            raise UserError(f"the prepared folder {source} has no {split} split")
        return np.asarray(load_token_ids(source, split), dtype=np.int64)
    if is_prepared_or_token_file(source):
        data = load_token_data(source)
        parts = {"train": [data.train], "val": [data.val], "all": [data.train, data.val]}[split]
        return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
    return tokenize_documents(iter_documents(source, split), codec).astype(np.int64)


def model_vocab(scorer: Scorer) -> int:
    """The number of ids the model can read: its embedding rows, and for a byte tokenizer 256 at most."""
    cfg = getattr(scorer.pm.model, "cfg", None) or getattr(scorer.pm.model, "config", None)
    sizes = [v for k in _VOCAB_KEYS if isinstance(v := getattr(cfg, k, None), int) and v > 0]
    if getattr(scorer.codec, "is_byte", False):
        sizes.append(256)  # a byte id above 255 stands for no byte: its bits per byte would be made up
    return min(sizes) if sizes else 0


def check_ids(ids: np.ndarray, scorer: Scorer, source: str) -> None:
    vocab = model_vocab(scorer)
    if len(ids) and ids.min() < 0:
        raise UserError(f"{source} holds a negative token id ({int(ids.min())})")
    if vocab and len(ids) and ids.max() >= vocab:
        raise UserError(f"{source} holds token id {int(ids.max())}, outside the model's vocabulary "
                        f"(ids 0..{vocab - 1}); were these ids made with another tokenizer?")


def window_starts(n_ids: int, context: int, stride: int) -> list[int]:
    return list(range(0, n_ids - context, stride))


@dataclass
class _Sums:
    """Per scored window: NLL sum and target count; bytes in total."""

    nll: list[float]
    count: list[int]
    n_bytes: int = 0


@torch.no_grad()
def perplexity(
    scorer: Scorer, ids: np.ndarray, *, source: str, split: str, context: int = 0, stride: int = 0,
    max_tokens: int | None = None, progress=None, sample: str = "spread", seed: int = 0,
) -> PPLResult:
    check_ids(ids, scorer, source)
    L = context or scorer.max_length
    S = stride or L
    if not 0 < S <= L or L > scorer.max_length:
        raise UserError(f"need 0 < stride {S} <= context {L} <= the model's context {scorer.max_length}")
    grid = window_starts(len(ids), L, S)
    if not grid:
        raise UserError(f"{source} ({split}) has {len(ids)} ids, fewer than context+1 = {L + 1}")
    k = max(1, 1 + (max_tokens - L) // S) if max_tokens else len(grid)  # window 0 scores L, the rest S
    starts = [grid[i] for i in pick(len(grid), k, sample, seed)]
    sums = _score(scorer, ids, starts, L, S, progress)
    spans = [(s + _first(s, L, S) + 1, s + L) for s in starts]
    docs = documents_covered(ids, spans, getattr(scorer.codec, "eos_id", None))
    random = sample == "spread" and len(starts) < len(grid)
    return PPLResult(source, split, sum(sums.nll), sum(sums.count), sums.n_bytes or None,
                     L, S, sample, len(starts), len(grid),
                     ratio_stderr(sums.nll, sums.count, len(grid)) if random else None,
                     *(docs or (None, None)))


def _first(start: int, L: int, S: int) -> int:
    """Index of a window's first scored target: targets an earlier grid window scores are skipped."""
    return 0 if start == 0 else L - S


def _score(scorer: Scorer, ids: np.ndarray, starts: list[int], L: int, S: int, progress) -> _Sums:
    sums = _Sums([], [])
    for b in range(0, len(starts), scorer.batch_size):
        batch = starts[b : b + scorer.batch_size]
        rows = torch.from_numpy(np.stack([np.asarray(ids[s : s + L + 1]) for s in batch]))  # (B, L+1)
        logits = scorer.logits(rows[:, :-1], torch.ones_like(rows[:, :-1]))
        token_nll = F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten().to(logits.device),
                                    reduction="none").view(len(batch), L).double().cpu()
        for k, s in enumerate(batch):
            first = _first(s, L, S)
            sums.nll.append(float(token_nll[k, first:].sum()))
            sums.count.append(L - first)
            sums.n_bytes += scorer.codec.n_bytes(rows[k, 1 + first :].tolist())
        if progress:
            progress(len(batch))
    return sums
