"""Importing a user's plug-in module (methods, models, datasets it registers), in the CLI and in every worker."""

import importlib
import inspect
import os
import signal
import sys
import sysconfig
import threading
import traceback
from contextlib import contextmanager

from .errors import UsageError


def import_plugin(name: str, given: str | None = None) -> None:
    """Import a user's plug-in module; its own errors become one line naming the module, error and location.

    ``given`` is how the user named it, for that line (default ``--plugin NAME``).
    """
    given = given or f"--plugin {name}"
    if name.endswith(".py") or "/" in name or "\\" in name:
        if os.path.isabs(name):  # its folder on PYTHONPATH, its file's stem the module
            folder, mod = os.path.dirname(name), os.path.basename(name).removesuffix(".py")
            example = f"--plugin {mod}" if given.startswith("--plugin") else mod
            raise UsageError(f"{given}: give a module name, not a path (e.g. PYTHONPATH={folder} depthaudit "
                             f"{example} …, or run from {folder})")
        mod = name.removesuffix(".py").replace("/", ".").replace("\\", ".").strip(".")
        example = f"--plugin {mod}" if given.startswith("--plugin") else mod
        raise UsageError(f"{given}: give a module name, not a path (e.g. {example}, run from the folder "
                         "that holds it or with it on PYTHONPATH)")
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name or name.startswith(f"{exc.name}."):
            several = (" (DEPTHAUDIT_PLUGINS separates several modules with commas)"
                       if given.startswith("DEPTHAUDIT_PLUGINS") and any(c in name for c in " \t:;") else "")
            raise UsageError(f"{given}: no such module ({exc}); check its name and PYTHONPATH{several}") from None
        raise UsageError(f"{given}: it imports a missing module ({exc}); install it") from None
    except SyntaxError as exc:
        raise UsageError(f"{given}: syntax error at {exc.filename}:{exc.lineno}: {exc.msg}") from None
    except SystemExit as exc:  # the module called sys.exit() on import: not a plug-in's business
        raise UsageError(f"{given}: importing it called sys.exit({exc.code}); a plug-in module must only "
                         "register things (guard scripts with if __name__ == '__main__')") from None
    except KeyboardInterrupt as exc:  # a Ctrl-C while it imports, or the module's own `raise KeyboardInterrupt`:
        # the command (which records the signals it receives) tells them apart with the line carried here
        exc.plugin_line = (f"{given}: importing it raised KeyboardInterrupt{_user_line(exc)}; a plug-in module must "
                           "only register things: fix the plug-in")  # (walk 14: it ended as an interrupt, 130)
        raise
    except Exception as exc:  # the user's module raised: say where, in one line
        raise UsageError(f"{given}: importing it raised {type(exc).__name__}: {exc}{_user_line(exc)}") from None


def _user_line(exc: BaseException) -> str:
    """`` at file:line`` of the innermost frame of ``exc`` in the user's code (not ours, not importlib's), or ''."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "importlib" not in f.filename and not os.path.abspath(f.filename).startswith(pkg)]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def import_plugins_in(argv: list[str]) -> None:
    """Import every ``--plugin MODULE`` of ``argv`` (also ``--plugin=MODULE``); workers inherit the list."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:  # like `python -m`: modules beside you import
        sys.path.insert(0, cwd)
    try:
        _import_all(argv)
    finally:  # a plug-in that changed the working folder: relative paths (--out) are still the user's
        if os.getcwd() != cwd:
            moved = os.getcwd()
            os.chdir(cwd)
            print(f"depthaudit: note: a plug-in changed the working folder to {moved}; changed back to {cwd} (relative "
                  "paths are read from where you ran the command)", file=sys.stderr)


def _import_all(argv: list[str]) -> None:
    """The imports of :func:`import_plugins_in`: the environment's plug-ins, then each ``--plugin``."""
    # plug-ins named in the environment (how workers inherit them; a user may set it too) are imported here as
    # well, so `--jobs 1` and `--jobs N` see the same plug-ins and a broken one is one line before any work
    env = os.environ.get("DEPTHAUDIT_PLUGINS", "")
    for name in filter(None, (n.strip() for n in env.split(","))):
        import_plugin(name, f"DEPTHAUDIT_PLUGINS={env}" + (f" (its {name})" if name != env.strip() else ""))
    for i, tok in enumerate(argv):
        name = argv[i + 1] if tok == "--plugin" and i + 1 < len(argv) else (
            tok.split("=", 1)[1] if tok.startswith("--plugin=") else None)
        if name is not None and not name.strip():
            raise UsageError("--plugin '': an empty module name; give the plug-in module (e.g. --plugin myplugin)")
        if name:
            import_plugin(name)
            # spawned workers (any executor) import the same plug-ins before they run a spec
            os.environ["DEPTHAUDIT_PLUGINS"] = ",".join(
                dict.fromkeys([*filter(None, os.environ.get("DEPTHAUDIT_PLUGINS", "").split(",")), name]))


