"""Capture: the adapters table, model loading and the backends that feed the statistics.

The table (adapters) is imported at once; loading (torch, transformers) only when one of its names is
used, so that refusing an unsupported model costs no heavy import.
"""

from typing import TYPE_CHECKING

from tlm_probe.capture.adapters import (
    ADAPTERS,
    BLOCK_KINDS,
    PIECES,
    Adapter,
    adapter_for,
)

# ProbeModel: capture/probe_model.py
_LOADING = ("DTYPES", "ProbeModel", "as_probe_model", "load_probe_model", "wrap_model")

if TYPE_CHECKING:  # type checkers run no __getattr__: the same names (`X as X`: re-exported)
    from tlm_probe.capture.loading import DTYPES as DTYPES
    from tlm_probe.capture.loading import as_probe_model as as_probe_model
    from tlm_probe.capture.loading import load_probe_model as load_probe_model
    from tlm_probe.capture.loading import wrap_model as wrap_model
    from tlm_probe.capture.probe_model import ProbeModel as ProbeModel


def __getattr__(name: str):
    if name in _LOADING:
        from tlm_probe.capture import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'tlm_probe.capture' has no attribute {name!r}")


__all__ = [
    "ADAPTERS",
    "BLOCK_KINDS",
    "DTYPES",
    "PIECES",
    "Adapter",
    "ProbeModel",
    "adapter_for",
    "as_probe_model",
    "load_probe_model",
    "wrap_model",
]
