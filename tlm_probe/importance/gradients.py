"""Gradient importance of parameter groups (one group = one layer's MLP parameters).

With G = dL/dtheta the gradient of the dataset-mean loss:
- `taylor_mlp`   = |sum theta * G|: first-order estimate of the loss change when the group is zeroed
                   (L(0) - L(theta) ~ -sum theta * G; Molchanov et al. 2019).
- `fisher_mlp`   = 1/2 sum E_s[(dL_s/dtheta)^2] theta^2: the empirical Fisher at sequence granularity
                   (L_s = mean NLL of sequence s; one backward pass per sequence, token-level Fisher would
                   need one per token). Its CI is over sequences.
- `grad_norm_mlp` = ||G restricted to the group||.
Taylor and the gradient norm need only the summed gradient: one backward per batch gives it. Fisher needs
each sequence's own gradient: one backward per sequence. All states are sums: `all_reduce_` merges ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from tlm_probe.importance.streaming import TokenMean
from tlm_probe.stats.reduce import all_reduce_, all_reduce_int

# loss_fn(batch) -> (sum of per-token losses, number of tokens)
SequenceLoss = Callable[[dict], tuple[torch.Tensor, int]]


class GradientImportance:
    def __init__(self, groups: dict[int, list[nn.Parameter]]):
        self.layers = sorted(groups)
        self.groups = [list(groups[l]) for l in self.layers]
        self.params = [p for g in self.groups for p in g]
        self.grad_sum = [torch.zeros_like(p, dtype=torch.float64) for p in self.params]
        self.tokens = 0
        self.sequences = 0
        self.backwards = 0
        self.fisher = TokenMean(len(self.layers))  # one "token" per sequence here

    def _grads(self, batch: dict, loss_fn: SequenceLoss) -> tuple[list[torch.Tensor], int]:
        loss_sum, n = loss_fn(batch)
        if n == 0:
            return [], 0
        grads = torch.autograd.grad(loss_sum, self.params, allow_unused=True)
        self.backwards += 1
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(self.params, grads, strict=True)]
        for acc, g in zip(self.grad_sum, grads, strict=True):
            acc += g.double()
        self.tokens += n
        self.sequences += len(next(iter(batch.values())))  # rows of the batch
        return grads, n

    def update_batch(self, batch: dict, loss_fn: SequenceLoss) -> None:
        """Several sequences at once: their summed gradient (Taylor, gradient norm; no Fisher term)."""
        self._grads(batch, loss_fn)

    def update(self, sequence: dict, loss_fn: SequenceLoss) -> None:
        """One sequence (a batch of size 1): accumulate its summed gradient and its Fisher term."""
        grads, n = self._grads(sequence, loss_fn)
        if n == 0:
            return
        i = 0
        one = torch.ones(1, 1, dtype=torch.bool)
        for slot, group in enumerate(self.groups):
            term = sum(
                ((g.double() / n) * p.detach().double()).square().sum()
                for p, g in zip(group, grads[i : i + len(group)], strict=True)
            )
            self.fisher.add(slot, (0.5 * term).reshape(1, 1), one)
            i += len(group)

    def all_reduce_(self) -> None:
        for g in self.grad_sum:
            all_reduce_(g)
        self.tokens = all_reduce_int(self.tokens)
        self.sequences = all_reduce_int(self.sequences)
        self.fisher.all_reduce_()

    def _per_group(self, fn) -> np.ndarray:
        out, i = [], 0
        for group in self.groups:
            out.append(float(fn(group, self.grad_sum[i : i + len(group)])))
            i += len(group)
        return np.array(out)

    def taylor(self) -> np.ndarray:
        t = max(self.tokens, 1)

        def taylor(ps, gs):
            return abs(sum((p.detach().double() * g / t).sum() for p, g in zip(ps, gs, strict=True)))

        return self._per_group(taylor)

    def grad_norm(self) -> np.ndarray:
        t = max(self.tokens, 1)
        return self._per_group(lambda ps, gs: math.sqrt(sum(float((g / t).square().sum()) for g in gs)))

    def rows(self) -> dict[str, list[dict]]:
        """Per-layer rows; Taylor and gradient norm are not token means, so their CI is NaN."""
        nan = math.nan
        plain = {
            "taylor_mlp": self.taylor(),
            "grad_norm_mlp": self.grad_norm(),
        }
        out = {
            name: [dict(value=float(v), ci_low=nan, ci_high=nan, std=nan, n_tokens=self.tokens) for v in vals]
            for name, vals in plain.items()
        }
        out["fisher_mlp"] = [dict(r, n_tokens=self.tokens) for r in self.fisher.rows()]
        return out
