"""Streaming statistics: accumulators that read captured pieces and keep float64 sums; no I/O."""

from tlm_probe.stats.accumulator import Accumulator, Batch
from tlm_probe.stats.alignment import STATISTICS, AlignmentAccumulator, build_accumulators
from tlm_probe.stats.moments import SequenceMoments
from tlm_probe.stats.pieces import LayerPieces, TokenIndex
from tlm_probe.stats.reduce import all_reduce_, all_reduce_int

__all__ = [
    "STATISTICS",
    "Accumulator",
    "AlignmentAccumulator",
    "Batch",
    "LayerPieces",
    "SequenceMoments",
    "TokenIndex",
    "all_reduce_",
    "all_reduce_int",
    "build_accumulators",
]
