"""Streaming token means with a 95% confidence interval, one value per layer, accumulated in float64."""

from __future__ import annotations

import math

import numpy as np
import torch

Z95 = 1.959963984540054  # two-sided 95% normal quantile


class TokenMean:
    """Running sum and sum of squares of a per-token quantity for `n` layers (or any n slots)."""

    def __init__(self, n: int):
        self.sum = torch.zeros(n, dtype=torch.float64)
        self.sumsq = torch.zeros(n, dtype=torch.float64)
        self.count = torch.zeros(n, dtype=torch.float64)

    def add(self, slot: int, values: torch.Tensor) -> None:
        """Add the values (any shape, already restricted to valid tokens) to one slot."""
        v = values.detach().reshape(-1).to("cpu", torch.float64)
        self.sum[slot] += v.sum()
        self.sumsq[slot] += v.square().sum()
        self.count[slot] += v.numel()

    def mean(self) -> np.ndarray:
        return (self.sum / self.count.clamp_min(1)).numpy()

    def std(self) -> np.ndarray:
        n = self.count.clamp_min(2)
        var = (self.sumsq - self.sum.square() / self.count.clamp_min(1)) / (n - 1)
        return var.clamp_min(0).sqrt().numpy()

    def ci(self) -> tuple[np.ndarray, np.ndarray]:
        """Normal-approximation 95% interval of the mean (tokens treated as independent)."""
        half = Z95 * self.std() / np.sqrt(np.maximum(self.count.numpy(), 1))
        m = self.mean()
        return m - half, m + half

    def rows(self) -> list[dict]:
        """One dict per slot: value, ci_low, ci_high, std, n_tokens (NaN where nothing was added)."""
        m, (lo, hi), s, n = self.mean(), self.ci(), self.std(), self.count.numpy()
        out = []
        for i in range(len(m)):
            empty = n[i] == 0
            vals = (m[i], lo[i], hi[i], s[i])
            vals = tuple(math.nan if empty else float(v) for v in vals)
            row = dict(zip(("value", "ci_low", "ci_high", "std"), vals, strict=True))
            out.append({**row, "n_tokens": int(n[i])})
        return out
