"""Command-line interface: ``depthaudit <command> …``: plug-ins, parse, dispatch, and one error path.

Each command module declares its own parser (:func:`depthaudit.commands.build_parser`); here a user-caused
error becomes one line and exit 2: bad input, and faults of the machine (a full disk, an unwritable place,
memory exhausted by an absurd size); an interrupt (SIGINT, SIGTERM) one line and exit 130; an unexpected
exception keeps its traceback. A terminal that cannot print the report's symbols gets ASCII for them.
"""

import codecs
import errno
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from .commands import build_parser
from .errors import UsageError, cli_message
from .io import LISTING_ONLY, environment_error, reader_gone, remove_in_flight, silence_stdout, stdout_error
from .plugins import HALF_WRITTEN, import_plugins_in, plugin_blame, plugin_ended, process_state, restore_process_state

# what a report prints that an ASCII (or Latin-1, …) terminal cannot: the closest plain spelling
ASCII_FALLBACK = {"±": "+/-", "×": "x", "→": "->", "←": "<-", "—": "-", "–": "-", "≤": "<=", "≥": ">=", "≈": "~",
                  "…": "...", "Γ": "Gamma", "ε": "eps", "ρ": "rho", "λ": "lambda", "α": "alpha", "σ": "sigma",
                  "Δ": "Delta", "θ": "theta", "μ": "mu", "√": "sqrt", "∞": "inf", "·": "*", "✓": "ok", "✗": "x",
                  "‖": "||", "′": "'", "“": '"', "”": '"', "‘": "'", "’": "'", "≠": "!=", "∈": "in", "⁻": "^-",
                  "¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6", "⁷": "7", "⁸": "8", "⁹": "9", "⁰": "0",
                  "₀": "0", "₁": "1", "₂": "2", "₃": "3", "ℓ": "l", "█": "#", "░": ".", "▏": "|"}


def _ascii_fallback(exc: UnicodeEncodeError):
    bad = exc.object[exc.start:exc.end]
    return "".join(ASCII_FALLBACK.get(ch, "?") for ch in bad), exc.end


codecs.register_error("depthaudit-ascii", _ascii_fallback)


def plain_terminal() -> None:
    """Give stdout/stderr ASCII spellings of the symbols their encoding cannot print (never a crash)."""
    for stream in (sys.stdout, sys.stderr):
        enc = getattr(stream, "encoding", None) or "ascii"
        try:
            "±×→—≤Γρ".encode(enc)
        except (UnicodeEncodeError, LookupError):
            try:
                stream.reconfigure(errors="depthaudit-ascii")
            except (AttributeError, ValueError, OSError):
                pass


SIGNALLED: list[int] = []  # the signals (SIGINT, SIGTERM) this process received: an interrupt without one was raised


def _term_to_interrupt(signum, frame):
    SIGNALLED.append(signum)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the stop is under way: a second Ctrl-C or SIGTERM
        signal.signal(s, signal.SIG_IGN)  # (a scheduler's repeated TERM) must not cut its cleanup short (restored
        # after the command)
    raise KeyboardInterrupt


def _out_of_memory(exc: BaseException) -> str | None:
    """One line for memory exhausted by the size asked for (CPU or GPU); None for any other error."""
    text = str(exc)
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
            "can't allocate memory" in text or "out of memory" in text.lower()
            or "not enough memory" in text.lower())):
        asked = re.search(r"tried to allocate (\d+) bytes", text)
        first = f"tried to allocate {int(asked[1]) / 2**30:,.1f} GiB" if asked else \
            (text.strip().splitlines()[0][:120] if text.strip() else type(exc).__name__)
        return (f"out of memory ({first}); ask for less: a smaller --d-hidden, --num-blocks, --batch-size or "
                "--probe-batch-size, fewer --jobs/--batch-runs, or a machine with more memory")
    return None