def plugin_blame(exc: BaseException, own_code: bool = False) -> str | None:
    """One line when a user's plug-in (``--plugin``) raised, or its object was in use where the error arose.

    Names the plug-in, the error and the plug-in's file and line; None when no plug-in is involved. ``own_code``:
    only when a line of the plug-in's own code is in the traceback.
    """
    names = [n for n in os.environ.get("DEPTHAUDIT_PLUGINS", "").split(",") if n in sys.modules]
    if not names:
        return None
    files = {os.path.abspath(getattr(sys.modules[n], "__file__", "") or ""): n for n in names}
    owner = lambda mod: next((n for n in names if mod == n or mod.startswith(n + ".")), None)  # noqa: E731
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    what = type(exc).__name__ + (f": {str(exc).strip().splitlines()[0][:160]}" if str(exc).strip() else "")
    for frame, lineno in reversed(frames):  # the innermost line of the plug-in's own code
        name = files.get(os.path.abspath(frame.f_code.co_filename))
        if name:
            return (f"plug-in {name} raised {what} at {frame.f_code.co_filename}:{lineno} (in "
                    f"{frame.f_code.co_name}); fix the plug-in")
    if own_code:
        return None
    for frame, _ in reversed(frames):  # depthaudit raised while using a plug-in's object: what it returned
        obj = frame.f_locals.get("self")
        name = owner(type(obj).__module__) if obj is not None else None
        if name:
            cls = type(obj)
            try:
                where = f"{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
            except (OSError, TypeError):
                where = name
            return (f"plug-in {name}: its {cls.__name__} ({where}) gave depthaudit something it cannot use: {what}; "
                    f"check what its methods return{_example_of(cls)}")
    return None


HALF_WRITTEN = "(nothing half-written; finished runs are stored)"


def _example_of(cls: type) -> str:
    """What a plug-in class of this kind must return, as an example for :func:`plugin_blame`'s line."""
    kinds = {"CreditMethod": "one credit per layer, shaped like its state",  # (walk 14 case 93: a family's
             "DepthFamily": "build() returns the model of base + N blocks, a depthaudit ResidualModel",  # fault
             "Diagnostic": "compute() returns a dict of numbers"}  # was given a credit method's example)
    for base in cls.__mro__:
        if base.__name__ in kinds and base.__module__.startswith("depthaudit."):
            return f" (e.g. {kinds[base.__name__]})"
    return ""


_REAL_EXIT = os._exit
_OURS = (os.path.dirname(os.path.abspath(__file__)) + os.sep,
         os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep)  # depthaudit's and Python's own callers


def _exit_raises(code: int = 0) -> None:
    """``os._exit`` while depthaudit runs: a plug-in's call raises :class:`SystemExit` where it was made.

    A plug-in that ends the process with ``os._exit(n)`` (no cleanup, no line) would lose the run in flight
    without a word, and a ``--jobs`` worker's death read as "killed, or out of memory?" (walk 28 W1); raised, it
    is named as the plug-in's like ``sys.exit`` (:func:`plugin_ended`). depthaudit's and Python's own calls exit.
    """
    caller = os.path.abspath(sys._getframe(1).f_code.co_filename)
    if caller.startswith(_OURS):
        _REAL_EXIT(code)
    exc = SystemExit(code)
    exc.os_exit = True  # (the line says which exit it was)
    raise exc


def guard_os_exit() -> None:
    """Install :func:`_exit_raises` for the rest of the process (a worker's life)."""
    os._exit = _exit_raises


@contextmanager
def os_exit_guarded():
    """:func:`_exit_raises` for the duration of a command (the caller's ``os._exit`` is back afterwards)."""
    before = os._exit
    os._exit = _exit_raises
    try:
        yield
    finally:
        os._exit = before


def process_state() -> dict:
    """SIGINT's and SIGTERM's handlers now (main thread only), and torch's defaults where torch is imported."""
    torch = sys.modules.get("torch")  # (and torch's defaults, when something imported it already)
    state = {"torch": (str(torch.get_default_dtype()), torch.is_grad_enabled(), _default_device(torch))} \
        if torch is not None else {}
    if threading.current_thread() is not threading.main_thread():
        return state
    return {**state, **{s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}}


def _default_device(torch) -> str:
    get = getattr(torch, "get_default_device", None)  # (torch >= 2.3)
    return str(get()) if get is not None else "cpu"


