"""The one exception type that the CLI turns into a one-line message and exit code 1."""


class UserError(Exception):
    """Bad input from the user (wrong path, impossible option, mismatched data). Never a bug."""
