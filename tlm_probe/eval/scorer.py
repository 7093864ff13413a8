"""Log-likelihoods of token continuations under any model the probe loads (our checkpoints, Hugging Face
folders, GGUF files): the one place where tlm eval runs a model. The harness bridge and the perplexity
code both score through it, so their numbers come from the same forward pass.

A request is (context ids, continuation ids). The model reads context + continuation minus the last id,
truncated from the left to its context length, and the continuation's log-probabilities are summed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from tlm_probe.capture.dispatch import input_device
from tlm_probe.capture.finite import refuse_non_finite
from tlm_probe.capture.probe_model import ProbeModel
from tlm_probe.errors import UserError

DEFAULT_MAX_LENGTH = 2048
"""Context used for Hugging Face models whose config names no maximum."""
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "n_ctx")


class TextCodec:
    """encode/decode/eos/bytes over our ByteTokenizer, our HFTokenizer or a raw transformers tokenizer."""

    def __init__(self, tokenizer, command: str = "tlm eval", need: str = "to turn task text into ids"):
        if tokenizer is None:  # the command that asked says what it needs one for
            raise UserError(f"this model has no tokenizer; {command} needs one {need}")
        self.tok = getattr(tokenizer, "tok", tokenizer)  # unwrap our HFTokenizer
        self.is_byte = getattr(tokenizer, "kind", None) == "byte"
        self.byte = tokenizer if self.is_byte else None
        eos = tokenizer.eos_id if self.is_byte else self.tok.eos_token_id
        self.eos_id = int(eos if eos is not None else (self.tok.bos_token_id or 0))
        self.vocab_size = 256 if self.is_byte else len(self.tok)

    def encode(self, text: str) -> list[int]:
        if self.is_byte:
            return self.byte.encode(text).tolist()
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(self.encode(t), dtype=np.uint32) for t in texts]

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        return self.byte.decode(ids) if self.is_byte else self.tok.decode(ids, skip_special_tokens=True)

    def n_bytes(self, ids) -> int:
        return len(ids) if self.is_byte else len(self.decode(ids).encode("utf-8"))

    @property
    def name(self) -> str:
        if self.is_byte:
            return "byte"
        return str(getattr(self.tok, "name_or_path", "") or type(self.tok).__name__)


@dataclass
class Scorer:
    """A loaded model plus its tokenizer, scoring batches of (context, continuation) id lists."""

    pm: ProbeModel
    codec: TextCodec
    batch_size: int = 8
    max_length: int = 0

    def __post_init__(self):
        if not self.pm.is_causal:
            raise UserError(f"{self.pm.name} is not a causal language model; tlm eval scores decoders only")
        self.max_length = self.max_length or model_max_length(self.pm)
        self.device = input_device(self.pm.model)  # a dispatched model: where its first block is

    @torch.no_grad()
    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.pm.forward(input_ids.to(self.device), attention_mask.to(self.device))
        logits = getattr(out, "logits", out).float()  # (B, T, V)
        refuse_non_finite([(None, "logits", logits)], self.pm.name)  # the one guard (capture/finite.py)
        return logits

    def loglikelihoods(self, requests: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(sum of log p(continuation | context), every continuation id is the argmax) per request."""
        rows = [(i, *row) for i, (ctx, cont) in enumerate(requests) for row in self.windows(ctx, cont)]
        rows.sort(key=lambda r: -len(r[1]))  # similar lengths batch together: little padding
        total = [0.0] * len(requests)
        greedy = [True] * len(requests)
        for start in range(0, len(rows), self.batch_size):
            batch = rows[start : start + self.batch_size]
            for (i, _, _), (lp, hit) in zip(batch, self._batch([r[1:] for r in batch]), strict=True):
                total[i] += lp
                greedy[i] = greedy[i] and hit
        return list(zip(total, greedy, strict=True))

    def windows(self, ctx: list[int], cont: list[int]) -> list[tuple[list[int], list[int]]]:
        """(input ids, targets predicted by its last positions): one row when context + continuation fit
        in the model; a continuation longer than the context is scored in chunks of at most max_length
        targets from the end, each with as much preceding text as fits (a rolling window)."""
        full, L = list(ctx) + list(cont), self.max_length
        out, end = [], len(full)
        while end > len(ctx):
            first = max(len(ctx), end - L, 1)  # id 0 has nothing to condition on
            out.append((full[max(0, end - 1 - L) : end - 1], full[first:end]))
            end = first
        return out

    def _batch(self, rows: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        width = max(len(inp) for inp, _ in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)  # right padding, masked out
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for b, (inp, _) in enumerate(rows):
            ids[b, : len(inp)] = torch.tensor(inp)
            mask[b, : len(inp)] = 1
        logp = F.log_softmax(self.logits(ids, mask), dim=-1).cpu()  # (B, T, V)
        out = []
        for b, (inp, targets) in enumerate(rows):
            pos = torch.arange(len(inp) - len(targets), len(inp))  # logits at t predict id t+1
            target = torch.tensor(targets, dtype=torch.long)
            lp = logp[b, pos].gather(-1, target[:, None]).squeeze(-1)
            hit = bool((logp[b, pos].argmax(-1) == target).all())
            out.append((float(lp.double().sum()), hit))
        return out

    @torch.no_grad()
    def greedy_continue(self, ids: list[int], max_new: int, stop_ids: set[int] | None = None) -> list[int]:
        """Greedy decoding without a cache (works for every model the probe loads)."""
        new: list[int] = []
        for _ in range(max_new):
            window = (ids + new)[-self.max_length :]
            x = torch.tensor([window])
            nxt = int(self.logits(x, torch.ones_like(x))[0, -1].argmax())
            new.append(nxt)
            if stop_ids and nxt in stop_ids:
                break
        return new


def model_max_length(pm: ProbeModel) -> int:
    cfg = getattr(pm.model, "cfg", None) or getattr(pm.model, "config", None)
    for key in _LENGTH_KEYS:
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_MAX_LENGTH
