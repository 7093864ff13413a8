"""The values an option may take, checked in one place: the stated range of every numeric option, by
concept (issue 36), and the closed choices of every field typed `Literal[...]` (issue 45). The CLI generator
(commands/options.py) hands both to the parser, so that an
out-of-range value is refused by the parser, in one `error:` line naming the option, the value and the
range, before a command starts any work, and `--help` shows the range beside the default ("[1<=x<=4096]").
Library callers and `--config` files meet the same checks: each options dataclass calls `check_values` on
itself, which names the field instead of the flag (a choice: its flag either way), and which also checks
what the parser's types check on the command line: every other field's type, from its annotation.

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
from pathlib import PurePath

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


NONE_IS_ZERO = frozenset({"max_tokens"})
"""Numeric fields where a library call's None means what their 0 means ("all the data"), an idiom of
long standing; any other field not typed `| None` refuses None (it failed later as a TypeError)."""


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


IN_MEMORY = "in_memory"
"""Field metadata key: a library call may give this field an object in memory (a corpus as a list of texts
or an array of ids); its annotation is the command line's type, so it is not checked here (the corpus
reader says what it takes)."""


def _accepts(kind) -> tuple[str, typing.Callable[[object], bool]] | None:
    """(what a value of the annotation `kind` is, in words; a test of a value) for the types an option
    holds; None where the annotation says nothing checked here (a choice, a callable, Any)."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        parts = [_accepts(k) for k in typing.get_args(kind)]
        if any(p is None for p in parts):
            return None
        return " or ".join(w for w, _ in parts), lambda v: any(test(v) for _, test in parts)
    args = typing.get_args(kind)
    if typing.get_origin(kind) is tuple and args[-1:] == (Ellipsis,) and args[0] is str:  # a comma string too
        return "text or a list of texts", lambda v: isinstance(v, str) or (
            isinstance(v, list | tuple) and all(isinstance(x, str) for x in v))
    if typing.get_origin(kind) is tuple and args and all(a is int for a in args):
        return f"{len(args)} integers", lambda v: isinstance(v, list | tuple) and len(v) == len(args) and all(
            isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in v)
    if typing.get_origin(kind) is dict:  # dict[str, Any]: checked as a dict (its keys by the field's reader)
        return _PLAIN[dict]
    return _PLAIN.get(kind) or (("a path", lambda v: isinstance(v, str | PurePath))
                                if isinstance(kind, type) and issubclass(kind, PurePath) else None)


_PLAIN: dict[object, tuple[str, typing.Callable[[object], bool]]] = {
    type(None): ("None", lambda v: v is None),
    str: ("text", lambda v: isinstance(v, str | PurePath)),  # a Path where a path's text belongs: its text
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool)),
    float: ("a number", lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)),
    dict: ("a dict", lambda v: isinstance(v, dict)),
}


@functools.cache
def kinds_of(cls: type) -> dict[str, tuple[str, typing.Callable[[object], bool]]]:
    """Field name -> (its type in words, a test) for the fields of `cls` with no range and no choice, whose
    annotation is checked here."""
    hints = typing.get_type_hints(cls)
    return {f.name: accepts for f in dataclasses.fields(cls)
            if not f.metadata.get(IN_MEMORY) and range_of(f.name, f.metadata) is None
            and not literal_values(hints[f.name]) and (accepts := _accepts(hints[f.name])) is not None}


def _words(annotation) -> set[str]:
    """The names in a field's annotation, as written ('int | None' -> {'int', 'None'})."""
    return set(re.findall(r"\w+", str(annotation)))


def _numeric(annotation) -> bool:
    """A field declared as a number (int, float, or either or None), not also as text, a list or a choice."""
    words = _words(annotation)
    return bool(words & {"int", "float"}) and not words & {"str", "list", "tuple", "Literal"}


def check_values(obj) -> None:
    """Refuse (UserError) the first field of the dataclass instance `obj` of another type (a field with no
    range and no choice), the first closed choice (a Literal field) outside its values, and the first
    numeric field outside its range (a fraction in a range of integers is outside it). A NumPy number in
    range becomes the Python number (json.dumps takes no np.int64)."""
    for name, (words, test) in kinds_of(type(obj)).items():  # a library call's or a config file's value
        value = getattr(obj, name)
        if not test(value):
            raise UserError(f"{name} must be {words}, got {str(repr(value))[:80]}")
        if isinstance(value, PurePath) and "path" not in words:  # a text field holds the path's text
            object.__setattr__(obj, name, str(value))
    for name, values in choices_of(type(obj)).items():  # (an array's == with a word is no answer)
        value = getattr(obj, name)
        if value is not None and not (isinstance(value, str | int | float) and value in values):
            raise UserError(choice_refusal(name, values, getattr(obj, name)))
    for f in dataclasses.fields(obj):
        _check_number(obj, f)


def _check_number(obj, f: dataclasses.Field) -> None:
    value, stated = getattr(obj, f.name, None), range_of(f.name, f.metadata)
    if stated is None or isinstance(value, bool):
        return
    if value is None:  # "derive it" where the field says `| None`; else a number is missing
        if f.name in NONE_IS_ZERO:
            object.__setattr__(obj, f.name, 0)
        elif "None" not in _words(f.type):
            raise UserError(refusal(f.name, stated, None))
        return
    if not isinstance(value, numbers.Real):  # numpy's numbers are Real too
        if _numeric(f.type):  # a word where a number belongs: a library call's or a config's typo
            raise UserError(refusal(f.name, stated, repr(value)))
        return
    if value not in stated or (stated.integer and not isinstance(value, numbers.Integral)):
        raise UserError(refusal(f.name, stated, value))  # 9.5 (or 9.0) layers is not a count
    if type(value) not in (int, float):  # np.int64(9) -> 9: what json.dumps writes into provenance
        python = int(value) if isinstance(value, numbers.Integral) else float(value)
        object.__setattr__(obj, f.name, python)
