"""Importing a user's plug-in module (methods, models, datasets it registers), in the CLI and in every worker."""

import importlib
import os

from .errors import UsageError


def import_plugin(name: str) -> None:
    """Import a user's plug-in module; its own errors become one line naming the module, error and location."""
    import traceback

    if name.endswith(".py") or "/" in name or "\\" in name:
        mod = name.removesuffix(".py").replace("/", ".").replace("\\", ".").strip(".")
        raise UsageError(f"--plugin {name}: give a module name, not a path (e.g. --plugin {mod}, run from the folder "
                         "that holds it or with it on PYTHONPATH)")
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name or name.startswith(f"{exc.name}."):
            raise UsageError(f"--plugin {name}: no such module ({exc}); check its name and PYTHONPATH") from None
        raise UsageError(f"--plugin {name}: it imports a missing module ({exc}); install it") from None
    except SyntaxError as exc:
        raise UsageError(f"--plugin {name}: syntax error at {exc.filename}:{exc.lineno}: {exc.msg}") from None
    except SystemExit as exc:  # the module called sys.exit() on import: not a plug-in's business
        raise UsageError(f"--plugin {name}: importing it called sys.exit({exc.code}); a plug-in module must only "
                         "register things (guard scripts with if __name__ == '__main__')") from None
    except Exception as exc:  # the user's module raised: say where, in one line
        pkg = os.path.dirname(os.path.abspath(__file__))  # point at the user's line, not ours or importlib's
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if "importlib" not in f.filename and not os.path.abspath(f.filename).startswith(pkg)]
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise UsageError(f"--plugin {name}: importing it raised {type(exc).__name__}: {exc}{where}") from None


def import_plugins_in(argv: list[str]) -> None:
    """Import every ``--plugin MODULE`` of ``argv`` (also ``--plugin=MODULE``); workers inherit the list."""
    import sys

    if "" not in sys.path and os.getcwd() not in sys.path:  # like `python -m`: modules beside you import
        sys.path.insert(0, os.getcwd())
    for i, tok in enumerate(argv):
        name = argv[i + 1] if tok == "--plugin" and i + 1 < len(argv) else (
            tok.split("=", 1)[1] if tok.startswith("--plugin=") else None)
        if name:
            import_plugin(name)
            # spawned workers (any executor) import the same plug-ins before they run a spec
            os.environ["DEPTHAUDIT_PLUGINS"] = ",".join(
                dict.fromkeys([*filter(None, os.environ.get("DEPTHAUDIT_PLUGINS", "").split(",")), name]))
