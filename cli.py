"""The `tlm` command line: each command lives in tlm_probe/commands/<name>.py; this file only assembles."""

from __future__ import annotations

import importlib

import typer

COMMANDS = (
    "schedule", "info", "plot", "report", "train", "data", "probe", "compare", "demo", "eval", "generate",
)

app = typer.Typer(
    name="tlm",
    help="Probe how language models use their depth; train tapered models against fair uniform baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for _name in COMMANDS:
    importlib.import_module(f"tlm_probe.commands.{_name}").register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
