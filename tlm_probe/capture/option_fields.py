"""The option fields that every command running a model on a corpus shares, each declared once (its default,
its type and its help): the options dataclasses of probe, diff, trust, eval and generate compose them,
`device: str = device()`, instead of pasting them. Light (no torch): the CLI reads them at start-up."""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal

from tlm_probe.capture.dispatch import DEVICE_MAP_HELP, MAX_MEMORY_HELP
from tlm_probe.capture.model_source import DTYPE_NAMES
from tlm_probe.data.sources import SPLIT_CHOICES, SPLIT_HELP
from tlm_probe.data.windows import SAMPLE_HELP, SAMPLES

Dtype = Literal[DTYPE_NAMES]
"""The precision a model is loaded in (the loaders' DTYPE_NAMES)."""
Split = Literal[SPLIT_CHOICES]
"""Which documents of a source are read (data/sources.py)."""
Sample = Literal[SAMPLES]
"""Which windows are scored under a token limit (data/windows.py)."""


def _shared(default, doc: str) -> Any:
    return field(default=default, metadata={"help": doc})


def device() -> Any:
    """--device: not a closed set (cuda:N), checked once where it is resolved (models/device.py)."""
    return _shared("auto", "auto (a GPU when there is one, else the CPU) | cpu | cuda | cuda:N | mps")


def dtype() -> Any:
    return _shared("float32", "Precision the model is loaded and run in.")


def device_map() -> Any:
    return _shared("", DEVICE_MAP_HELP)


def max_memory() -> Any:
    return _shared("", MAX_MEMORY_HELP)


def data() -> Any:
    return _shared("builtin:pydoc", "builtin:pydoc | builtin:stdlib | builtin:env | text file/folder/glob | "
                   "file.jsonl[:field] | hf:NAME[:split] | token ids (.npy, .pt, .tok, folder).")


def split(of: str = "") -> Any:
    """--split; `of` names what it splits where that is not the one --data."""
    return _shared("auto", of + SPLIT_HELP)


def max_tokens(default: int, doc: str = "Stop after this many tokens (0: all the data).") -> Any:
    return _shared(default, doc)


def batch_size() -> Any:
    return _shared(8, "Sequences per forward pass.")


def sample() -> Any:
    return _shared("spread", SAMPLE_HELP)
