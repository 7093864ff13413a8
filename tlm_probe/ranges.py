"""The stated range of every numeric option, by concept (issue 36): one table, read by both CLI generators
(commands/options.py, commands/config_options.py), which hand it to typer as min/max, so that an
out-of-range value is refused by the parser, in one `error:` line naming the option, the value and the
range, before a command starts any work, and `--help` shows the range beside the default ("[1<=x<=4096]").
Library callers and `--config` files meet the same table: each options dataclass calls `check_ranges` on
itself, which names the field instead of the flag.

A range belongs to a concept, not to a command: an option is looked up by its field name, so `--seed` has the
same range in generate, eval and train, `--layers` in schedule, plot and train. A field whose number means
something else under a shared name gives its own Range in its metadata under RANGE. Every number a command
takes has one (tests/test_option_ranges.py); the bounds are generous (far past any model tlm trains or
probes) and exist so that a typo like 10**18 fails at once instead of allocating or looping for hours.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tlm_probe.errors import UserError
from tlm_probe.seeds import SEED_MAX


@dataclass(frozen=True)
class Range:
    low: int | float
    high: int | float

    def __str__(self) -> str:
        return f"{self.low}<=x<={self.high}"

    def __contains__(self, value) -> bool:
        return self.low <= value <= self.high  # nan is in no range

    @property
    def integer(self) -> bool:
        """A range of integers (its bounds are): a count, a width, a seed. An lr of 50 is a number."""
        return isinstance(self.low, int) and isinstance(self.high, int)


RANGE = "range"
"""Field metadata key: a Range that replaces the table's for this one field."""

COUNT = Range(0, 10**9)  # steps, items, documents, intervals where 0 says "none" / "all" / "at the end"
POSITIVE = Range(1, 10**9)  # steps between two events, micro-batches
TOKENS = Range(0, 2**50)  # token budgets (0: all the data)
CONTEXT = Range(0, 2**24)  # tokens per sequence (0: derive it)
WIDTH = Range(1, 2**20)  # residual and MLP widths, heads, rounding multiples (schedules/options.py MAX_WIDTH)
LAYERS = Range(1, 10_000)  # schedules/options.py MAX_LAYERS
RATIO = Range(0.0, 64.0)  # width ratios of a schedule, exponents on its weights
FRACTION = Range(0.0, 1.0)
SEED = Range(0, SEED_MAX)  # what NumPy's legacy seeding takes (seeds.py)
THREADS = Range(0, 4096)  # 0: PyTorch's default

RANGES: dict[str, Range] = {
    "seed": SEED,
    "threads": THREADS,
    "n_layers": LAYERS, "layers": LAYERS,
    "n_heads": WIDTH, "n_kv_heads": Range(0, WIDTH.high),  # 0: n_heads
    "d_model": WIDTH, "d_ff": WIDTH, "multiple_of": WIDTH, "vocab_size": Range(0, 2**24),
    "window": Range(1, 2**24), "mem_chunk": Range(1, 2**20), "mem_expand": Range(1, 1024),
    "mem_persistent": Range(0, 2**16), "conv_kernel": Range(1, 4096),
    "seq_len": CONTEXT, "ppl_context": CONTEXT, "ppl_stride": CONTEXT,
    "max_tokens": TOKENS, "ppl_tokens": TOKENS, "tokens": TOKENS, "eval_tokens": TOKENS,
    "shard_tokens": Range(1, 2**40),
    "max_new_tokens": Range(1, 1_000_000),  # generation.py MAX_NEW_TOKENS
    "batch_size": Range(1, 2**16), "grad_accum": Range(1, 2**16),
    "steps": COUNT, "warmup": COUNT, "stop_at": POSITIVE, "ckpt_interval": COUNT, "keep_last": COUNT,
    "eval_interval": POSITIVE, "log_interval": POSITIVE,
    "limit": COUNT, "eval_limit": COUNT, "task_limit": COUNT, "max_unstable": COUNT,
    "lr": Range(0.0, 10.0),
    "temperature": Range(0.0, 100.0), "top_p": FRACTION,
    "start": RATIO, "end": RATIO, "wide_factor": RATIO, "min_ratio": RATIO, "max_ratio": RATIO,
    "power": RATIO, "steepness": Range(0.0, 1e4),
    "min_spearman": Range(-1.0, 1.0), "min_w": FRACTION,
    "peak_flops": Range(0.0, 1e21),  # FLOP/s (0: a table guess)
    "dpi": Range(10, 1200),
}
"""Field name -> its range: one concept, one range, in every command that offers it."""


def range_of(name: str, metadata=None) -> Range | None:
    """The range of the numeric option made from field `name` (its metadata's RANGE first)."""
    return (metadata or {}).get(RANGE) or RANGES.get(name)


def refusal(label: str, stated: Range, value) -> str:
    """The one message for a number outside its range (label: the flag on the command line, the field in
    a library call or a --config file)."""
    kind = "an integer" if stated.integer else "a number"
    return f"{label} must be {kind} in [{stated.low}, {stated.high}], got {value}"


def check_ranges(obj) -> None:
    """Refuse (UserError) the first numeric field of the dataclass instance `obj` outside its range."""
    for f in dataclasses.fields(obj):
        value, stated = getattr(obj, f.name, None), range_of(f.name, f.metadata)
        if stated is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value not in stated:
            raise UserError(refusal(f.name, stated, value))
