"""What a model takes: its positions (max_positions, check_seq_len: the probe's and diff's sequence length),
and a handle's inputs as one right-padded batch: text (one string or several), token ids (a 1-D or 2-D
tensor, a list of ids or of id lists), a tokenizer's output (input_ids and attention_mask) or the
(input_ids, attention_mask) pair that encode returns."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import torch

from tlm_probe.capture.dispatch import input_device
from tlm_probe.data.sequences import batches, pad_id
from tlm_probe.errors import UserError

Inputs: TypeAlias = (str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]] | torch.Tensor | np.ndarray
                     | Mapping[str, Any] | tuple[torch.Tensor, torch.Tensor])
"""What Handle.run_with_cache and Handle.encode take: a text or texts, token ids (a list, a list of lists, a
1-D or 2-D tensor or array), a tokenizer's output, or the (input_ids, attention_mask) pair encode returns."""


def max_positions(pm) -> int | None:
    """The most positions the model (a ProbeModel) takes, from its config; None if it says none."""
    cfg = getattr(pm.model, "config", None) or pm.model.cfg
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(cfg, key, None)
        if isinstance(value, int):
            return value - pm.adapter.position_offset  # RoBERTa: position ids start after the pad index
    return None


def _exceeded(pm, n_tokens: int) -> int | None:
    """The model's most positions where a sequence of `n_tokens` exceeds it; None where it fits."""
    limit = max_positions(pm)
    return limit if limit is not None and n_tokens > limit else None


def check_seq_len(pm, seq_len: int) -> None:
    if seq_len < 2:
        raise UserError(f"--seq-len must be >= 2, got {seq_len}")
    if (limit := _exceeded(pm, seq_len)) is not None:
        raise UserError(f"--seq-len {seq_len} exceeds the model's maximum of {limit} positions")


def encode(pm, inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), (B, T) int64 on the device of the model's first block. Texts are
    tokenized with the model's special tokens, as the model is usually called. Ids outside the vocabulary
    and more positions than the model has are one UserError each, not an IndexError from the embedding."""
    ids, mask = _batch(pm, inputs, input_device(pm.model))
    return _checked(pm, ids), mask


def _batch(pm, inputs, device) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(inputs, tuple) and len(inputs) == 2 and all(isinstance(x, torch.Tensor) for x in inputs):
        inputs = {"input_ids": inputs[0], "attention_mask": inputs[1]}  # what Handle.encode returns
    if isinstance(inputs, Mapping) and "input_ids" in inputs:
        ids = _id_tensor(inputs["input_ids"])
        mask = _tensor(inputs.get("attention_mask", torch.ones_like(ids)), "an attention_mask")
        binary = not mask.is_floating_point() and bool(((mask == 0) | (mask == 1)).all())
        if mask.numel() != ids.numel() or not binary:
            raise UserError(f"attention_mask ({mask.dtype} {tuple(mask.shape)}) must be 0/1 integers of the "
                            f"input_ids' shape {tuple(ids.shape)}")
        return ids.to(device, torch.long), mask.reshape(ids.shape).to(device, torch.long)
    if isinstance(inputs, torch.Tensor):
        ids = _id_tensor(inputs)
        return ids.to(device, torch.long), torch.ones_like(ids, dtype=torch.long, device=device)
    if hasattr(inputs, "__array__"):  # a NumPy array of ids
        return _batch(pm, torch.as_tensor(inputs), device)
    if not isinstance(inputs, str | list | tuple):
        raise UserError(f"inputs are a text, a list of texts, token ids (a tensor, an array, a list of ints "
                        f"or of lists), a tokenizer's output or (ids, mask); got {type(inputs).__name__}")
    rows = _rows(pm, [inputs] if isinstance(inputs, str) or _is_ids(inputs) else list(inputs))
    if not rows or not all(rows):
        raise UserError("no tokens to run: every input must hold at least one token")
    return next(batches(rows, len(rows), pad_id(pm.tokenizer), device))


def _tensor(value, what: str) -> torch.Tensor:
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):  # ragged lists, text
        raise UserError(f"{what} is a tensor, an array or a list of ints, not {str(value)[:60]!r}") from None


def _id_tensor(value) -> torch.Tensor:
    """(B, T) integer ids from a 1-D or 2-D tensor, array or list of ids; one UserError for anything else,
    no tokens at all included."""
    ids = _tensor(value, "token ids")
    if ids.ndim not in (1, 2) or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise UserError(f"token ids must be a 1-D or 2-D integer tensor, got {ids.dtype} {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise UserError("no tokens to run: every input must hold at least one token")
    return ids[None] if ids.ndim == 1 else ids


def _checked(pm, ids: torch.Tensor) -> torch.Tensor:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= pm.vocab_size):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise UserError(f"token id {bad} is outside {pm.name}'s vocabulary of {pm.vocab_size:,} ids")
    if (limit := _exceeded(pm, ids.shape[1])) is not None:
        raise UserError(f"{ids.shape[1]:,} tokens in a sequence exceed {pm.name}'s maximum of {limit:,} "
                        "positions")
    return ids


def _is_ids(x) -> bool:
    return isinstance(x, list | tuple) and bool(x) and all(
        isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in x)


def _rows(pm, items: list) -> list[list[int]]:
    texts = [x for x in items if isinstance(x, str)]
    if texts and pm.tokenizer is None:
        raise UserError(f"{pm.name} has no tokenizer: pass token ids, or load it with tokenizer=...")
    return [_tokens(pm, x) for x in items]


def _tokens(pm, x) -> list[int]:
    if isinstance(x, str):
        return list(pm.tokenizer(x)["input_ids"])
    if _is_ids(x):
        return [int(i) for i in x]
    raise UserError(f"an input is a text, a list of token ids or a tensor of them, not {type(x).__name__}")
