"""Streaming per-sequence moments of a per-token quantity: mean, token std and a 95% CI over sequences.

Everything kept is a plain sum, so merging two accumulators (batches, processes) is addition and an
all-reduce is one SUM. The interval treats sequences as clusters (tokens of one sequence are correlated):
the ratio estimator mean = sum(x_s) / sum(n_s) has variance S/(S-1) * sum((x_s - mean n_s)^2) / N^2.
"""

from __future__ import annotations

import functools
import math

import torch
from scipy import stats as sps

from tlm_probe.stats.reduce import all_reduce_

# columns of the state: sequences, tokens, sum x, sum x^2 (tokens), sum x_s^2, sum x_s n_s, sum n_s^2
S, N, X, X2, XX, XN, NN = range(7)
_WIDTH = 7


@functools.lru_cache(maxsize=4096)
def _t975(df: int) -> float:
    """The t quantile of every row's interval: scipy's ppf costs ~1.6 ms a call (its argument checks),
    paid per layer and statistic on every probe call; all rows of a run share one or two df values."""
    return float(sps.t.ppf(0.975, df))


class SequenceMoments:
    """Moments for `slots` independent quantities (e.g. statistic x layer), in float64."""

    def __init__(self, slots: int):
        self.state = torch.zeros(slots, _WIDTH, dtype=torch.float64)

    def add(self, slot: int, values: torch.Tensor, seq: torch.Tensor, n_seq: int) -> None:
        """values (n,) float64 for the counted tokens; seq (n,) the sequence index of each, in [0, n_seq)."""
        self.add_many(torch.tensor([slot]), values[None, :], seq, n_seq)

    def add_many(self, slots: torch.Tensor, values: torch.Tensor, seq: torch.Tensor, n_seq: int) -> None:
        """values (k, n) float64: row j goes to slots[j]; seq (n,) the sequence of each token."""
        n_s = torch.bincount(seq, minlength=n_seq).to(torch.float64)
        x_s = torch.zeros(n_seq, values.shape[0], dtype=torch.float64, device=values.device)
        self._add(slots, values, x_s.index_add_(0, seq, values.T).T, n_s)

    def add_tokens(self, slots: torch.Tensor, values: torch.Tensor, index) -> None:
        """values (k, n) float64 over the counted tokens of a stats.pieces.TokenIndex."""
        self._add(slots, values, index.per_sequence(values), index.seq_counts.to(values.device))

    def _add(self, slots: torch.Tensor, values: torch.Tensor, x_s: torch.Tensor, n_s: torch.Tensor) -> None:
        """x_s (k, n_seq): each row's sum over each sequence; n_s (n_seq,) tokens per sequence."""
        k = values.shape[0]
        rows = torch.stack(
            [
                (n_s > 0).sum().to(torch.float64).expand(k),
                n_s.sum().expand(k),
                x_s.sum(1),
                values.square().sum(1),
                x_s.square().sum(1),
                (x_s * n_s).sum(1),
                n_s.square().sum().expand(k),
            ],
            dim=1,
        )  # (k, _WIDTH)
        self.state.index_add_(0, slots.to(self.state.device), rows.to(self.state.device))

    def merge(self, other: SequenceMoments) -> None:
        self.state += other.state

    def all_reduce_(self) -> None:
        all_reduce_(self.state)

    def summary(self, slot: int) -> dict:
        """value, std (over tokens), ci_low, ci_high (95%, over sequences), n_tokens, n_sequences."""
        s, n, x, x2, xx, xn, nn = self.state[slot].tolist()
        if n == 0:
            return {
                "value": math.nan,
                "std": math.nan,
                "ci_low": math.nan,
                "ci_high": math.nan,
                "n_tokens": 0,
                "n_sequences": int(s),
            }
        mean = x / n
        var_tok = max(x2 - x * x / n, 0.0) / (n - 1) if n > 1 else math.nan
        lo = hi = math.nan
        if s > 1:
            resid = max(xx - 2 * mean * xn + mean * mean * nn, 0.0)
            se = math.sqrt(s / (s - 1) * resid) / n
            half = _t975(int(s) - 1) * se
            lo, hi = mean - half, mean + half
        return {
            "value": mean,
            "std": math.sqrt(var_tok) if n > 1 else math.nan,
            "ci_low": lo,
            "ci_high": hi,
            "n_tokens": int(n),
            "n_sequences": int(s),
        }
