"""Shared CLI plumbing: user errors become one line on stderr and exit code 1; JSON output."""

from __future__ import annotations

import functools
import json
import sys

import typer
from rich.console import Console

from tlm_probe.errors import UserError

console = Console()
err_console = Console(stderr=True, soft_wrap=True)


def command(app: typer.Typer, name: str, example: str):
    """Register `fn` as `tlm NAME`, with an example in --help and UserError -> exit 1."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except UserError as e:
                err_console.print(f"error: {e}", markup=False, highlight=False)
                raise typer.Exit(1) from None
            except OSError as e:  # a path the user gave cannot be read or written (disk full, /proc, ...)
                where = f": {e.filename}" if e.filename else ""
                err_console.print(f"error: {e.strerror or e}{where}", markup=False, highlight=False)
                raise typer.Exit(1) from None

        app.command(name, epilog=f"Example: {example}")(wrapper)
        return fn

    return deco


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
