"""The one exception type that the CLI turns into a one-line message and exit code 1."""


class UserError(Exception):
    """Bad input from the user (wrong path, impossible option, mismatched data). Never a bug."""


class Interrupted(KeyboardInterrupt):
    """A stop signal other than Ctrl-C (SIGTERM), raised in the main thread like KeyboardInterrupt so that
    the same `except KeyboardInterrupt` and `finally` blocks run; `signum` gives the exit code (128 + it)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = int(signum)
