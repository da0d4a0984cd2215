"""The exceptions the CLI turns into one line: bad input (exit 2), an interrupt (exit 130)."""


class UsageError(Exception):
    """Bad input from the user, or a fault of their machine: the message names the problem and the fix."""


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped the work: every worker is gone, finished runs are stored; the message says so."""
