"""A bounded, seeded, uniform subsample of token representations for the statistics that need samples.

Bottom-k sampling: every valid token gets an independent uniform key from a seeded generator and the
`size` smallest keys are kept, which is a uniform sample without replacement of the whole stream,
whatever the batch sizes. CKA, effective rank, participation ratio and linear probes read from it.
"""

from __future__ import annotations

import torch


class TokenSample:
    """Keeps, for up to `size` tokens, every representation passed in (R of them) plus integer labels."""

    def __init__(self, size: int, seed: int = 0):
        self.size = int(size)
        self.gen = torch.Generator().manual_seed(seed)
        self.keys = torch.empty(0)
        self.reps: list[torch.Tensor] | None = None
        self.labels = torch.empty(0, dtype=torch.long)
        self.groups = torch.empty(0, dtype=torch.long)  # the sequence each kept token came from
        self.seen = 0

    def update(
        self,
        reps: list[torch.Tensor],
        mask: torch.Tensor,
        labels: torch.Tensor | None = None,
        groups: torch.Tensor | None = None,
    ):
        """reps: R tensors (B, T, d_r); mask (B, T) bool of valid tokens; labels (B, T) or None; groups (B,)
        the sequence index of each row (for intervals clustered by sequence), or None."""
        mask = mask.bool().cpu()
        n = int(mask.sum())
        if n == 0:
            return
        self.seen += n
        keys = torch.rand(n, generator=self.gen)
        new = [r.detach().cpu()[mask].float() for r in reps]  # each (n, d_r)
        lab = labels.cpu()[mask].long() if labels is not None else torch.full((n,), -1)
        if self.reps is None:
            self.reps = [torch.empty(0, r.shape[-1]) for r in new]
        keys = torch.cat([self.keys, keys])
        order = keys.argsort()[: self.size]  # keep the smallest keys
        self.keys = keys[order]
        self.reps = [torch.cat([old, r])[order] for old, r in zip(self.reps, new, strict=True)]
        self.labels = torch.cat([self.labels, lab])[order]
        grp = (
            groups.cpu().long()[:, None].expand_as(mask)[mask] if groups is not None else torch.full((n,), -1)
        )
        self.groups = torch.cat([self.groups, grp])[order]

    @property
    def n(self) -> int:
        return int(self.keys.numel())