def _size_overflow(exc: BaseException) -> str | None:
    """One line for a tensor size computed from the values given that does not fit 64 bits; None otherwise."""
    text = str(exc)
    if isinstance(exc, RuntimeError | TypeError | OverflowError | ValueError) and any(w in text for w in (
            "Overflow when unpacking long", "too large to convert", "int too big to convert",
            "Python int too large")):
        return ("a tensor size computed from the values given does not fit in 64 bits "
                f"({text.strip().splitlines()[0][:100]}); give smaller sizes or option values")
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input prints one line and returns 2, an interrupt one line and 130.

    As the program (``argv`` None), it ends when its work is done: a thread a plug-in left running (not a daemon,
    which the interpreter would wait for, deaf to Ctrl-C) is named and not waited for.
    """
    rc = _entry(argv)
    if argv is None:
        def foreign(t: threading.Thread) -> bool:  # a non-daemon thread that is not the standard library's own
            own = type(t).__module__.startswith(("concurrent.futures", "multiprocessing"))  # (a pool's manager:
            return t is not threading.main_thread() and not t.daemon and t.is_alive() and not own  # joined at exit)

        deadline = time.monotonic() + 2.0  # (one that is just ending: given a moment)
        for t in filter(foreign, threading.enumerate()):
            t.join(max(0.0, deadline - time.monotonic()))
        lingering = [t.name for t in threading.enumerate() if foreign(t)]
        if lingering:
            print(f"depthaudit: note: {len(lingering)} thread(s) still running once the work was done "
                  f"({', '.join(lingering[:3])}; a plug-in's?); depthaudit ends without waiting for them (a plug-in's "
                  "own threads should be daemon threads)", file=sys.stderr)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(rc)
    return rc


def _matplotlib_dirs() -> None:
    """A private MPLCONFIGDIR where matplotlib's own folders under HOME cannot even be resolved (a loop of links).

    Matplotlib falls back to a temporary folder for an unwritable HOME, but a HOME under a loop of symbolic links
    raised from its import (pathlib's "Symlink loop"): every command that draws or generates MNIST-1D ended in
    that traceback. The figures do not depend on it; the folder goes when the command ends.
    """
    if "MPLCONFIGDIR" in os.environ or "matplotlib" in sys.modules:
        return
    home = os.path.expanduser("~")
    for base in (os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"),
                 os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")):
        try:
            Path(base, "matplotlib").resolve()
        except (RuntimeError, OSError):
            import atexit
            import shutil
            import tempfile

            tmp = tempfile.mkdtemp(prefix="depthaudit-matplotlib-")
            atexit.register(shutil.rmtree, tmp, True)
            os.environ["MPLCONFIGDIR"] = tmp  # (workers inherit it)
            return


def _entry(argv: list[str] | None) -> int:
    """:func:`main`'s work: the command, its errors as one line each, its signals."""
    argv_given, argv = argv, list(sys.argv[1:] if argv is None else argv)

    for name in ("stderr", "stdout"):  # started with that descriptor closed (`>&-`): results still go to files
        if getattr(sys, name) is None:  # and a closed stdout's lines (the final "ok: … →" one) go to stderr
            setattr(sys, name, sys.stderr if name == "stdout" and sys.stderr is not None
                    else open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 (lives as long as we do)
    # an unwritable HOME (HOME=/proc) makes matplotlib warn twice on import before using a temporary folder, which
    # works: the command's own line about what it could not write is the one that matters
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    _matplotlib_dirs()
    if "matplotlib" not in sys.modules:  # the commands draw into files only: the file backend, whatever MPLBACKEND
        os.environ["MPLBACKEND"] = "Agg"  # says (a value matplotlib does not know would stop its import); workers
    plain_terminal()  # inherit it
    real_err = sys.stderr
    if sys.stderr is sys.__stderr__:  # a process's own stderr (not a test's capture): progress and notes that
        sys.stderr = _Tolerant(sys.stderr)  # cannot be written (`2>/dev/full`) are lost quietly, as with `2>&-`
    old_term = old_int = old_hup = None
    SIGNALLED.clear()
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, _term_to_interrupt)  # SIGTERM stops like Ctrl-C: cleanly
        old_hup = signal.signal(signal.SIGHUP, _term_to_interrupt)  # so does a terminal's hang-up (walk 13 case 69)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (one ignored by the shell stays so)
            old_int = signal.signal(signal.SIGINT, _term_to_interrupt)  # Ctrl-C as before, but remembered
    try:
        rc = _main(argv)
        sys.stdout.flush()  # a pipe closed early breaks here, not in Python's exit flush
        return rc
    except BrokenPipeError:
        return reader_gone()
    except OSError as exc:  # only the final flush of the standard output (stdout on a full disk, /dev/full)
        print(f"depthaudit: error: cannot write the standard output ({exc.strerror or exc})", file=sys.stderr)
        _silence_stdout()
        return 2
    except ValueError:  # the final flush of a standard output closed during the command (its line already said)
        if not getattr(sys.stdout, "closed", False):
            raise
        _silence_stdout()
        return 2
    finally:
        sys.stderr = real_err
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
            signal.signal(signal.SIGHUP, old_hup)
        if old_int is not None:
            signal.signal(signal.SIGINT, old_int)
        if argv_given is None:  # the process ends here: a second Ctrl-C or SIGTERM while workers are joined stays
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # quiet (exit 130, never 143)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


_silence_stdout = silence_stdout  # (its home is io.py, which commands/parser.py reads without importing the CLI)


class _Tolerant:
    """The standard error, written through; once a write fails (a full device), fd 2 becomes /dev/null, quietly."""

    def __init__(self, stream):
        self._stream, self._dead = stream, False

    def _drop(self) -> None:
        self._dead = True
        try:  # what is still buffered drains into /dev/null: Python's exit flush cannot fail (exit 120) on it
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if not self._dead:
            try:
                n = self._stream.write(text)
                self._stream.flush()
                return n
            except (OSError, ValueError):
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self._dead:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._drop()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _main(argv: list[str]) -> int:
    try:
        try:
            os.getcwd()
        except FileNotFoundError:
            raise UsageError("the current folder no longer exists (removed while this shell stood in it); cd to an "
                             "existing folder and rerun") from None
        before = process_state()
        import_plugins_in(argv)
        restore_process_state(before)
        try:
            args = build_parser(argv).parse_args(argv)
        except SystemExit as exc:  # the parser's refusal (one line, 2) or --help/--version (0): a return code
            return exc.code if isinstance(exc.code, int) else 2
        out = next((v for v in (getattr(args, d, None) for d in ("out", "output_dir")) if v is not None), None)
        if isinstance(out, str) and out and (out != out.strip() or any(c in out for c in "\n\r\t")) \
                and not os.path.exists(out):  # (walk 20 cases 55, 196: "c2 " trained beside c2, unsaid; said once)
            print(f"depthaudit: note: --out {out!r} begins or ends with a blank or holds a line break (a "
                  "copy-paste?); it is a new folder of that exact name", file=sys.stderr)
        elif isinstance(out, str) and out.startswith("~") and not os.path.exists(out):  # (walk 23 case 138)
            print(f"depthaudit: note: --out {out!r} begins with '~', which no shell expanded (it was quoted): it is "
                  f"a new folder named {out.split('/')[0]!r} here; for the home folder write $HOME or its path",
                  file=sys.stderr)
        elif out == "-" and not os.path.exists(out):  # (walk 23 case 141; identity writes one file: walk 29 W6)
            what = "a file" if getattr(args, "command", None) == "identity" else "a folder"
            print(f"depthaudit: note: --out - is {what} named '-' here, not standard output (results are files)",
                  file=sys.stderr)
        token = LISTING_ONLY.set(bool(getattr(args, "list_cells", False)))
        try:
            return args.func(args, argv)
        finally:
            LISTING_ONLY.reset(token)
    except UsageError as exc:
        msg = cli_message(exc)
        if re.search(r"unknown (method|arch|dataset|depth family) '[^']*'; choose one of", msg) \
                and not any(a.startswith("--plugin") for a in argv):  # (walk 20 case 215: no hint)
            msg += " (a plug-in's? name its module with --plugin MODULE)"
        print(f"depthaudit: error: {msg}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # not the parser's (returned above): code that called sys.exit() mid-command
        line = plugin_ended(exc)
        if line is None:
            raise
        remove_in_flight()
        print(f"depthaudit: error: {line} {HALF_WRITTEN}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        remove_in_flight()
        line = None if SIGNALLED else getattr(exc, "plugin_line", None)  # no Ctrl-C, no SIGTERM: a plug-in
        if line is not None:  # raised it as it was imported (nothing ran yet)
            print(f"depthaudit: error: {line}", file=sys.stderr)
            return 2
        line = None if SIGNALLED else plugin_ended(exc)  # … or in its own code, mid-command
        if line is not None:
            print(f"depthaudit: error: {line} {HALF_WRITTEN}", file=sys.stderr)
            return 2
        print(f"depthaudit: {str(exc) or 'interrupted; finished runs are stored, nothing half-written was left'}",
              file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # the reader went away (`| head`): main ends quietly
    except Exception as exc:
        line = plugin_blame(exc, own_code=True) or stdout_error(exc) or environment_error(exc) \
            or _out_of_memory(exc) or _size_overflow(exc) or plugin_blame(exc) or path_error(exc)  # (a plug-in's
        # own line raised it: the plug-in's, whatever it is, as a --jobs worker names it: walk 28 W5)
        if line is not None and isinstance(exc, OSError) and exc.filename is not None:
            from .data.base import cache_dir  # here: the error path loads no torch unless it names the cache

            cache, where = str(cache_dir()), str(exc.filename)
            if where.startswith(cache) or cache.startswith(where.rstrip("/") + "/"):
                line += " (it is the data cache: set DEPTHAUDIT_CACHE_DIR to a writable folder)"
        command = next((a for a in argv if not a.startswith("-")), "")
        if command == "report" and getattr(exc, "errno", None) == errno.EROFS:  # it rewrites what it renders
            line = (f"{exc.filename}: read-only file system; report rewrites the folder's tables and figures: copy "
                    "the folder somewhere writable and report it there")
        if line is not None:  # (a command that trains nothing has no runs to speak of)
            trains = command not in ("identity", "report")
            print(f"depthaudit: error: {line} {HALF_WRITTEN if trains else '(nothing half-written)'}",
                  file=sys.stderr)
            return 2
        print("depthaudit: internal error (a bug, not your input): please report it with the traceback below",
              file=sys.stderr)
        traceback.print_exc()  # here, not by a re-raise: what follows can never be mistaken for another error
        return 1


def path_error(exc: BaseException) -> str | None:
    """One line for any other ``OSError`` about a named path (a missing folder, a path under /proc, …); else None."""
    if not isinstance(exc, OSError) or exc.filename is None:
        return None

    why = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    return f"{exc.filename}: {why}; check that path, or choose another location"


if __name__ == "__main__":
    sys.exit(main())
