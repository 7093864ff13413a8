"""Every CLI option generated from an options dataclass: the one place an option is declared.

A command's options are the fields of kw-only frozen dataclasses (the library's own options object, e.g.
ProbeOptions, plus the command's run-time settings, e.g. where it writes). Each field gives its flag (the
field name, or FLAG_NAMES), its type, its default and, from the docstring under it (or metadata "help"), its
help. `with_options(name=Class, ...)` hands the command one instance per class; `with_config_options`
offers chosen TrainConfig fields and hands over only the flags given, which override a --config file.
Every boolean reads `--x/--no-x` (--help shows `--x` alone where it is off by default: help_layout.py).
A `Literal[...]` field is a closed choice and a number has a stated range
(ranges.py): both are checked while the command line is parsed, as one `error:` line and exit 1 (typer's
own Literal check would exit 2, a usage error), and shown in --help. A field with no default is required.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich import markup

from tlm_probe.docstrings import field_docs
from tlm_probe.ranges import choice_refusal, literal_values, range_of, refusal
from tlm_probe.train.model_options import MIXER_FIELDS as MIXER_SETTINGS
from tlm_probe.train.model_options import SHOWN_DEFAULT

FLAG_NAMES = {"n_layers": "--layers", "n_heads": "--heads", "n_kv_heads": "--kv-heads", "json_out": "--json"}
"""field -> flag, where the flag reads better than the field name."""
SHORT = {"out": "-o", "statistic": "-s"}
"""field -> a one-letter alias."""
HIDDEN = "hidden"
"""Field metadata key: the option exists but is left out of --help (a deprecated alias)."""
MIXER_FLAGS = (*MIXER_SETTINGS, "match_params")
"""The TrainConfig fields of the mixers' settings, offered by train, compare, sweep and demo."""
Config = Annotated[Path, typer.Option(help="YAML or TOML file of training options (flags override it; --no-x "
                                      "turns off an on/off option that it turns on).")]


def plain_type(kind):
    """`int | None` -> int; `tuple[str, ...]` -> list[str] (repeatable); a Literal -> its values' type."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
    if typing.get_origin(kind) in (tuple, list):
        return list[typing.get_args(kind)[0]]
    return type(literal_values(kind)[0]) if literal_values(kind) else kind


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


class OutOfRange(typer.BadParameter):
    """A number outside its range or a word outside its choice: bad input, so exit 1 like every UserError
    (a malformed command line is exit 2), and the message alone, which names the option (commands/common.py
    prints it as one `error:` line)."""

    exit_code = 1

    def format_message(self) -> str:
        return self.message


def checks(name: str, kind, metadata=None) -> dict:
    """The parser callback that refuses a value outside the field's stated range or closed choice, and how
    --help shows them: a range in the help ("[1<=x<=4096]"), the choices as the metavar ("[a | b]") or, a
    long list, in the help ("[auto | train | val | test | all]")."""
    stated = range_of(name, metadata) if plain_type(kind) in (int, float) else None
    values = literal_values(kind)
    if stated is None and not values:
        return {}

    def check(value):
        if value is None or (value in values if values else value in stated):
            return value
        why = choice_refusal(name, values, value) if values else refusal(flag_of(name), stated, value)
        raise OutOfRange(why)

    choices = "[" + " | ".join(str(v) or "''" for v in values) + "]"  # spaced: wraps between choices
    if values and len(choices) <= SHORT_CHOICES:
        return {"callback": check, "metavar": choices}
    if values:  # escaped: typer reads help as rich markup, where "[auto | ...]" would be a style tag
        return {"callback": check, "metavar": "<choice>", "help_end": markup.escape(choices)}
    return {"callback": check, "help_end": f"[{stated}]"}


SHORT_CHOICES = 16
"""The longest choice list shown as the metavar (`['' | a | b]`); a longer one ends the help text, as a
range does: --help's table makes the help column no wider than the widest metavar once the terminal is too
narrow for both: with the lists as metavars, `tlm probe --help` had 22 characters of help text at 80 columns
(32 at 100, 42 at 120), and 30 (50, 70) without."""


def option(name: str, kind, doc: str, value, show, metadata) -> inspect.Parameter:
    """The typer parameter of one field: `value` its default, `show` typer's show_default."""
    kind, flag, extra = plain_type(kind), flag_of(name), checks(name, kind, metadata)
    decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag, *([SHORT[name]] if name in SHORT else [])]
    doc = f"{doc} {extra.pop('help_end')}".strip() if "help_end" in extra else doc
    opt = typer.Option(value, *decls, help=doc, show_default=show, hidden=metadata.get(HIDDEN, False),
                       **extra)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=kind)


