"""The docstring under each field of a dataclass: a field's one description, which the CLI generators
(commands/options.py, commands/config_options.py) show as its help and train/model_options.py carries
from TLMConfig's fields to the training options made from them.

Every `tlm` command reads these at start-up, for some 50 dataclasses: each module's source is parsed once
and each class's docs are kept (inspect.getsource per class, re-tokenizing the file each time, was a
third of the CLI's import time)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
from pathlib import Path


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass and of its bases (the string after its annotation)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_docs(klass))
    return docs


@functools.cache
def _own_docs(klass: type) -> dict[str, str]:
    node = _class_node(klass) or ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
    body = node.body
    docs = {}
    for field, nxt in zip(body, body[1:], strict=False):
        if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[field.target.id] = " ".join(nxt.value.value.split())
    return docs


def _class_node(klass: type) -> ast.ClassDef | None:
    """The class's node in its module's parsed source, by its qualified name (None for a class made inside
    a function, or without a source file: inspect.getsource finds those)."""
    if "<locals>" in klass.__qualname__:
        return None
    try:
        path = inspect.getsourcefile(klass)
    except TypeError:
        return None
    if not path or not Path(path).is_file():
        return None
    node, nodes = None, _module_tree(path).body
    for part in klass.__qualname__.split("."):
        node = next((n for n in nodes if isinstance(n, ast.ClassDef) and n.name == part), None)
        if node is None:
            return None
        nodes = node.body
    return node


@functools.cache
def _module_tree(path: str) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"))
