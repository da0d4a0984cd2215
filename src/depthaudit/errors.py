"""The one exception type that the CLI turns into a single line and exit code 2."""


class UsageError(Exception):
    """Bad input from the user: the message names the problem and the fix."""


class SweepDone(Exception):
    """The sweep did what was asked and the command ends here (``--list-cells``, ``--cell``): exit 0."""
