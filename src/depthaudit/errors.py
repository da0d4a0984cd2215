"""The one exception type that the CLI turns into a single line and exit code 2."""


class UsageError(Exception):
    """Bad input from the user: the message names the problem and the fix."""
