"""Streaming statistics: accumulators that read captured pieces and keep float64 sums; no I/O.

The names below load on first use (PEP 562): the torch-free modules of this package (sweep, the tables
`tlm plot` and `tlm report` read) must not import torch through this file."""

from importlib import import_module

_HOMES = {
    "Accumulator": "accumulator",
    "Batch": "accumulator",
    "STATISTICS": "alignment",
    "AlignmentAccumulator": "alignment",
    "build_accumulators": "alignment",
    "SequenceMoments": "moments",
    "LayerPieces": "pieces",
    "TokenIndex": "pieces",
    "all_reduce_": "reduce",
    "all_reduce_int": "reduce",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
