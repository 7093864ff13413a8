"""Every CLI option generated from an options dataclass: the one place an option is declared.

A command's options are the fields of one or more kw-only frozen dataclasses (the library's own options
object, e.g. ProbeOptions, plus the command's run-time settings, e.g. where it writes). Each field gives
its flag (the field name, or FLAG_NAMES), its type, its default and, from the docstring under it, its help;
`with_options(name=Class, ...)` adds one option per field to the command and hands it one instance per
class, under the keyword it was given. Nothing is written twice, so the library and the CLI cannot disagree
on a default. Booleans that default to False are plain flags (`--json`); those that default to True get an
off switch (`--guardrails/--no-guardrails`). A field with no default is a required option.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable

import typer

from tlm_probe.docstrings import field_docs
from tlm_probe.ranges import range_of, refusal

FLAG_NAMES = {"n_layers": "--layers", "n_heads": "--heads", "n_kv_heads": "--kv-heads", "json_out": "--json"}
"""field -> flag, where the flag reads better than the field name."""
SHORT = {"out": "-o", "statistic": "-s"}
"""field -> a one-letter alias."""
HIDDEN = "hidden"
"""Field metadata key: the option exists but is left out of --help (a deprecated alias)."""


def plain_type(kind):
    """`int | None` -> int; `tuple[str, ...]` -> list[str] (a repeatable option)."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
    if typing.get_origin(kind) in (tuple, list):
        return list[typing.get_args(kind)[0]]
    return kind


def flag_of(name: str) -> str:
    return FLAG_NAMES.get(name, "--" + name.replace("_", "-"))


# a docstring that states a default in words, "(default 16)" or "(...; default: n_heads)": the words
# move to typer's "[default: ...]", so that every option shows its default one way
_STATED = (re.compile(r" \(default:? ([^()]*)\)"), re.compile(r"; default:? ([^()]*)(\))"))


def split_default(doc: str) -> tuple[str, str | None]:
    """(the docstring without the default it states, that default in words or None)."""
    for pattern in _STATED:
        m = pattern.search(doc)
        if m:
            rest = m.group(2) if m.lastindex == 2 else ""
            return doc[:m.start()] + rest + doc[m.end():], m.group(1)
    return doc, None


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return ...  # required


class OutOfRange(typer.BadParameter):
    """A number outside its option's stated range: bad input, so exit 1 like every UserError (a malformed
    command line is exit 2), and the message alone, which names the option (commands/common.py prints it
    as one `error:` line)."""

    exit_code = 1

    def format_message(self) -> str:
        return self.message


def bounds(name: str, kind, metadata=None) -> dict:
    """A numeric option's stated range (ranges.py) as typer arguments: a parser callback that refuses a
    value outside it while the command line is parsed, before the command runs (one `error:` line: the
    option, the range, the value; exit 1), and the range in its help, "[1<=x<=4096]"; {} otherwise."""
    stated = range_of(name, metadata) if kind in (int, float) else None
    if stated is None:
        return {}

    def check(value):
        if value is not None and value not in stated:
            raise OutOfRange(refusal(flag_of(name), stated, value))
        return value

    return {"callback": check, "range": f"[{stated}]"}


def with_range(doc: str, extra: dict) -> str:
    """The help with the range `bounds` stated (typer's [default: ...] follows it)."""
    return f"{doc} {extra['range']}".strip() if "range" in extra else doc


def option(f: dataclasses.Field, kind, doc: str) -> inspect.Parameter:
    """The typer parameter of one field."""
    default = _default(f)
    kind = plain_type(kind)
    flag = flag_of(f.name)
    decls = [flag, *([SHORT[f.name]] if f.name in SHORT else [])]
    if kind is bool and default is True:
        decls = [f"{flag}/--no-{flag[2:]}"]
    doc, stated = split_default(f.metadata.get("help") or doc)  # a help made elsewhere: --overwrite's
    show: bool | str = stated if stated is not None else default not in (None, 0, "", False, (), [])
    value = list(default) if isinstance(default, tuple) else default
    ranged = bounds(f.name, kind, f.metadata)
    opt = typer.Option(value, *decls, help=with_range(doc, ranged), show_default=show,
                       hidden=f.metadata.get(HIDDEN, False), callback=ranged.get("callback"))
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=kind)


def cli_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of `cls` that are options (init fields, not marked cli=False)."""
    return [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("cli", True)]


def build(cls: type, values: dict):
    """An instance of `cls` from the parsed option values (lists back to the tuples the class holds)."""
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in cli_fields(cls):
        v = values[f.name]
        if isinstance(v, list) and typing.get_origin(plain_type(hints[f.name])) is list:
            v = tuple(v)
        kw[f.name] = v
    return cls(**kw)


def with_options(**classes: type) -> Callable:
    """Decorator: the command gets one option per field of each class (after its own parameters, which
    are its positional arguments) and receives `keyword=Class(...)` for each `keyword=Class` given."""

    def deco(fn: Callable) -> Callable:
        own = inspect.signature(fn, eval_str=True).parameters
        extra, owner = [], {}
        for key, cls in classes.items():
            hints, docs = typing.get_type_hints(cls), field_docs(cls)
            for f in cli_fields(cls):
                if f.name in owner:
                    raise TypeError(f"option {f.name!r} is declared by two classes of {fn.__name__}")
                owner[f.name] = key
                extra.append(option(f, hints[f.name], docs.get(f.name, "")))

        @functools.wraps(fn)
        def wrapper(**kwargs):
            built = {key: build(cls, {n: kwargs[n] for n, k in owner.items() if k == key})
                     for key, cls in classes.items()}
            return fn(**{k: v for k, v in kwargs.items() if k not in owner}, **built)

        keyword = inspect.Parameter.KEYWORD_ONLY
        params = [p.replace(kind=keyword) for n, p in own.items() if n not in classes]
        wrapper.__signature__ = inspect.Signature(params + extra)
        wrapper.__annotations__ = {p.name: p.annotation for p in params + extra}
        return wrapper

    return deco

