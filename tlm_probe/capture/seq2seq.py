"""How the probe calls an encoder-decoder for one of its stacks (Adapter.inputs "seq2seq_decoder")."""

from __future__ import annotations

from typing import Any

import torch

from tlm_probe.errors import UserError


def decoder_start(config: Any) -> int:
    """The id the decoder input starts with; refused where the config has none (transformers 5 writes no
    default: guessing one, e.g. the pad id T5 checkpoints use, would probe inputs the model was not given)."""
    start = getattr(config, "decoder_start_token_id", None)
    if not isinstance(start, int):
        raise UserError(
            "the model's config.json has no decoder_start_token_id, so its decoder input is undefined; "
            "set it there (T5 checkpoints use their pad id, 0) to probe the decoder stack"
        )
    return start


def decoder_call(ids: torch.Tensor, mask: torch.Tensor, config: Any) -> tuple[tuple, dict]:
    """One sequence as an encoder-decoder's source and target: the decoder reads it shifted right after
    decoder_start_token_id, so position t sees tokens < t (and the whole encoded sequence). Right padding
    (data.sequences.batches) keeps the decoder's real positions where the mask is 1; position t's own
    mask serves the decoder too, as a real position's shifted inputs are all real."""
    dec = torch.cat([torch.full_like(ids[:, :1], decoder_start(config)), ids[:, :-1]], dim=1)  # (B, T)
    return (), {
        "input_ids": ids,
        "attention_mask": mask,
        "decoder_input_ids": dec,
        "decoder_attention_mask": mask,
        "use_cache": False,
    }
