"""The accumulator protocol and the alignment accumulators that `probe(stats=...)` builds.

An accumulator receives, per batch, each layer's LayerPieces (only counted tokens) and, after the forward
pass, the whole Batch. Its state is one float64 tensor of SUMS, so merging (batches, processes,
all-reduce) is addition: `all_reduce_()` is its cross-rank reduction. The importance statistics are not
accumulators of this stream: they are probe/engine.py's second pass (tlm_probe.importance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tlm_probe.stats.reduce import all_reduce_


@dataclass
class Batch:
    """One forward pass: inputs, which tokens count, and the model output when an accumulator asked for it."""

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    index: Any  # stats.pieces.TokenIndex
    output: Any = None


class Accumulator:
    """Base class: override `needs`, `update`, `rows`; keep all state in `self.state` (float64 sums)."""

    needs: frozenset[str] = frozenset()
    """Pieces required per layer (see capture.adapters.PIECES)."""
    needs_output: bool = False
    """True when end_batch needs the full model output (logits), not only the blocks."""

    def __init__(self, n_layers: int, d_ff: tuple[int, ...]):
        self.n_layers, self.d_ff = n_layers, d_ff
        self.state = torch.zeros(0, dtype=torch.float64)

    def update(self, layer: int, pieces) -> None:  # pieces: stats.pieces.LayerPieces
        """Called once per layer per batch, in layer order."""

    def end_layers(self) -> None:
        """Called once per batch after the last layer's update (the model output may not exist yet)."""

    def end_batch(self, batch: Batch) -> None:
        """Called once per batch after the forward pass."""

    def merge(self, other: Accumulator) -> None:
        self.state += other.state

    def all_reduce_(self) -> None:
        """Sum the state over ranks (a no-op in one process)."""
        all_reduce_(self.state)

    def rows(self) -> list[dict]:
        """Tidy rows: layer, statistic, value, std, ci_low, ci_high, n_tokens."""
        return []

    def matrix_rows(self) -> list[dict]:
        """Tidy layer x layer rows: layer_i, layer_j, statistic, value."""
        return []
