"""The `tlm` command line: each command lives in tlm_probe/commands/<name>.py; this file only assembles.
Command modules import their heavy dependencies (torch, pandas, matplotlib) inside the command, so
`tlm --help` stays fast."""

from __future__ import annotations

import typer

from tlm_probe.commands import (
    compare,
    data,
    demo,
    generate,
    info,
    plot,
    probe,
    report,
    schedule,
    train,
)
from tlm_probe.commands import eval as eval_cmd
from tlm_probe.commands.common import OneLineUsage, stop_on_sigterm

# the order of `tlm --help`
COMMANDS = (schedule, info, plot, report, train, data, probe, compare, demo, eval_cmd, generate)

app = typer.Typer(
    name="tlm",
    help="Probe how language models use their depth; train tapered models against fair uniform baselines.",
    no_args_is_help=True,
    add_completion=False,
    cls=OneLineUsage,  # usage errors in one line (exit 2), like every other error
    pretty_exceptions_enable=False,
)
for _command in COMMANDS:
    _command.register(app)


def main() -> None:
    from tlm_probe.allocator import keep_freed_memory

    keep_freed_memory()  # reuse freed activation memory instead of page-faulting it in again
    stop_on_sigterm()  # SIGTERM: one line and exit 143, as Ctrl-C gives one line and 130
    app()


if __name__ == "__main__":
    main()
