"""Command-line interface: ``depthaudit <command> …``: plug-ins, parse, dispatch, and one error path.

Each command module declares its own parser (:func:`depthaudit.commands.build_parser`); here a user-caused
error becomes one line and exit 2, and an unexpected exception keeps its traceback.
"""

import sys

from .commands import build_parser
from .errors import SweepDone, UsageError
from .plugins import import_plugins_in


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input prints one line and returns 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        import_plugins_in(argv)
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
