"""Command settings that several commands share, declared once (their flags are generated from these
fields by commands/options.py): how a model is loaded, how many threads, JSON output."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Loading:
    """How a checkpoint may be loaded."""

    trust_remote_code: bool = False
    """Run a hub model's own code."""
    unsafe_pickle: bool = False
    """Allow pickle (.bin/.pt) weights."""


@dataclass(frozen=True, kw_only=True)
class Threads:
    threads: int = 0
    """CPU threads for PyTorch during the run (0: PyTorch's default; 1 is fastest when busy)."""


@dataclass(frozen=True, kw_only=True)
class JsonOut:
    json_out: bool = False
    """Print the result as JSON instead of a table."""
