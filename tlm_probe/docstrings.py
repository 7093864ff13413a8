"""The docstring under each field of a dataclass: a field's one description, which the CLI generators
(commands/options.py, commands/config_options.py) show as its help and train/model_options.py carries
from TLMConfig's fields to the training options made from them."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass and of its bases (the string after its annotation).
    A base made by dataclasses.make_dataclass has no source: its fields carry their help in metadata."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass.__dict__.get("__generated__"):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, nxt in zip(body, body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
