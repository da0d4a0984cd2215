"""A flag framework generated from config dataclasses (Hugging Face's ``HfArgumentParser`` way).

Each config field declares its default, help, range or choices, group and advanced-ness once
(:func:`depthaudit.fields.arg`); :func:`add_fields` turns it into a flag whose parser default is ``None`` ("not
given"), and :func:`given` reads back what the user gave, so the dataclass fills in every default itself. A
command may override a default (``ladder``: CIFAR-10); the help shows what applies. :class:`Parser` reports a
bad flag in one line, lists one spelling per flag (``--d-hidden``; ``--d_hidden`` is accepted too) and keeps
advanced flags for ``--help-all``.
"""

# imports inside functions: methods (torch) is imported inside a function: `depthaudit --help` loads no torch
import argparse
import copy
import sys
import typing
from dataclasses import MISSING, fields

from ..errors import UsageError
from ..fields import flag_name, out_of_range, text_of
from ..io import silence_stdout


def number(kind, meta: dict | None = None):
    """An argparse ``type``: parse ``kind``, refusing non-finite values and values outside the field's range."""

    def conv(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        bad = out_of_range(v, meta or {})
        if bad:
            raise argparse.ArgumentTypeError(f"{text!r} {bad}" if bad.startswith("is") else f"{text} {bad}")
        return v

    conv.__name__ = kind.__name__
    return conv


# the types of the few flags no config field declares (the shallow baseline's, intervene's and the probes' grids)
POS_INT, NONNEG_INT, NONNEG_FLOAT = number(int, {"lo": 1}), number(int, {"lo": 0}), number(float, {"lo": 0})


class _HelpAll(argparse.Action):
    """``--help-all``: the full help, every flag."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser._show_all = True
        parser.print_help()
        parser.exit()


class _Formatter(argparse.HelpFormatter):
    """Compact help: one spelling per flag; the default shown is the command's, else the field's."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=30, width=100)

    def _format_action_invocation(self, action):
        shown = [s for s in action.option_strings if not (s.startswith("--") and "_" in s
                                                             and s.replace("_", "-") in action.option_strings)]
        if shown and shown != action.option_strings:
            action = copy.copy(action)
            action.option_strings = shown
        return super()._format_action_invocation(action)

    def _expand_help(self, action):
        text = super()._expand_help(action)
        d = action.default if action.default is not None else getattr(action, "field_default", None)
        if d is None or d is False or d == () or action.default is argparse.SUPPRESS or "default:" in text:
            return text
        d = " ".join(map(fmt, d)) if isinstance(d, list | tuple) else fmt(d)
        return f"{text} (default: {d})"


def _repeated_note(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Name each flag given more than once: argparse keeps only the last (`--seeds 1 --seeds 2` trains seed 2)."""
    dests, seen = {}, {}
    for a in parser._actions:
        for o in a.option_strings:
            dests[o] = a
    for tok in argv:
        if tok == "--":
            break
        a = dests.get(tok.partition("=")[0]) if tok.startswith("--") else None
        if a is not None and not isinstance(a, (argparse._AppendAction, argparse._HelpAction)):
            seen.setdefault(a.dest, []).append(tok.partition("=")[0])
    for flags in seen.values():
        if len(flags) > 1:
            print(f"depthaudit: note: {flags[-1]} is given {len(flags)} times; only the last one counts",
                  file=sys.stderr)


def _close_flag(parser: argparse.ArgumentParser, message: str) -> str | None:
    """The hint for the first unknown ``--flag`` in ``message``; None when no flag is near.

    The command's own flag nearest it (``--seed`` → ``--seeds``), or where a global flag goes.
    """
    import difflib

    unknown = next((t.partition("=")[0] for t in message.split()[2:] if t.startswith("--")), None)
    if unknown is None:
        return None
    top = [o for a in parser._actions for o in a.option_strings]
    opts, cmd = list(top), None
    for a in parser._actions:  # the top-level parser reports its command's unknown flags: look in that command's
        if isinstance(a, argparse._SubParsersAction):  # (walk 15 cases 40-42: another command's flag was offered)
            cmd = command_named(getattr(parser, "_given", []), a.choices)  # (the CLI's dispatch reads it so too)
            if cmd is not None:
                opts += [o for b in a.choices[cmd]._actions for o in b.option_strings
                         if b.help is not argparse.SUPPRESS]  # (a flag a command takes only to say it is idle:
                # never offered for a typo — walk 18 case 127: identity's --method hinted at its silent --methods)
    if cmd is not None and unknown in top and unknown not in ("-h", "--help"):  # a global flag after the command
        action = next(a for a in parser._actions if unknown in a.option_strings)
        if action.nargs == 0:  # --version
            return f"{unknown} is depthaudit's own flag: depthaudit {unknown}"
        words = message.split()[2:]
        at = next(i for i, t in enumerate(words) if t.partition("=")[0] == unknown)
        value = words[at].partition("=")[2] or (words[at + 1] if at + 1 < len(words) else "…")
        return f"{unknown} goes before the command: depthaudit {unknown} {value} {cmd} …"
    found = difflib.get_close_matches(unknown, [o for o in opts if o.startswith("--") and "_" not in o
                                                and o != unknown], n=1, cutoff=0.8)  # (a near spelling only:
    return f"did you mean {found[0]}?" if found else None  # --force is not "--cell")


def command_named(argv: list[str], commands) -> str | None:
    """The command ``argv`` names (its first word, skipping ``--plugin M``), if it is one of ``commands``."""
    skip = False
    for tok in argv:
        if skip:
            skip = False
        elif tok == "--plugin":
            skip = True
        elif not tok.startswith("-"):
            return tok if tok in commands else None
    return None


def fmt(v) -> str:
    """A default as one types it: ``0.001``, ``1e-8``, ``42``."""
    return f"{v:g}".replace("e-0", "e-") if isinstance(v, float) else str(v)


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (exit 2), not a usage dump; compact help; ``--help-all``."""

    def __init__(self, *args, **kw):
        kw.setdefault("formatter_class", _Formatter)
        kw.setdefault("allow_abbrev", False)  # `--seed 2` must not silently mean `--seeds 2` (an audit has no --seed)
        sub = kw.get("prog", "").count(" ")
        if sub:  # subcommands: the groups below say it all
            kw.setdefault("usage", "%(prog)s [options]")
        super().__init__(*args, **kw)
        self._show_all, self._groups = not sub, {}
        if sub:
            super().add_argument("--help-all", action=_HelpAll, nargs=0, help="show every flag, advanced ones too")

    def _print_message(self, message, file=None):
        """As argparse, but a failed write of ``--help``/``--version`` to stdout is said, not dropped (exit 2)."""
        if not message or (file or sys.stderr) is not sys.stdout:
            return super()._print_message(message, file)
        try:
            sys.stdout.write(message)
            sys.stdout.flush()
        except BrokenPipeError:
            raise  # the reader went away (`| head`): the CLI ends quietly
        except OSError as exc:  # a full disk, /dev/full
            silence_stdout()  # (what is left in the buffer must not fail again at exit)
            raise UsageError(f"cannot write the standard output ({exc.strerror or exc})") from None

    def parse_known_args(self, args=None, namespace=None):
        """As argparse; a flag given twice (the last one counts) is said on stderr, once per flag."""
        self._given = list(sys.argv[1:] if args is None else args)  # (the command named, for a flag's hint)
        _repeated_note(self, self._given)
        return super().parse_known_args(args, namespace)

    def add_argument(self, *names, **kw):
        """Every ``--multi-word`` flag also takes ``--multi_word`` (the seed harness's spelling)."""
        return _add(super().add_argument, self, names, kw)

    def group(self, title: str | None):
        """The help group ``title`` (made on first use; None = the top level)."""
        if title is None:
            return self
        if title not in self._groups:
            g = self._groups[title] = self.add_argument_group(title)
            orig = g.add_argument
            g.add_argument = lambda *names, **k: _add(orig, self, names, k)
        return self._groups[title]

    def format_help(self) -> str:
        """The help; advanced flags (declared ``advanced``, method options) only with ``--help-all``."""
        hidden = [] if self._show_all else [a for a in self._actions if getattr(a, "advanced", False)
                                            and a.help is not argparse.SUPPRESS]
        saved = [a.help for a in hidden]
        for a in hidden:
            a.help = argparse.SUPPRESS
        try:
            text = super().format_help()
        finally:
            for a, h in zip(hidden, saved, strict=True):
                a.help = h
        if hidden:
            text += f"\n{len(hidden)} more flags (method options, variants, cluster resources): --help-all\n"
        return text

    def error(self, message):
        """One line naming the problem, exit 2 (an unknown flag close to a real one: that one is named)."""
        hint = _close_flag(self, message) if message.startswith("unrecognized arguments:") else None
        hint = f"; {hint}" if hint else ""
        self.exit(2, f"{self.prog}: error: {message}{hint} (see --help)\n")


# the flags that name a file or folder: an empty value (`--out ""`, an unset shell variable) is refused, not
# read as "the default", and a NUL byte (which no path may hold) is refused before any file function sees it
PATHS = {"out", "output_dir", "data_dir", "warm_start", "text", "audit_dir", "log_dir", "slurm_folder", "model", "dirs",
         "dir", "path"}


def path_text(text: str) -> str:
    """A path flag's value: refused when empty (or blank) or when it holds a NUL byte."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?); give a path (a flag left "
                                         "out takes its default)")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} holds a NUL byte, which no path can hold")
    return text


def _add(add, parser, names, kw):
    names, advanced = list(names), kw.pop("advanced", False)
    dest = kw.get("dest") or next((n[2:].replace("-", "_") for n in names if n.startswith("--")),
                                  names[0] if names and not names[0].startswith("-") else None)
    if dest in PATHS and kw.get("type") is None and kw.get("action") in (None, "store"):
        kw["type"] = path_text
    for n in list(names):
        alt = "--" + n[2:].replace("-", "_")
        if n.startswith("--") and alt not in names and alt not in parser._option_string_actions:
            names.append(alt)
    action = add(*names, **kw)
    action.advanced = advanced
    return action


def _kind(tp) -> tuple[type, bool]:
    """``(element type, is a sequence)`` of an annotation: ``int | None`` → int; ``tuple[int, ...]`` → int, True."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (tuple, list):
        return (args[0] if args else str), True
    if args:
        return _kind(next(a for a in args if a is not type(None)))
    return tp, False


def add_fields(p: Parser, cls, *, skip=(), only=None, defaults: dict | None = None, training: bool = True,
               into: str | None = "") -> None:
    """One flag per declared field of ``cls`` (and of its nested config dataclasses), as the field says.

    ``skip``/``only`` select fields by name; ``defaults`` are this command's own defaults (shown in its help);
    ``training=False`` hides the flags of training alone (kept accepted: shared command lines); ``into``: list
    them in this help group (None: the top level) instead of the declared ones.
    """
    hints, group = typing.get_type_hints(cls), None
    for f in fields(cls):
        m = f.metadata
        kind, seq = _kind(hints[f.name])
        if "help" not in m:
            if isinstance(f.default_factory, type) and hasattr(f.default_factory, "__dataclass_fields__"):
                add_fields(p, f.default_factory, skip=skip, only=only, defaults=defaults, training=training)
            continue
        group = m["group"] or group
        if f.name in skip or (only is not None and f.name not in only):
            continue
        choices = m["choices"]() if callable(m["choices"]) else m["choices"]
        kw = {"dest": f.name, "default": (defaults or {}).get(f.name), "help": _help(m["help"])}
        if kind is bool:
            kw["action"] = "store_true"
        else:
            kw["type"] = number(kind, m) if kind in (int, float) else path_text if f.name in PATHS else kind
            kw["metavar"] = m["metavar"] or ("N" if kind is int else "X" if kind is float else None)
            if choices is not None:
                kw["choices"] = list(choices)
                kw["metavar"] = m["metavar"]
            if seq:
                kw["nargs"] = "*" if m.get("optional_values") else "+"
        if m["hidden"] or (m["training"] and not training):
            kw["help"] = argparse.SUPPRESS
        where = p.group(group if into == "" else into)
        action = where.add_argument(flag_name(f), *m["aliases"], advanced=m["advanced"], **kw)
        action.field_default = text_of(m["default_text"]) or (f.default if f.default is not MISSING else None)


def _help(text) -> str:
    """A declared help text for argparse (a callable: what it returns; ``{NAMES}``: the registered credit methods)."""
    text = text_of(text)
    if "{NAMES}" in text:
        from ..methods import METHODS

        text = text.replace("{NAMES}", "{" + ",".join(METHODS.names()) + "}")
    return text.replace("%", "%%")


def given(a: argparse.Namespace, cls, only=None) -> dict:
    """``{field: value}`` of the declared fields of ``cls`` (``only`` these) that the command line set.

    Lists become tuples; a value given twice counts once (``--seeds 1 1``) unless the field declares ``repeats``.
    """
    out = {}
    for f in fields(cls):
        if only is not None and f.name not in only:
            continue
        v = getattr(a, f.name, None)
        if "help" in f.metadata and v is not None:
            if isinstance(v, list):  # a value given twice counts once, unless the field keeps repeats
                v = tuple(v) if f.metadata.get("repeats") else tuple(dict.fromkeys(v))
            out[f.name] = v
    return out


def field_default(cls, name: str):
    """The declared default of ``cls.name``."""
    f = cls.__dataclass_fields__[name]
    return f.default if f.default is not MISSING else f.default_factory()
