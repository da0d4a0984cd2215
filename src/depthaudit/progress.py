"""Progress bars for long work: tqdm (``tqdm.auto``: a widget in Jupyter, a text bar on a terminal), silenceable.

Bars are drawn inside :func:`bars` (every API function opens one) when progress is asked for (``progress=True``,
the API's default and the CLI's), the environment does not silence it (``DEPTHAUDIT_PROGRESS=0``; ``=1`` forces
bars even into a pipe) and the output can show a bar (stderr is a terminal, or the code runs in a Jupyter kernel).
Without a bar the same work prints its plain lines (one per epoch, one per finished run) as before.

A sweep shows one bar over its runs; a run one bar over its training steps (refreshed at most twice a second:
the training loop's cost is one counter increment per step). Spawned workers (``--jobs N``) draw none: each prints
its run's epoch line at every tenth of the budget (:func:`depthaudit.executors.heartbeat`).
"""

# imports inside functions: tqdm is imported when a bar is drawn (import cost: this module is the CLI's)
from __future__ import annotations

import functools
import os
import sys
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

_ACTIVE: ContextVar[bool] = ContextVar("depthaudit_progress", default=False)
ENV = "DEPTHAUDIT_PROGRESS"


@functools.cache  # once per value and process
def _unknown(value: str) -> None:
    print(f"depthaudit: note: {ENV}={value!r} is not 0 or 1 (nor false/true, no/yes, off/on); ignored (bars "
          "follow the output)", file=sys.stderr)


def wanted(progress: bool) -> bool:
    """Whether bars are drawn for a call asking for ``progress``: the environment, then the output decide."""
    if not progress:
        return False
    env = os.environ.get(ENV, "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    if env:  # a value it does not know: said once, then the output decides as without it
        _unknown(os.environ[ENV])
    if "ipykernel" in sys.modules:  # a notebook: tqdm.auto draws a widget
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def bars(progress: bool):
    """Within this block, work draws bars when :func:`wanted` says so (nested blocks inherit it)."""
    token = _ACTIVE.set(wanted(progress))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active() -> bool:
    """Whether bars are being drawn here."""
    return _ACTIVE.get()


def bar(total: int, desc: str, unit: str, leave: bool = True, initial: int = 0):
    """A tqdm bar on stderr when bars are active, else a context that yields None (a ``with`` target either way)."""
    if not active():
        return nullcontext(None)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=leave, initial=initial, file=sys.stderr, mininterval=0.5,
                dynamic_ncols=True)


def say(msg: str) -> None:
    """One line to stderr that does not tear a bar being drawn."""
    if active():
        from tqdm.auto import tqdm

        tqdm.write(msg, file=sys.stderr)
    else:
        print(msg, file=sys.stderr, flush=True)
