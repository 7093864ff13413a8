"""Streaming statistics: accumulators that read captured pieces and keep float64 sums; no I/O."""

from tlm_probe.stats import alignment  # noqa: F401  (registers the "alignment" set)
from tlm_probe.stats.accumulator import (
    PLUGINS,
    Accumulator,
    Batch,
    available_stats,
    build_accumulators,
    register_accumulator,
)
from tlm_probe.stats.alignment import STATISTICS, AlignmentAccumulator
from tlm_probe.stats.moments import SequenceMoments
from tlm_probe.stats.pieces import LayerPieces, TokenIndex

__all__ = [
    "PLUGINS",
    "STATISTICS",
    "Accumulator",
    "AlignmentAccumulator",
    "Batch",
    "LayerPieces",
    "SequenceMoments",
    "TokenIndex",
    "available_stats",
    "build_accumulators",
    "register_accumulator",
]
