"""Shared CLI plumbing: user errors become one line on stderr and exit code 1; usage errors one line and
exit code 2; Ctrl-C and SIGTERM one line and exit code 130 / 143 (128 + the signal); JSON output."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import signal
import sys

import typer
from rich.console import Console
from typer.core import TyperGroup

from tlm_probe.commands.help_layout import PlainFlags, plain_flags
from tlm_probe.errors import Interrupted, UserError
from tlm_probe.progress import say  # one line on stderr, as is (a path may hold brackets)

console = Console(soft_wrap=True)  # a line of text is never broken mid-sentence in a log; tables still fit
err_console = Console(stderr=True, soft_wrap=True)


def interrupt_code(e: KeyboardInterrupt) -> int:
    """The shell's exit status of a process a signal stopped: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""
    return 128 + getattr(e, "signum", signal.SIGINT)


def interrupt_name(e: KeyboardInterrupt) -> str:
    return signal.Signals(getattr(e, "signum", signal.SIGINT)).name


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def stop_on_sigterm() -> None:
    """SIGTERM (`kill`, a scheduler's stop) unwinds like Ctrl-C: every `finally` runs (locks released,
    temporary files removed) and the command says so in one line, where Python's default would kill
    the process on the spot with no word (exit -15). Training installs its own handler while it runs
    (train/loop.py: checkpoint, then stop). A forked child (lm-eval's bootstrap Pool) gets the default
    back: Pool.terminate() stops its workers with SIGTERM, and one that unwound instead could hang it."""
    global _FORK_HOOK
    signal.signal(signal.SIGTERM, _raise_interrupted)
    if not _FORK_HOOK:
        os.register_at_fork(after_in_child=_default_sigterm_in_child)
        _FORK_HOOK = True


_FORK_HOOK = False


def _default_sigterm_in_child() -> None:
    if signal.getsignal(signal.SIGTERM) is _raise_interrupted:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def command(app: typer.Typer, name: str, example: str, help: str | None = None):
    """Register `fn` as `tlm NAME`, with an example in --help and UserError -> exit 1 (`help`: the
    command's description, where it is not fn's docstring)."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except UserError as e:
                say(f"error: {e}")
                raise typer.Exit(1) from None
            except OSError as e:  # a path the user gave cannot be read or written (disk full, /proc, ...)
                where = f": {e.filename}" if e.filename else ""
                say(f"error: {e.strerror or e}{where}")
                raise typer.Exit(1) from None
            except KeyboardInterrupt as e:  # a command with more to say (what was saved) catches it first
                say(f"interrupted by {interrupt_name(e)}; tlm {name} stopped")
                raise typer.Exit(interrupt_code(e)) from None

        app.command(name, epilog=f"Example: {example}", help=flowed(help or fn.__doc__),
                    short_help=summary(help or fn.__doc__), cls=PlainFlags)(wrapper)
        return fn

    return deco


def flowed(text: str | None) -> str:
    """A command's description with the line breaks of the source joined within each paragraph: typer's
    rich mode keeps them, and a terminal narrower than the source's lines showed ragged text."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text or "").split("\n\n"))


def summary(text: str | None) -> str:
    """A command's line in its group's list: the first paragraph of its description, flowed."""
    return flowed(text).split("\n\n")[0]


class OneLineUsage(TyperGroup):
    """The `tlm` group: a usage error (`--layers abc`, an unknown option or command, a missing argument) is
    one line `error: ...` and exit code 2, not typer's multi-line box. `tlm` alone still prints the help.
    Its flags (--version, --help) show no value type, as a command's do."""

    def get_params(self, ctx):
        return plain_flags(super().get_params(ctx))

    def make_context(self, *args, **kwargs):  # the group's own options: `tlm --bogus`
        with _one_line_usage():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):  # the command's name and options, parsed here
        with _one_line_usage():
            return super().invoke(ctx)


def _is_usage_error(e: BaseException) -> bool:
    """A usage error of the parser typer runs (its UsageError and subclasses), told by class name: typer
    exports no public name for it, and its private module is no API to import."""
    names = {c.__name__ for c in type(e).__mro__}
    return "UsageError" in names and "NoArgsIsHelpError" not in names


@contextlib.contextmanager
def _one_line_usage():
    try:
        yield
    except Exception as e:
        if not _is_usage_error(e):
            raise
        where = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
        say(f"error: {' '.join(e.format_message().split())}{where}")
        raise typer.Exit(e.exit_code) from None


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def device_option(device: str) -> str:
    """The --device of every command: 'auto' resolved here (the loaders take a real device), any other
    name checked; a device this machine lacks is one error line."""
    from tlm_probe.models.device import resolve_device_name

    return resolve_device_name(device)


def renamed(value, old_value, default, new: str, old: str):
    """An option under its new name, or its old name kept as a hidden alias; both, differing: an error."""
    if old_value is None:
        return value
    if value != default and value != old_value:
        raise UserError(f"{old} is the old name of {new}: give one of them")
    return old_value
