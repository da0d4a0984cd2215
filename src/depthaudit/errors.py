"""The exceptions the CLI turns into one line: bad input (exit 2), an interrupt (exit 130), a finished cell (0)."""


class UsageError(Exception):
    """Bad input from the user, or a fault of their machine: the message names the problem and the fix."""


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped the work: every worker is gone, finished runs are stored; the message says so."""


class SweepDone(Exception):
    """The sweep did what was asked and the command ends here (``--list-cells``, ``--cell``): exit 0."""