def restore_process_state(before: dict | None, quiet: bool = False) -> None:
    """Undo what a plug-in changed at import that the command relies on, each said on stderr.

    SIGINT/SIGTERM (Ctrl-C and SIGTERM must still stop the command) and torch's process-wide defaults (float32,
    gradients on, the CPU). ``quiet``: undone unsaid — a ``--jobs`` worker, whose driver said it already (walk 29
    W8: the workers kept what the driver undid).
    """
    say = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr))  # noqa: E731
    torch = sys.modules.get("torch")  # (imported by the plug-in, if at all: not by this check)
    was = (before or {}).get("torch", ("torch.float32", True, "cpu"))  # what it was before the plug-ins came
    if torch is not None and torch.get_default_dtype() != torch.float32 and was[0] == "torch.float32":
        say(f"depthaudit: note: a plug-in set torch's default dtype to {torch.get_default_dtype()} at import; "
              "restored to float32 (depthaudit trains in float32)")
        torch.set_default_dtype(torch.float32)
    if torch is not None and not torch.is_grad_enabled() and was[1]:
        say("depthaudit: note: a plug-in turned torch's gradients off at import; turned back on (training needs "
              "them)")
        torch.set_grad_enabled(True)
    if torch is not None and _default_device(torch) != was[2]:  # (walk 29 W3: "meta" ended in torch's traceback)
        say(f"depthaudit: note: a plug-in set torch's default device to {_default_device(torch)} at import; "
              f"restored to {was[2]} (each command puts its models on its --device)")
        torch.set_default_device(None if was[2] == "cpu" else was[2])
    for sig, handler in ((k, v) for k, v in (before or {}).items() if k != "torch"):
        if signal.getsignal(sig) != handler:
            signal.signal(sig, handler)
            say(f"depthaudit: note: a plug-in changed the {sig.name} handler at import; restored (Ctrl-C and "
                  "SIGTERM still stop the command)")


def plugin_ended(exc: BaseException) -> str | None:
    """One line when a plug-in's own code raised ``SystemExit`` or ``KeyboardInterrupt``; else None.

    The exception may be the context of the sweep's :class:`~depthaudit.errors.Interrupted`: the chain is walked.
    """
    seen = exc
    while seen is not None:
        line = plugin_blame(seen, own_code=True)
        if line is not None:
            return _ended_line(line.split(" raised ")[0], seen, line.split(" at ", 1)[1].split(";")[0])
        seen = seen.__context__
    return None


def _ended_line(who: str, exc: BaseException, where: str) -> str:
    """``WHO called sys.exit(n) at WHERE; …`` (or os._exit, or raised KeyboardInterrupt): the one line for either."""
    what = (f"called {'os._exit' if getattr(exc, 'os_exit', False) else 'sys.exit'}({exc.code})"
            if isinstance(exc, SystemExit) else "raised KeyboardInterrupt")
    return (f"{who} {what} at {where}; a plug-in must not end or interrupt the command: raise an exception instead; "
            "fix the plug-in")


def _outside(exc: BaseException) -> tuple[str, str] | None:
    """``(who, "file:line (in function)")`` of the innermost traceback line not depthaudit's, Python's or torch's."""
    torch_dir = os.path.dirname(os.path.abspath(getattr(sys.modules.get("torch"), "__file__", None) or "/-/-"))
    tb, last = exc.__traceback__, None
    while tb is not None:
        f = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not f.startswith((*_OURS, torch_dir + os.sep)):
            last = tb
        tb = tb.tb_next
    if last is None:
        return None
    code = last.tb_frame.f_code
    mod = last.tb_frame.f_globals.get("__name__", "?")
    who = "your script (__main__)" if mod == "__main__" else f"plug-in {mod}"
    return who, f"{code.co_filename}:{last.tb_lineno} (in {code.co_name})"


def code_ended(exc: BaseException) -> str | None:
    """:func:`plugin_ended`, or the same line for any code outside depthaudit that ended or interrupted a call.

    For a Python API call and its workers, where a plug-in is any module that registered something (no
    ``--plugin`` names it) and depthaudit itself calls no ``sys.exit``: a bare ``SystemExit`` would end the
    caller's script with the plug-in's code and no word (walk 41 W1: ``sys.exit(0)`` ended a job as a success).
    """
    line = plugin_ended(exc)
    if line is not None or not isinstance(exc, SystemExit | KeyboardInterrupt):
        return line
    found = _outside(exc)
    return None if found is None else _ended_line(*found[:1], exc, found[1])


def plugin_error(exc: BaseException) -> UsageError | None:
    """The one-line :class:`UsageError` for an error a plug-in caused (:func:`plugin_blame`), else None.

    A worker process (``--jobs N``, a Ray or SLURM task) calls it where the error arose, while the traceback
    still holds the plug-in's frames: what reaches the driver is this line, not a traceback-less copy.
    """
    if isinstance(exc, SystemExit | KeyboardInterrupt):  # (a worker: no Ctrl-C reaches it, so code raised it)
        line = code_ended(exc)
    else:  # as the command's own process ranks them (cli): the plug-in's own code first; a machine's error (disk,
        line = plugin_blame(exc, own_code=True) or (  # memory) raised by depthaudit goes back as it is (walk 28 W5)
            None if isinstance(exc, OSError | MemoryError) else plugin_blame(exc))
    return UsageError(f"{line} {HALF_WRITTEN}") if line is not None else None


def defined_at(obj) -> str:
    """``file:line`` where a function or class (a plug-in's factory, loader, method) is defined, else its name."""
    try:
        return f"{inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]}"
    except (OSError, TypeError):
        return getattr(obj, "__qualname__", repr(obj))


def back_to(cwd: str, who: str) -> None:
    """Undo a plug-in's change of the working folder (relative --out/--data-dir paths stay the user's), saying so."""
    if os.getcwd() != cwd:
        os.chdir(cwd)
        print(f"depthaudit: note: {who} changed the working folder; it is set back to {cwd} (relative paths are "
              "the command line's)", file=sys.stderr)
