"""Streaming token means of the importance statistics, with the same 95% CI as alignment.

Every mean-over-tokens row of the probe has one definition of ci_low/ci_high: a t interval over sequences
(tokens of one sequence are correlated, so sequences are the clusters; stats.moments.SequenceMoments).
The state is a float64 sum, so a cross-rank all-reduce equals one process.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tlm_probe.stats.moments import SequenceMoments

Z95 = 1.959963984540054  # two-sided 95% normal quantile (Fisher-z and binomial intervals)


def clustered_ci(values: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    """The same sequence-clustered 95% interval for any per-token values (groups: sequence of each)."""
    _, seq = np.unique(groups, return_inverse=True)
    m = SequenceMoments(1)
    m.add(0, torch.as_tensor(values, dtype=torch.float64), torch.as_tensor(seq), int(seq.max()) + 1)
    s = m.summary(0)
    return s["ci_low"], s["ci_high"]


class TokenMean:
    """Per-slot (e.g. per-layer) token mean, token std and sequence-clustered CI of a per-token quantity."""

    def __init__(self, n: int):
        self.moments = SequenceMoments(n)

    def add(self, slot: int, values: torch.Tensor, mask: torch.Tensor) -> None:
        """values and mask (B, T'): row b is sequence b; only values where mask is True count."""
        mask = mask.bool()
        seq = mask.nonzero()[:, 0].cpu()
        v = values.detach()[mask].reshape(-1).to("cpu", torch.float64)
        self.moments.add(slot, v, seq, mask.shape[0])

    def all_reduce_(self) -> None:
        self.moments.all_reduce_()

    @property
    def count(self) -> torch.Tensor:
        return self.moments.state[:, 1]

    def rows(self) -> list[dict]:
        """One dict per slot: value, ci_low, ci_high, std, n_tokens (NaN where nothing was added)."""
        out = []
        for i in range(self.moments.state.shape[0]):
            s = self.moments.summary(i)
            row = {k: s[k] for k in ("value", "ci_low", "ci_high", "std")}
            out.append(
                {**{k: float(v) if v == v else math.nan for k, v in row.items()}, "n_tokens": s["n_tokens"]}
            )
        return out
