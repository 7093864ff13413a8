"""CLI options generated from a config dataclass (as tuned-lens does): each field's type, its docstring as
the help, its default in the help. A command names the fields it offers; nothing is declared twice."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer

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


def _help(doc: str, default, shown: dict) -> str:
    value = shown.get("default", default)
    if shown.get("help"):
        return shown["help"]
    # 0, "" and False mean "derive it" / "off": the docstring says so; other defaults are stated
    return f"{doc.rstrip('.')} (default {value})." if value not in (None, 0, "", False) else doc


def _option(name: str, kind, doc: str, default, shown: dict) -> inspect.Parameter:
    flag = FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
    decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag]
    option = typer.Option(None, *decls, help=_help(doc, default, shown))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)


def with_config_options(cls: type, names: Sequence[str], shown: dict[str, dict] | None = None) -> Callable:
    """Decorator: the command gets one option per field in `names` (after its own options) and receives
    the ones given as a dict `config_flags` {field: value}; a flag not given is left to the config file
    or the dataclass default. `shown[field]` may replace a field's help or the default the help states."""
    shown = shown or {}
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    defaults = {f.name: f.default for f in cls.__dataclass_fields__.values()}

    def deco(fn: Callable) -> Callable:
        own = inspect.signature(fn, eval_str=True).parameters
        extra = [_option(n, _plain(hints[n]), docs.get(n, ""), defaults[n], shown.get(n, {})) for n in names]

        @functools.wraps(fn)
        def wrapper(**kwargs):
            flags = {n: kwargs.pop(n) for n in names if kwargs.get(n) is not None}
            return fn(**{k: v for k, v in kwargs.items() if k not in names}, config_flags=flags)

        keyword = inspect.Parameter.KEYWORD_ONLY
        params = [p.replace(kind=keyword) for n, p in own.items() if n != "config_flags"]
        wrapper.__signature__ = inspect.Signature(params + extra)
        wrapper.__annotations__ = {p.name: p.annotation for p in params + extra}
        return wrapper

    return deco
