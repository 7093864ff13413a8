"""Options of the importance suite: a frozen dataclass, validated, and parsed from CLI KEY=VALUE pairs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch

from tlm_probe.errors import UserError
from tlm_probe.ranges import check_values
from tlm_probe.statistic_names import DEFAULT_ABLATIONS


@dataclass(frozen=True)
class ImportanceOptions:
    sample_size: int = 2048
    """Tokens kept (uniform, seeded) for CKA, effective rank, participation ratio and linear probes."""
    seed: int = 0
    """Seed of the token sample, the resample-ablation pool and the probes' train/test split."""
    act_threshold: float = 0.1
    """A neuron is active when |activation| > act_threshold x the layer's RMS activation on that token."""
    freq_threshold: float = 0.01
    """A neuron is rarely active (counted in dead_neuron_frac) below this activation frequency."""
    probe_top_k: int = 16
    """Default probe label: the next token, among the k most frequent next tokens."""
    grad_sequences: int = 32
    """Sequences used for gradient importance (one backward pass each)."""
    ablation_rows: int = 16
    """Rows per ablation forward pass: ablations are batched max(1, rows // batch) at a time."""
    pool_size: int = 1024
    """Vectors kept per module for resample ablation."""
    max_sequences: int = 512
    """The importance pass runs on the first max_sequences probed sequences (global order, across torchrun
    ranks) and keeps only their token ids: its memory and time do not grow with --max-tokens."""
    exclude_bos: bool = False
    """Leave position 0 out of every token mean and sample."""
    lens_positions: int = 0
    """Positions per sequence the logit lens decodes (a seeded sample, the same in every sequence, listed
    in provenance; 0: all). At a large vocabulary the lens's (B, T, V) logits are most of its cost."""
    ablations: tuple[str, ...] = DEFAULT_ABLATIONS
    """Which interventions to run (subset of DEFAULT_ABLATIONS)."""
    probe_labels: Callable[[torch.Tensor], torch.Tensor] | None = field(default=None, compare=False)
    """Optional user labels: input_ids (B, T) -> labels (B, T), -1 where a token has no label."""

    def __post_init__(self):
        check_values(self)
        object.__setattr__(self, "ablations", tuple(self.ablations))
        minimum = {
            "sample_size": 2,
            "probe_top_k": 2,
            "grad_sequences": 0,
            "ablation_rows": 1,
            "pool_size": 1,
            "max_sequences": 1,
            "lens_positions": 0,
        }
        for key, low in minimum.items():
            if getattr(self, key) < low:
                raise UserError(f"importance option {key} must be >= {low}, got {getattr(self, key)}")
        for key in ("act_threshold", "freq_threshold"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise UserError(f"importance option {key} must be in [0, 1], got {getattr(self, key)}")
        unknown = [a for a in self.ablations if a not in DEFAULT_ABLATIONS]
        if unknown:
            raise UserError(f"unknown ablation {unknown[0]!r}; choose from {', '.join(DEFAULT_ABLATIONS)}")


def _to_bool(raw: str) -> bool:
    table = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
    if raw.lower() not in table:
        raise ValueError(raw)
    return table[raw.lower()]


# type of the default value -> parser of the CLI text (bool before int: bool is an int subclass)
_PARSERS: dict[type, Callable[[str], object]] = {
    bool: _to_bool,
    int: int,
    float: float,
    tuple: lambda raw: tuple(s.strip() for s in raw.split(",") if s.strip()),
}
SETTABLE = tuple(f.name for f in fields(ImportanceOptions) if f.name != "probe_labels")


def parse_pairs(pairs: list[str] | tuple[str, ...]) -> dict:
    """["sample_size=4096", "freq_threshold=0.001"] -> {"sample_size": 4096, ...}; bad input: UserError."""
    defaults, out = ImportanceOptions(), {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in SETTABLE:
            raise UserError(
                f"bad importance option {pair!r}: expected KEY=VALUE with KEY one of {', '.join(SETTABLE)}"
            )
        default = getattr(defaults, key)
        parse = next(p for t, p in _PARSERS.items() if isinstance(default, t))
        try:
            out[key] = parse(raw.strip())
        except ValueError:
            raise UserError(f"bad value for importance option {key}: {raw!r}") from None
    return out


def options_from(overrides: dict | None) -> ImportanceOptions:
    """ImportanceOptions from a plain dict (probe options); unknown keys are a UserError."""
    overrides = dict(overrides or {})
    bad = sorted(set(overrides) - {f.name for f in fields(ImportanceOptions)})
    if bad:
        raise UserError(f"unknown importance option(s) {', '.join(bad)}; choose from {', '.join(SETTABLE)}")
    return ImportanceOptions(**overrides)
