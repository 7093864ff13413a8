"""The alignment statistics of DESIGN.md, one per-token formula each, streamed per layer in float64.

For parallel blocks resid_mid is resid_pre + attn_out (the stream the MLP output is added to); for post-LN
blocks it is the normalised stream after attention. The capture layer provides it either way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tlm_probe.stats.accumulator import Accumulator
from tlm_probe.stats.alignment_fast import FORMULAS, layer_values, plan
from tlm_probe.stats.moments import SequenceMoments
from tlm_probe.stats.pieces import LayerPieces
from tlm_probe.stats.workspace import Workspace

# the per-token value of each kind of formula (stats.alignment_fast.FORMULAS, the one table of the
# alignment statistics): the reference path, one statistic at a time, that the fast path must equal
REFERENCE: dict[str, Callable[[LayerPieces, str, str], torch.Tensor]] = {
    "cos": lambda p, a, b: p.cos(a, b),
    # |cos|: an MLP that writes against the stream (cos < 0) is as aligned with it as one that writes
    # along it; the signed mean can hide both behind a value near 0
    "|cos|": lambda p, a, b: p.cos(a, b).abs(),
    "1-cos": lambda p, a, b: 1 - p.cos(a, b),
    "ratio": lambda p, a, b: p.ratio(a, b),
}


def _reference(kind: str, a: str, b: str) -> Callable[[LayerPieces], torch.Tensor]:
    return lambda pieces: REFERENCE[kind](pieces, a, b)


# name -> (pieces it reads, per-token value), made from FORMULAS: nothing to keep in step by hand
PER_TOKEN: dict[str, tuple[tuple[str, ...], Callable[[LayerPieces], torch.Tensor]]] = {
    name: ((a, b), _reference(kind, a, b)) for name, (kind, a, b) in FORMULAS.items()
}


class AlignmentAccumulator(Accumulator):
    """Streaming mean / std / CI over sequences of each selected statistic at every layer.

    A layer's update keeps only its dot products; the values of all layers of a batch are computed and
    added to the moments at once when the batch ends (or before the state is read), which on narrow models
    costs a fraction of doing it layer by layer."""

    order_free = True  # sums over sequences: the order in which sequences arrive changes nothing

    def __init__(self, n_layers: int, d_ff: tuple[int, ...], statistics: tuple[str, ...] = tuple(PER_TOKEN)):
        super().__init__(n_layers, d_ff)
        self.statistics = tuple(statistics)
        self.needs = frozenset(p for s in self.statistics for p in PER_TOKEN[s][0])
        self.plan = plan(self.statistics)
        self.moments = SequenceMoments(len(self.statistics) * n_layers)
        self.state = self.moments.state  # shared storage: merging the base state merges the moments
        self._layers: list[int] = []  # layers of the current batch, in the order of their table rows
        self._scratch = Workspace()  # the (n_layers * pairs, n) table of dot products, and the values
        self._index = None
        self._slots: tuple[tuple[int, ...], torch.Tensor] | None = None  # (layers, their value rows' slots)

    def _slot(self, i: int, layer: int) -> int:
        return i * self.n_layers + layer

    def update(self, layer: int, pieces: LayerPieces) -> None:
        width = len(self.plan.pairs)
        if pieces.index is not self._index or len(self._layers) == self.n_layers:
            self._flush()
            self._index = pieces.index
        row = len(self._layers) * width
        pieces.dots(self.plan.pairs, out=self._table()[row : row + width])
        self._layers.append(layer)

    def end_layers(self) -> None:
        self._flush()

    def _table(self) -> torch.Tensor:
        """(n_layers * pairs, n) float64 dot products of the current batch, layer after layer."""
        counts = self._index.seq_counts  # float64, on the batch's device
        return self._scratch.get("dots", (self.n_layers * len(self.plan.pairs), len(self._index.seq)), counts)

    def _flush(self) -> None:
        if not self._layers:
            return
        table = self._table()[: len(self._layers) * len(self.plan.pairs)]
        values, where = layer_values(table, self.plan, self._scratch)  # (L * S, n)
        layers = tuple(self._layers)
        if self._slots is None or self._slots[0] != layers:  # the same every batch: built once
            self._slots = (layers, where[:, 1] * self.n_layers + torch.tensor(layers)[where[:, 0]])
        slots = self._slots[1]
        self._layers = []
        self.moments.add_tokens(slots, values, self._index)

    def merge(self, other: Accumulator) -> None:
        self._flush()
        other._flush()
        super().merge(other)

    def all_reduce_(self) -> None:
        self._flush()
        super().all_reduce_()

    def rows(self) -> list[dict]:
        self._flush()
        out = []
        for i, name in enumerate(self.statistics):
            for layer in range(self.n_layers):
                s = self.moments.summary(self._slot(i, layer))
                out.append({"layer": layer, "statistic": name, **s})
        return out


def build_accumulators(
    spec: str | tuple[str, ...], n_layers: int, d_ff: tuple[int, ...]
) -> list[Accumulator]:
    """'alignment' | 'all' | alignment statistic names (comma list or tuple) -> accumulators ([] if none)."""
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in filter(None, items):  # an unknown name: FORMULAS's one "unknown statistic" line
        for name in PER_TOKEN if item in ("alignment", "all") else (FORMULAS.check(item),):
            names += [name] if name not in names else []
    return [AlignmentAccumulator(n_layers, d_ff, tuple(names))] if names else []
