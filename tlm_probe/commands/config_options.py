"""CLI options generated from a config dataclass (as tuned-lens does): each field's type, its docstring as
the help, its default in the help. A command names the fields it offers; nothing is declared twice."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer

from tlm_probe.commands.options import bounds, field_docs, flag_of, plain_type, split_default, with_range
from tlm_probe.train.model_options import MIXER_FIELDS as MIXER_SETTINGS
from tlm_probe.train.model_options import SHOWN_DEFAULT

MIXER_FIELDS = (*MIXER_SETTINGS, "match_params")
"""The TrainConfig fields of the mixers' settings (every registered mixer's, made from its settings class),
offered by train, compare, sweep and demo."""

Config = Annotated[Path, typer.Option(help="YAML or TOML file of training options (flags override it).")]


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


def _option(name: str, kind, doc: str, default, shown: dict, metadata) -> inspect.Parameter:
    flag = flag_of(name)
    decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag]
    doc, stated = split_default(doc)
    if stated is not None and default in (None, 0, "", False):  # "unset": the words say what it means
        shown = {"show": stated, **shown}
    value, show = _shown_default(kind, default, shown)
    ranged = bounds(name, kind, metadata)
    option = typer.Option(value, *decls, help=with_range(shown.get("help") or doc, ranged), show_default=show,
                          callback=ranged.get("callback"))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)


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


def with_config_options(cls: type, names: Sequence[str], shown: dict[str, dict] | None = None) -> Callable:
    """Decorator: the command gets one option per field in `names` (after its own options) and receives
    the ones given as a dict `config_flags` {field: value}; a flag not given is left to the config file
    or the dataclass default. `shown[field]` may replace a field's help ("help"), the default the help
    states ("default") or describe it in words ("show": a default that depends on other flags)."""
    shown = shown or {}
    hints, docs, by_name = typing.get_type_hints(cls), field_docs(cls), cls.__dataclass_fields__
    # an option made from a model field (train/model_options.py) carries its help and the model's default
    meta = {n: by_name[n].metadata for n in names}
    docs = {n: meta[n].get("help") or docs.get(n, "") for n in names}
    shown = {n: shown.get(n) or ({"show": meta[n][SHOWN_DEFAULT]} if SHOWN_DEFAULT in meta[n] else {})
             for n in names}

    def deco(fn: Callable) -> Callable:
        own = inspect.signature(fn, eval_str=True).parameters
        extra = [_option(n, plain_type(hints[n]), docs[n], by_name[n].default, shown[n], meta[n])
                 for n in names]

        @functools.wraps(fn)
        def wrapper(**kwargs):
            flags = _given(kwargs, names, kwargs.pop(CTX, None))
            return fn(**{k: v for k, v in kwargs.items() if k not in names}, config_flags=flags)

        keyword = inspect.Parameter.KEYWORD_ONLY
        params = [p.replace(kind=keyword) for n, p in own.items() if n != "config_flags"]
        ctx = inspect.Parameter(CTX, keyword, annotation=typer.Context)  # typer passes the context here
        extra = [*extra, ctx]
        wrapper.__signature__ = inspect.Signature(params + extra)
        wrapper.__annotations__ = {p.name: p.annotation for p in params + extra}
        return wrapper

    return deco
