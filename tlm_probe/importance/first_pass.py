"""The suite's first pass: one clean forward per batch feeds every streaming and sampled statistic."""

from __future__ import annotations

import torch

from tlm_probe.importance.geometry import AngularDistance, Anisotropy
from tlm_probe.importance.linear_probes import next_token_labels
from tlm_probe.importance.logit_lens import LogitLens
from tlm_probe.importance.sample import TokenSample
from tlm_probe.importance.utilisation import NeuronActivity


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B,) position of the last real token (works for left and right padding)."""
    pos = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (attention_mask.bool() * (pos + 1)).argmax(-1)


class FirstPass:
    def __init__(self, pm, opts):
        L = pm.n_layers
        self.pm, self.opts = pm, opts
        self.angular = AngularDistance(L + 1)
        self.angular_last = AngularDistance(L + 1)
        self.anisotropy: Anisotropy | None = None  # sized on the first batch (d_model)
        self.sample = TokenSample(opts.sample_size, opts.seed)
        self.neurons = [NeuronActivity(w, opts.act_threshold) for w in pm.d_ff]
        head = pm.lm_head()
        norm = pm.final_norm() or torch.nn.Identity()
        self.lens = LogitLens(L, norm, head) if pm.is_causal and head is not None else None
        self.label_counts = torch.zeros(0, dtype=torch.float64)

    def labels(self, batch: dict, mask: torch.Tensor) -> torch.Tensor:
        if self.opts.probe_labels is not None:
            return self.opts.probe_labels(batch["input_ids"]).to(mask.device).long().masked_fill(~mask, -1)
        return next_token_labels(batch["input_ids"], mask)

    def _count(self, labels: torch.Tensor) -> None:
        ok = labels[labels >= 0].cpu()
        counts = torch.bincount(ok, minlength=len(self.label_counts)).double()
        if len(counts) > len(self.label_counts):
            counts[: len(self.label_counts)] += self.label_counts
            self.label_counts = counts
        else:
            self.label_counts += counts

    @torch.no_grad()
    def update(self, store: dict, out: torch.Tensor, batch: dict, mask: torch.Tensor) -> None:
        """store: the capture of this forward; out: logits or last hidden state; mask: tokens to count."""
        reps = torch.stack(store["resid"])  # (L+1, B, T, d)
        if self.anisotropy is None:
            self.anisotropy = Anisotropy(reps.shape[0], reps.shape[-1])
        flat = reps[:, mask]  # (L+1, N, d)
        self.angular.update(flat)
        self.anisotropy.update(flat)
        last = last_token_index(batch["attention_mask"])
        self.angular_last.update(reps[:, torch.arange(reps.shape[1]), last])  # (L+1, B, d)
        labels = self.labels(batch, mask)
        self._count(labels)
        self.sample.update(list(store["resid"]), mask, labels)  # r = 0..L, like the matrices
        for acc, post in zip(self.neurons, store["post"], strict=True):
            acc.update(post[mask])
        if self.lens is not None:
            for l in range(self.pm.n_layers):
                self.lens.update(l, store["resid"][l + 1], out, batch["input_ids"], mask)
