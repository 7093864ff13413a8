"""The accumulator protocol and the registry of statistic sets that `probe(stats=...)` resolves.

An accumulator receives, per batch, each layer's LayerPieces (only counted tokens) and, after the forward
pass, the whole Batch. Its state is one float64 tensor of SUMS, so merging (batches, processes,
all-reduce) is addition. Other statistics (tlm_probe.importance) plug in with `register_accumulator`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tlm_probe.errors import UserError


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

    def end_batch(self, batch: Batch) -> None:
        """Called once per batch after the forward pass."""

    def merge(self, other: Accumulator) -> None:
        self.state += other.state

    def rows(self) -> list[dict]:
        """Tidy rows: layer, statistic, value, std, ci_low, ci_high, n_tokens."""
        return []

    def matrix_rows(self) -> list[dict]:
        """Tidy layer x layer rows: layer_i, layer_j, statistic, value."""
        return []


AccumulatorFactory = Callable[[int, tuple[int, ...], tuple[str, ...]], Accumulator]
# set name -> (factory, the statistic names it computes)
_REGISTRY: dict[str, tuple[AccumulatorFactory, tuple[str, ...]]] = {}
# statistic sets provided by other packages, imported on first use so that this module has no side effects
PLUGINS = {"importance": "tlm_probe.importance.plugin"}


def register_accumulator(name: str, factory: AccumulatorFactory, statistics: tuple[str, ...]) -> None:
    """Make `stats=name` (and each of `statistics` by name) available to probe()."""
    _REGISTRY[name] = (factory, tuple(statistics))


def _load_plugins() -> None:
    for name, module in PLUGINS.items():
        if name not in _REGISTRY:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError:  # the plugin is optional: its set is simply not offered
                pass


def available_stats() -> dict[str, tuple[str, ...]]:
    _load_plugins()
    return {k: v[1] for k, v in _REGISTRY.items()}


def build_accumulators(spec: str, n_layers: int, d_ff: tuple[int, ...]) -> list[Accumulator]:
    """'alignment' | 'all' | a comma list of set names and/or statistic names -> accumulators."""
    _load_plugins()
    wanted: dict[str, list[str]] = {}
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        for set_name, stats in _resolve(item):
            wanted.setdefault(set_name, [])
            wanted[set_name] += [s for s in stats if s not in wanted[set_name]]
    if not wanted:
        raise UserError(f"--stats {spec!r} names no statistics")
    return [_REGISTRY[name][0](n_layers, d_ff, tuple(stats)) for name, stats in wanted.items()]


def _resolve(item: str) -> list[tuple[str, tuple[str, ...]]]:
    if item == "all":
        return [(k, v[1]) for k, v in _REGISTRY.items()]
    if item in _REGISTRY:
        return [(item, _REGISTRY[item][1])]
    for name, (_, stats) in _REGISTRY.items():
        if item in stats:
            return [(name, (item,))]
    known = sorted(_REGISTRY) + sorted(s for _, st in _REGISTRY.values() for s in st)
    raise UserError(f"unknown statistic {item!r}; choose from: all, {', '.join(known)}")
