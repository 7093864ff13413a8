"""ProbeOptions: what shapes a probe run besides the model (recorded in provenance). Kept apart from the
engine and its torch imports, so that the CLI builds `tlm probe`'s options from it at start-up for free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tlm_probe.capture.dispatch import check_dispatch_options
from tlm_probe.capture.option_fields import Dtype, Split, shared
from tlm_probe.ranges import check_values
from tlm_probe.statistic_names import asked_statistics

DEFAULT_SEQ_LEN = 256
"""--seq-len 0 on a token stream or text: this many tokens per sequence, or the model's context if shorter."""


@dataclass(frozen=True, kw_only=True)
class ProbeOptions:
    """Everything that shapes a probe run besides the model. `tlm probe`'s options are generated from these
    fields (commands/options.py): one default and one help for the library and the CLI."""

    data: str = shared("data")
    split: Split = shared("split")
    stats: str = "alignment"
    """Statistic sets or names, comma separated (alignment, attention, importance, all, align_mlp_mid,
    attn_entropy, ...)."""
    backend: str = "native"
    """native | transformer-lens | nnsight"""
    seq_len: int = 0
    """Tokens per sequence (0: a 2-D token array's row length, else 256 or the model's context if
    shorter). Rows of a 2-D array are never packed together; a longer --seq-len is refused."""
    max_tokens: int = shared("max_tokens", 65_536)
    batch_size: int = shared("batch_size")
    exclude_bos: bool = False
    """Leave position 0 out of every mean."""
    half: Literal["", "a", "b"] = ""
    """Probe only every other sequence of the ones read (a: the 1st, 3rd, ...; b: the 2nd, 4th,
    ...), two disjoint halves of the same tokens, for `tlm schedule --from-probe A --check-with B`."""
    device: str = shared("device")
    dtype: Dtype = shared("dtype")
    device_map: str = shared("device_map")
    max_memory: str = shared("max_memory")
    guardrails: bool = field(default=True, metadata={"cli": False})
    """Check that the captured pieces add up (cheap; turn off only to measure its cost)."""
    length_bucketing: bool = field(default=True, metadata={"cli": False})
    """Batch sequences of similar length together (less padding) when every statistic ignores order."""
    importance: dict[str, Any] = field(default_factory=dict, metadata={"cli": False})
    """Options of the importance set (tlm_probe.importance.options.ImportanceOptions fields); the CLI's
    repeatable --importance-option KEY=VALUE fills it."""

    def __post_init__(self) -> None:
        check_values(self)
        _check_options(self)


def _check_options(opts: ProbeOptions) -> None:
    """Values no probe can run with (numbers and choices: check_values): one UserError line each, before
    anything is loaded."""
    asked_statistics(opts.stats)  # a typo in --stats is refused here, before torch is imported
    check_dispatch_options(opts.device_map, opts.max_memory)
