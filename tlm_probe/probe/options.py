"""ProbeOptions: what shapes a probe run besides the model (recorded in provenance). Kept apart from the
engine and its torch imports, so that the CLI builds `tlm probe`'s options from it at start-up for free."""

from __future__ import annotations

from dataclasses import dataclass, field

from tlm_probe.capture.dispatch import DEVICE_MAP_HELP, MAX_MEMORY_HELP, check_dispatch_options
from tlm_probe.data.sources import SPLIT_CHOICES, SPLIT_HELP
from tlm_probe.errors import UserError
from tlm_probe.ranges import check_ranges
from tlm_probe.statistic_names import asked_statistics


@dataclass(frozen=True, kw_only=True)
class ProbeOptions:
    """Everything that shapes a probe run besides the model. `tlm probe`'s options are generated from these
    fields (commands/options.py): one default and one help for the library and the CLI."""

    data: str = "builtin:pydoc"
    """builtin:pydoc | builtin:stdlib | builtin:env | text file/folder/glob | file.jsonl[:field] |
    hf:NAME[:split] | token ids (.npy, .pt, .tok, folder)."""
    split: str = field(default="auto", metadata={"help": SPLIT_HELP})
    """See data/sources.py SPLIT_HELP."""
    stats: str = "alignment"
    """Statistic sets or names, comma separated (alignment, attention, importance, all, align_mlp_mid,
    attn_entropy, ...)."""
    backend: str = "native"
    """native | transformer-lens | nnsight"""
    seq_len: int = 0
    """Tokens per sequence (0: a 2-D token array's row length, else 256 or the model's context if
    shorter). Rows of a 2-D array are never packed together; a longer --seq-len is refused."""
    max_tokens: int = 65_536
    """Stop after this many tokens (0: all the data)."""
    batch_size: int = 8
    """Sequences per forward pass."""
    exclude_bos: bool = False
    """Leave position 0 out of every mean."""
    half: str = ""
    """a | b: probe only every other sequence of the ones read (a: the 1st, 3rd, ...; b: the 2nd, 4th,
    ...), two disjoint halves of the same tokens, for `tlm schedule --from-probe A --check-with B`."""
    device: str = "auto"
    """auto (a GPU when there is one, else the CPU) | cpu | cuda | cuda:N | mps"""
    dtype: str = "float32"
    """float32 | float64 | bfloat16 | float16"""
    device_map: str = field(default="", metadata={"help": DEVICE_MAP_HELP})
    """See capture/dispatch.py DEVICE_MAP_HELP."""
    max_memory: str = field(default="", metadata={"help": MAX_MEMORY_HELP})
    """See capture/dispatch.py MAX_MEMORY_HELP."""
    guardrails: bool = field(default=True, metadata={"cli": False})
    """Check that the captured pieces add up (cheap; turn off only to measure its cost)."""
    length_bucketing: bool = field(default=True, metadata={"cli": False})
    """Batch sequences of similar length together (less padding) when every statistic ignores order."""
    importance: dict = field(default_factory=dict, metadata={"cli": False})
    """Options of the importance set (tlm_probe.importance.options.ImportanceOptions fields); the CLI's
    repeatable --importance-option KEY=VALUE fills it."""

    def __post_init__(self):
        check_ranges(self)
        _check_options(self)


def _check_options(opts: ProbeOptions) -> None:
    """Values no probe can run with (numbers: check_ranges): one UserError line each, before anything is
    loaded."""
    if opts.half not in ("", "a", "b"):
        raise UserError(f"--half must be a or b, got {opts.half!r}")
    if opts.split not in SPLIT_CHOICES:
        raise UserError(f"--split must be one of {', '.join(SPLIT_CHOICES)}, got {opts.split!r}")
    asked_statistics(opts.stats)  # a typo in --stats is refused here, before torch is imported
    check_dispatch_options(opts.device_map, opts.max_memory)
