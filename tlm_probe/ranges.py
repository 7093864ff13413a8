"""The values an option may take, checked in one place: the stated range of every numeric option, by
concept (issue 36), and the closed choices of every field typed `Literal[...]` (issue 45). The CLI generator
(commands/options.py) hands both to the parser, so that an
out-of-range value is refused by the parser, in one `error:` line naming the option, the value and the
range, before a command starts any work, and `--help` shows the range beside the default ("[1<=x<=4096]").
Library callers and `--config` files meet the same checks: each options dataclass calls `check_values` on
itself, which names the field instead of the flag (a choice: its flag either way).

A range belongs to a concept, not to a command: an option is looked up by its field name, so `--seed` has the
same range in generate, eval and train, `--layers` in schedule, plot and train. A field whose number means
something else under a shared name gives its own Range in its metadata under RANGE. Every number a command
takes has one (tests/test_option_ranges.py); the bounds are generous (far past any model tlm trains or
probes) and exist so that a typo like 10**18 fails at once instead of allocating or looping for hours.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import re
import types
import typing
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


def literal_values(kind) -> tuple:
    """The values of a `Literal[...]` type (also in `X | None`): a closed choice; () for any other type."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        return next((v for k in typing.get_args(kind) if (v := literal_values(k))), ())
    return typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else ()


@functools.cache
def choices_of(cls: type) -> dict[str, tuple]:
    """Field name -> the values of its Literal type, for every closed choice of the dataclass `cls`."""
    hints = typing.get_type_hints(cls)
    return {f.name: values for f in dataclasses.fields(cls) if (values := literal_values(hints[f.name]))}


def choice_refusal(name: str, values: tuple, value) -> str:
    """The one message for a value outside its closed choice (named by its flag: the CLI's and the
    library's message are one)."""
    shown = ", ".join(str(v) or "''" for v in values)
    return f"--{name.replace('_', '-')} must be one of {shown}, got {value!r}"


def _numeric(annotation) -> bool:
    """A field declared as a number (int, float, or either or None), not also as text, a list or a choice."""
    words = set(re.findall(r"\w+", str(annotation)))
    return bool(words & {"int", "float"}) and not words & {"str", "list", "tuple", "Literal"}


def check_values(obj) -> None:
    """Refuse (UserError) the first numeric field of the dataclass instance `obj` outside its range (a
    fraction in a range of integers is outside it), and the first closed choice (a Literal field) outside
    its values. A NumPy number in range becomes the Python number (json.dumps takes no np.int64)."""
    for name, values in choices_of(type(obj)).items():
        if getattr(obj, name) not in values and getattr(obj, name) is not None:
            raise UserError(choice_refusal(name, values, getattr(obj, name)))
    for f in dataclasses.fields(obj):
        value, stated = getattr(obj, f.name, None), range_of(f.name, f.metadata)
        if stated is None or value is None or isinstance(value, bool):
            continue
        if not isinstance(value, numbers.Real):  # numpy's numbers are Real too
            if _numeric(f.type):  # a word where a number belongs: a library call's or a config's typo
                raise UserError(refusal(f.name, stated, repr(value)))
            continue
        if value not in stated or (stated.integer and not isinstance(value, numbers.Integral)):
            raise UserError(refusal(f.name, stated, value))  # 9.5 (or 9.0) layers is not a count
        if type(value) not in (int, float):  # np.int64(9) -> 9: what json.dumps writes into provenance
            python = int(value) if isinstance(value, numbers.Integral) else float(value)
            object.__setattr__(obj, f.name, python)
