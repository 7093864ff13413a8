"""Every command of the typer app, subcommands by their full name ("schedule from-probe"), for the tests
that read the options of all of them."""

from __future__ import annotations

import typer

from cli import app


def all_commands() -> dict:
    """name -> click command (typer vendors its own click: duck-typed, not isinstance)."""
    out = {}
    for name, cmd in typer.main.get_command(app).commands.items():
        subs = getattr(cmd, "commands", None)
        out |= {f"{name} {k}": c for k, c in subs.items()} if subs else {name: cmd}
    return out
