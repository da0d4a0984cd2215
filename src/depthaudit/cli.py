"""Command-line interface: ``depthaudit <command> …``. Each command module declares its own parser."""

import argparse
import importlib
import os
import sys

from . import __version__
from .commands import COMMANDS
from .commands.args import Parser
from .errors import SweepDone, UsageError
from .plugins import import_plugin

COMMAND_MODULES = tuple(dict.fromkeys(m for m, _ in COMMANDS.values()))  # commands.<m>.register(sub)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser (plug-ins must be imported first so their names are choices).

    Only the module of the command named in ``argv`` is imported (it brings torch and the registries);
    with no command (``depthaudit --help``) each command is listed from :data:`COMMANDS` alone, fast.
    ``argv=None`` builds every command's full parser.
    """
    p = Parser(prog="depthaudit", description="Audit whether a credit-assignment method trains depth.")
    p.add_argument("--version", action="version", version=f"depthaudit {__version__}")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it may register methods, models, datasets)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    named = _command_in(argv) if argv is not None else None
    if argv is not None and named is None:
        for name, (_, help_text) in COMMANDS.items():
            sub.add_parser(name, help=help_text)
        return p
    for module in COMMAND_MODULES if named is None else (COMMANDS[named][0],):
        importlib.import_module(f"depthaudit.commands.{module}").register(sub)
    return p


def _command_in(argv: list[str]) -> str | None:
    """The command ``argv`` names (skipping ``--plugin M``), if it is one of :data:`COMMANDS`."""
    skip = False
    for tok in argv:
        if skip:
            skip = False
        elif tok == "--plugin":
            skip = True
        elif not tok.startswith("-"):
            return tok if tok in COMMANDS else None
    return None


def _import_plugins(argv: list[str]) -> None:
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


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input prints one line and returns 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        _import_plugins(argv)
        try:
            args = build_parser(argv).parse_args(argv)
        except SystemExit as exc:  # the parser's refusal (one line, 2) or --help/--version (0): a return code
            return exc.code if isinstance(exc.code, int) else 2
        return args.func(args, argv)
    except SweepDone as done:  # --list-cells / --cell: the sweep did what was asked
        print(done)
        return 0
    except UsageError as exc:
        print(f"depthaudit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("depthaudit: interrupted; nothing half-written was left", file=sys.stderr)
        return 130
    except Exception:
        print("depthaudit: internal error (a bug, not your input): please report it with the traceback below",
              file=sys.stderr)
        raise


if __name__ == "__main__":
    sys.exit(main())
