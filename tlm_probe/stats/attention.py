"""Attention statistics, streamed per layer: `attn_entropy` is, at each query token, the mean over heads of
the entropy (nats) of its attention distribution over keys; the row is the mean over counted query tokens.

The capture layer hands over each layer's softmax weights (B, H, T_q, T_k) as the model computed them
(capture/attention.py); `token_entropy` reduces them at once to one float64 value per query token, so no
pattern outlives its layer. Keys the attention mask hides (padding) are left out of the sum: the model's
softmax gives them weight 0 (or an underflow of it), and their terms are set to exactly 0.
"""

from __future__ import annotations

import torch

from tlm_probe.stats.accumulator import Accumulator
from tlm_probe.stats.moments import SequenceMoments
from tlm_probe.stats.pieces import LayerPieces

ENTROPY = "attn_entropy"


def token_entropy(pattern: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """(B, H, T_q, T_k) softmax weights, (B, T_k) bool key mask -> (B, T_q) float64: the mean over heads of
    -sum_k p log p (0 log 0 = 0). The terms are formed in float32 (bf16/fp16 weights upcast first; float64
    kept), each with a relative error of one rounding, and summed in float64: an absolute error of at most
    ~eps32 x the entropy. One temporary the size of the pattern; nothing of it is kept."""
    p = pattern if pattern.dtype in (torch.float32, torch.float64) else pattern.float()
    terms = torch.special.xlogy(p, p)  # p log p, exactly 0 where p == 0
    terms.masked_fill_(~keys[:, None, None, :], 0.0)
    return -terms.sum(-1, dtype=torch.float64).mean(1)


class AttentionEntropyAccumulator(Accumulator):
    """Streaming mean / std / CI over sequences of `attn_entropy` at every layer (moments.SequenceMoments)."""

    order_free = True  # sums over sequences
    statistics = (ENTROPY,)
    scalars = frozenset({ENTROPY})
    """Per-token values the capture layer computes from something that is not a piece (the pattern)."""

    def __init__(self, n_layers: int, d_ff: tuple[int, ...]):
        super().__init__(n_layers, d_ff)
        self.moments = SequenceMoments(n_layers)
        self.state = self.moments.state  # shared storage: merging the base state merges the moments

    def update(self, layer: int, pieces: LayerPieces) -> None:
        values = pieces.index.select_last(pieces.scalars[ENTROPY])  # (n,) counted query tokens
        self.moments.add_tokens(torch.tensor([layer]), values[None, :], pieces.index)

    def rows(self) -> list[dict]:
        return [{"layer": l, "statistic": ENTROPY, **self.moments.summary(l)} for l in range(self.n_layers)]