def cli_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of `cls` that are options (init fields, not marked cli=False)."""
    return [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("cli", True)]


def _docs(cls: type) -> dict[str, str]:
    """Each field's help: its metadata "help" (a shared field's, a help made elsewhere) or its docstring."""
    docs = field_docs(cls)
    return {f.name: f.metadata.get("help") or docs.get(f.name, "") for f in dataclasses.fields(cls)}


def _wrapped(fn: Callable, drop: Sequence[str], extra: list, call: Callable) -> Callable:
    """`fn` with its own parameters (keyword-only, less `drop`) and then `extra`; typer calls `call`."""
    own = inspect.signature(fn, eval_str=True).parameters
    wrapper = functools.wraps(fn)(call)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for n, p in own.items() if n not in drop]
    wrapper.__signature__ = inspect.Signature(params + extra)
    wrapper.__annotations__ = {p.name: p.annotation for p in params + extra}
    return wrapper


def _field_option(f: dataclasses.Field, kind, doc: str) -> inspect.Parameter:
    default = (f.default if f.default is not dataclasses.MISSING
               else f.default_factory() if f.default_factory is not dataclasses.MISSING else ...)
    doc, stated = split_default(doc)
    show: bool | str = stated if stated is not None else default not in (None, 0, "", False, (), [])
    value = list(default) if isinstance(default, tuple) else default
    return option(f.name, kind, doc, value, show, f.metadata)


def with_options(**classes: type) -> Callable:
    """Decorator: the command gets one option per field of each class (after its own parameters, which
    are its positional arguments) and receives `keyword=Class(...)` for each `keyword=Class` given."""

    def deco(fn: Callable) -> Callable:
        extra, owner = [], {}
        for key, cls in classes.items():
            hints, docs = typing.get_type_hints(cls), _docs(cls)
            for f in cli_fields(cls):
                if f.name in owner:
                    raise TypeError(f"option {f.name!r} is declared by two classes of {fn.__name__}")
                owner[f.name] = key
                extra.append(_field_option(f, hints[f.name], docs[f.name]))

        def call(**kwargs):
            built = {key: _build(cls, {n: kwargs[n] for n, k in owner.items() if k == key})
                     for key, cls in classes.items()}
            return fn(**{k: v for k, v in kwargs.items() if k not in owner}, **built)

        return _wrapped(fn, classes, extra, call)

    return deco


def _build(cls: type, values: dict):
    """An instance of `cls` from the parsed option values (lists back to the tuples the class holds)."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: tuple(values[f.name]) if isinstance(values[f.name], list)
                  and typing.get_origin(plain_type(hints[f.name])) is list else values[f.name]
                  for f in cli_fields(cls)})


def _shown_default(kind, default, shown: dict) -> tuple[object, object]:
    """(the option's default, its show_default) so that --help states it as typer does, "[default: X]".
    0, "" and False mean "derive it" / "off": the docstring says so and no default is shown. A default
    the flag's type can hold is the option's own default (the command then tells a given flag from it
    by the parameter's source, not by its value); any other is described by show_default."""
    if "show" in shown:
        return None, shown["show"]
    value = shown.get("default", default)
    if value in (None, 0, "", False):
        return None, False
    if kind in (int, float, str) and isinstance(value, kind) and not isinstance(value, bool):
        return value, True
    return None, str(value)


_DEFAULTS = ("DEFAULT", "DEFAULT_MAP")
"""Names of the parameter sources that mean "not given" (typer's Context.get_parameter_source)."""
CTX = "_tlm_ctx"


def _given(kwargs: dict, names: Sequence[str], ctx: typer.Context | None) -> dict:
    """The flags given on the command line (or by environment): a flag left at the default it shows in
    --help is left to the config file or the dataclass default."""
    given = [n for n in names if kwargs.get(n) is not None]
    if ctx is not None:
        given = [n for n in given if getattr(ctx.get_parameter_source(n), "name", None) not in _DEFAULTS]
    return {n: kwargs[n] for n in given}


def _config_option(f: dataclasses.Field, kind, doc: str, shown: dict) -> inspect.Parameter:
    doc, stated = split_default(shown.get("help") or doc)
    if SHOWN_DEFAULT in f.metadata and not shown:  # an option made from a model field: the model's default
        shown = {"show": f.metadata[SHOWN_DEFAULT]}
    if stated is not None and f.default in (None, 0, "", False):  # "unset": the words say what it means
        shown = {"show": stated, **shown}
    value, show = _shown_default(plain_type(kind), f.default, shown)
    return option(f.name, kind, doc, value, show, f.metadata)


def with_config_options(cls: type, names: Sequence[str], shown: dict[str, dict] | None = None) -> Callable:
    """Decorator: the command gets one option per field in `names` (after its own options) and receives
    the ones given as a dict `config_flags` {field: value}; a flag not given is left to the config file
    or the dataclass default. `shown[field]` may replace a field's help ("help"), the default the help
    states ("default") or describe it in words ("show": a default that depends on other flags)."""
    hints, docs, by_name = typing.get_type_hints(cls), _docs(cls), cls.__dataclass_fields__
    ctx = inspect.Parameter(CTX, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)  # typer fills it
    extra = [_config_option(by_name[n], hints[n], docs[n], (shown or {}).get(n, {})) for n in names] + [ctx]

    def deco(fn: Callable) -> Callable:
        def call(**kwargs):
            flags = _given(kwargs, names, kwargs.pop(CTX, None))
            return fn(**{k: v for k, v in kwargs.items() if k not in names}, config_flags=flags)

        return _wrapped(fn, ("config_flags",), extra, call)

    return deco
