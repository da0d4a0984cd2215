"""One module per group of CLI commands; each ``cmd_*(args, argv) -> exit code``.

:data:`COMMANDS` names every command, the module that registers it and its one-line help, so the top-level
``depthaudit --help`` lists them without importing torch; a command's own parser is built only when used.
"""

import argparse
import importlib

from .. import __version__
from ..plugins import import_plugins_in
from .parser import Parser, command_named

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("run", "train one model under one credit method"),
    "audit": ("audit", "the audit protocol: standard pair vs D1/D2/D3 and per-layer cosine"),
    "intervene": ("audit", "scale-penalty intervention: the audit over a λ grid"),
    "probes": ("audit", "toward-BP experiments (ours): credit-mix α sweep and BP warm start for one method"),
    "identity": ("audit", "frozen-init identity check over seeds"),
    "ladder": ("ladder", "depth-utility ladder: train the last k blocks, k = 0..L"),
    "report": ("ladder", "rebuild tables and figures from saved JSON (no training)"),
    "saturation": ("depth", "depth sweep: AG, AGmax and growth value V vs depth"),
    "grow": ("depth", "function-preserving growth vs the same architecture from scratch"),
}

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
    named = command_named(argv, COMMANDS) if argv is not None else None
    if argv is not None and named is None:
        for name, (_, help_text) in COMMANDS.items():
            sub.add_parser(name, help=help_text)
        return p
    for module in COMMAND_MODULES if named is None else (COMMANDS[named][0],):
        importlib.import_module(f"depthaudit.commands.{module}").register(sub)
    return p


def run_command(argv: list[str]) -> int:
    """Parse ``argv`` (a command line without the program name) and run its command (no error handling here)."""
    import_plugins_in(argv)
    args = build_parser(argv).parse_args(argv)
    return args.func(args, argv)
