"""Capture: the adapters table, model loading and the backends that feed the statistics."""

from tlm_probe.capture.adapters import (
    ADAPTERS,
    BLOCK_KINDS,
    PIECES,
    Adapter,
    adapter_for,
)
from tlm_probe.capture.loading import DTYPES, ProbeModel, load_probe_model, wrap_model

__all__ = [
    "ADAPTERS",
    "BLOCK_KINDS",
    "DTYPES",
    "PIECES",
    "Adapter",
    "ProbeModel",
    "adapter_for",
    "load_probe_model",
    "wrap_model",
]
