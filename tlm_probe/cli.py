"""The `tlm` command line (the console script runs `main`): each command lives in
tlm_probe/commands/<name>.py; this file only assembles. Command modules import their heavy dependencies
(torch, pandas, matplotlib) inside the command, so `tlm --help` stays fast. It lives in the package so
that installing tlm_probe installs no top-level module; the checkout's cli.py runs it for
`python cli.py` and `torchrun ... cli.py`."""

from __future__ import annotations

import typer

from tlm_probe.commands import (
    compare,
    convert,
    data,
    demo,
    diff,
    export,
    generate,
    info,
    plot,
    probe,
    report,
    schedule,
    train,
    trust,
)
from tlm_probe.commands import eval as eval_cmd
from tlm_probe.commands.common import OneLineUsage, stop_on_sigterm

# the order of `tlm --help`
COMMANDS = (schedule, info, plot, report, train, data, probe, diff, trust, compare, demo, eval_cmd, generate,
            export, convert)

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


def _print_version(value: bool) -> None:
    if not value:
        return
    from tlm_probe import __version__
    from tlm_probe.environment import installed

    torch, transformers = (installed(p) or "not installed" for p in ("torch", "transformers"))
    typer.echo(f"tlm_probe {__version__}, torch {torch}, transformers {transformers}")
    raise typer.Exit(0)


@app.callback()
def _tlm(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the versions of tlm_probe, torch and transformers, and exit."),
) -> None:
    """Probe how language models use their depth; train tapered models against fair uniform baselines."""
    from tlm_probe.progress import quiet_third_party_bars, where

    if where() == "log":  # other libraries' tqdm bars are carriage-return spam in a log
        quiet_third_party_bars()


def main() -> None:
    from tlm_probe.allocator import keep_freed_memory
    from tlm_probe.threads import passive_omp_wait

    keep_freed_memory()  # reuse freed activation memory instead of page-faulting it in again
    passive_omp_wait()  # idle torch threads sleep instead of spinning: a busy machine's cores stay free
    stop_on_sigterm()  # SIGTERM: one line and exit 143, as Ctrl-C gives one line and 130
    app()


if __name__ == "__main__":
    main()
