"""Logit lens (nostalgebraist 2020): decode each layer's residual stream with the model's own final norm
and unembedding, and compare with the model's final prediction.

Per layer, token means of: KL(P_final || P_layer) (`logit_lens_kl`), cross-entropy on the next token
(`logit_lens_ce`), entropy of P_layer (`logit_lens_entropy`) and agreement of the top-1 token with the
final top-1 (`logit_lens_top1`). At the last layer the lens is the model itself: KL 0, agreement 1.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tlm_probe.importance.streaming import TokenMean
from tlm_probe.stats.workspace import Workspace

LENS_STATS = ("logit_lens_kl", "logit_lens_ce", "logit_lens_entropy", "logit_lens_top1")


class LogitLens:
    """Accumulates the four lens statistics for `n_layers` layers."""

    def __init__(self, n_layers: int, final_norm: Callable, unembed: Callable):
        self.final_norm, self.unembed = final_norm, unembed
        self.means = {name: TokenMean(n_layers) for name in LENS_STATS}
        self.scratch = Workspace()  # (B, T, V) buffers reused by every layer and batch: fresh ones cost
        # page faults on hundreds of megabytes each (the vocabulary is wide)

    @torch.no_grad()
    def final(self, final_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log q, q, top-1 of q) of the model's own prediction: computed once per batch, used per layer."""
        logq = torch.log_softmax(final_logits.float(), -1)
        return logq, logq.exp(), logq.argmax(-1)

    @torch.no_grad()
    def update(self, layer: int, resid: torch.Tensor, final, input_ids, mask) -> None:
        """resid (B, T, d) at the layer's output, final = self.final(logits (B, T, V)), mask (B, T) of
        tokens to count. Cross-entropy uses the next token: it averages over tokens with a real successor.
        """
        mask = mask.bool()
        logq, q, top_q = final if isinstance(final, tuple) else self.final(final)
        z = self.unembed(self.final_norm(resid)).float()  # (B, T, V)
        logp = torch.log_softmax(z, -1, out=self.scratch.get("logp", z.shape, z))
        buf = self.scratch.get("vocab", z.shape, z)
        kl = torch.mul(q, torch.sub(logq, logp, out=buf), out=buf).sum(-1)  # sum q (log q - log p)
        entropy = -torch.mul(torch.exp(logp, out=buf), logp, out=buf).sum(-1)  # -sum p log p
        top1 = (logp.argmax(-1) == top_q).double()
        for name, v in (("logit_lens_kl", kl), ("logit_lens_entropy", entropy), ("logit_lens_top1", top1)):
            self.means[name].add(layer, v, mask)
        next_mask = mask[:, :-1] & mask[:, 1:]
        ce = -logp[:, :-1].gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
        self.means["logit_lens_ce"].add(layer, ce, next_mask)

    def all_reduce_(self) -> None:
        for m in self.means.values():
            m.all_reduce_()

    def rows(self) -> dict[str, list[dict]]:
        return {name: m.rows() for name, m in self.means.items()}
