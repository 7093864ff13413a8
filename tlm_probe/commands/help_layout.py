"""How --help lays out a command's options: on/off flags show no value type, and no column of `--no-x`.

Every on/off flag reads `--x/--no-x` (commands/options.py). typer's help gives the `--no-x` forms a column of
their own, as wide as the longest (`--no-trust-remote-code`): with the long choice lists (options.py's
SHORT_CHOICES) it left `tlm probe --help` 16 characters of help text at 80 columns (22 at 100, 30 at 120).
In --help a flag that is off by default shows `--x` alone, since `--no-x` is what it already does (where a
--config file may turn it on, --config's help says so), and a flag that is on by default shows `--x/--no-x`
in the options' own column, its default "on". Only the help is laid out so: the command parses the same
options, and the CLI reference page lists both forms.
"""

from __future__ import annotations

import copy

from typer.core import TyperCommand


def plain_flags(params: list) -> list:
    """On/off flags show no value type in --help (typer would print `<bool>` beside --json or --help, as
    if it took a value): a flag's metavar is empty."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


def shown(param):
    """The option as --help shows it: an on/off flag with its `--no-x` form folded in (a copy)."""
    if not (getattr(param, "is_bool_flag", False) and param.secondary_opts):
        return param
    view = copy.copy(param)
    view.secondary_opts = []
    if param.default:  # on: both forms, in the options' column; typer shows the default as the value "on"
        view.opts = [f"{param.opts[0]}/{param.secondary_opts[0]}"]
        view.default = "on"
    return view


class PlainFlags(TyperCommand):
    """A command whose --help shows on/off flags as `shown` lays them out (parsing is unchanged)."""

    _laying_out_help = False

    def get_params(self, ctx):
        params = plain_flags(super().get_params(ctx))
        return [shown(p) for p in params] if self._laying_out_help else params

    def format_help(self, ctx, formatter):
        self._laying_out_help = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._laying_out_help = False
