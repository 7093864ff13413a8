"""CLI options generated from a config dataclass (as tuned-lens does): each field's type, its docstring as
the help, its default in the help. A command names the fields it offers; nothing is declared twice."""

from __future__ import annotations

import ast
import functools
import inspect
import re
import textwrap
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer
from typer._click.core import ParameterSource  # typer's own click (typer >= 0.20)
from typer._click.globals import get_current_context

# field -> flag, where the flag reads better than the field name
FLAG_NAMES = {"n_layers": "--layers", "n_heads": "--heads", "n_kv_heads": "--kv-heads"}

MIXER_FIELDS = (
    "window", "mem_chunk", "conv_kernel", "mem_expand", "mem_persistent", "cms_chunks", "cms_step_periods",
    "match_params",
)
"""The TrainConfig fields of the mixers' settings, offered by train, compare, sweep and demo."""

Config = Annotated[Path, typer.Option(help="YAML or TOML file of training options (flags override it).")]


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (the string literal that follows its annotation)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _plain(kind):
    """`int | None` -> int: the flag's type (None is the flag not given)."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        return next(k for k in typing.get_args(kind) if k is not type(None))
    return kind


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


def _option(name: str, kind, doc: str, default, shown: dict) -> inspect.Parameter:
    flag = FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
    decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag]
    doc, stated = split_default(doc)
    if stated is not None and default in (None, 0, "", False):  # "unset": the words say what it means
        shown = {"show": stated, **shown}
    value, show = _shown_default(kind, default, shown)
    option = typer.Option(value, *decls, help=shown.get("help") or doc, show_default=show)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)


DEFAULTS = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _given(kwargs: dict, names: Sequence[str]) -> dict:
    """The flags given on the command line (or by environment): a flag left at the default it shows in
    --help is left to the config file or the dataclass default."""
    ctx = get_current_context(silent=True)
    given = [n for n in names if kwargs.get(n) is not None]
    if ctx is not None:
        given = [n for n in given if ctx.get_parameter_source(n) not in DEFAULTS]
    return {n: kwargs[n] for n in given}


def with_config_options(cls: type, names: Sequence[str], shown: dict[str, dict] | None = None) -> Callable:
    """Decorator: the command gets one option per field in `names` (after its own options) and receives
    the ones given as a dict `config_flags` {field: value}; a flag not given is left to the config file
    or the dataclass default. `shown[field]` may replace a field's help ("help"), the default the help
    states ("default") or describe it in words ("show": a default that depends on other flags)."""
    shown = shown or {}
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    defaults = {f.name: f.default for f in cls.__dataclass_fields__.values()}

    def deco(fn: Callable) -> Callable:
        own = inspect.signature(fn, eval_str=True).parameters
        extra = [_option(n, _plain(hints[n]), docs.get(n, ""), defaults[n], shown.get(n, {})) for n in names]

        @functools.wraps(fn)
        def wrapper(**kwargs):
            flags = _given(kwargs, names)
            return fn(**{k: v for k, v in kwargs.items() if k not in names}, config_flags=flags)

        keyword = inspect.Parameter.KEYWORD_ONLY
        params = [p.replace(kind=keyword) for n, p in own.items() if n != "config_flags"]
        wrapper.__signature__ = inspect.Signature(params + extra)
        wrapper.__annotations__ = {p.name: p.annotation for p in params + extra}
        return wrapper

    return deco
