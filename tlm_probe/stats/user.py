"""A user's per-layer statistic streamed like the built-in ones: a function of one layer's named pieces.

`reducer(pieces)` gets {name: (B, T, d) tensor} of one layer of one batch (the names it asked for, as the
probe captures them) and returns (B, T) per-token values; the values of the counted tokens (no padding,
no position 0 under exclude_bos) go into the same SequenceMoments as every alignment statistic: a float64
mean, the token std and a 95% t interval over sequences, merged across ranks by one SUM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import torch

from tlm_probe.errors import UserError
from tlm_probe.statistic_names import sets
from tlm_probe.stats.accumulator import Accumulator
from tlm_probe.stats.moments import SequenceMoments
from tlm_probe.stats.pieces import LayerPieces

Reducer: TypeAlias = Callable[[dict[str, torch.Tensor]], torch.Tensor]
"""A streamed statistic: {name: (B, T, d) piece of one layer of one batch} -> (B, T) per-token values."""


def check_name(name) -> None:
    """A user's statistic is named in the table's `statistic` column: a word, not one of the built-in
    statistics or sets (a table holding both could not tell them apart)."""
    if not isinstance(name, str) or not name.strip() or any(c in name for c in ",\n\r"):
        raise UserError(f"a statistic's name is a non-empty word without commas or line breaks, not {name!r}")
    taken = sets()
    if name in taken["all"] or name in taken:
        raise UserError(f"{name!r} names a built-in statistic or set; call yours something else")


class UserStatistic(Accumulator):
    """Streaming mean / std / CI over sequences of `reducer`'s per-token values at every layer."""

    order_free = True  # sums over sequences

    def __init__(self, n_layers: int, d_ff: tuple[int, ...], name: str, reducer: Reducer,
                 needs: tuple[str, ...]):
        check_name(name)
        if not callable(reducer):
            raise UserError(f"a streamed statistic is a function of the pieces, not {type(reducer).__name__}")
        super().__init__(n_layers, d_ff)
        self.name, self.reducer = name, reducer
        self.needs = frozenset(needs)
        self.moments = SequenceMoments(n_layers)
        self.state = self.moments.state  # shared storage: merging the base state merges the moments

    def update(self, layer: int, pieces: LayerPieces) -> None:
        B, T = pieces.index.counted.shape
        values = self.reducer({n: pieces.raw[n] for n in sorted(self.needs)})
        if not isinstance(values, torch.Tensor) or tuple(values.shape) != (B, T):
            got = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
            raise UserError(f"statistic {self.name!r} returned {got} at layer {layer}: it must return one "
                            f"value per token, a ({B}, {T}) tensor")
        counted = pieces.index.select_last(values.detach().to(torch.float64))  # (n,)
        if not bool(torch.isfinite(counted).all()):  # padding may hold anything; a counted token may not
            bad = int((~torch.isfinite(counted)).sum())
            raise UserError(f"statistic {self.name!r} returned {bad} non-finite value(s) of "
                            f"{counted.numel()} counted tokens at layer {layer} (a 0/0? guard a norm with "
                            ".clamp_min(eps))")
        slot = torch.tensor([layer])
        self.moments.add_tokens(slot, counted[None, :].to(pieces.index.seq_counts.device), pieces.index)

    def rows(self) -> list[dict]:
        return [{"layer": layer, "statistic": self.name, **self.moments.summary(layer)}
                for layer in range(self.n_layers)]
