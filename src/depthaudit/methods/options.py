"""A method's own options: declared once on the method class, parsed once at the edge (timm's way).

A credit method declares what it accepts::

    @METHODS.register("mine")
    class Mine(CreditMethod):
        options = {"beta": Option(0.5, "nudging strength β", lo=0, lo_open=True),
                   "mode": Option("a", "which variant", choices=("a", "b"))}

        def __init__(self, model, seed, beta=0.5, mode="a"): ...

and every command then takes ``--methods mine:beta=0.1,mode=b`` (a row of its own), a flag ``--mine-beta``
(generated from the declaration, listed under ``--help-all``), the same validation in both spellings, and
stores ``method="mine"``, ``method_options={"beta": 0.1, "mode": "b"}`` in every result. The method is built
as ``METHODS.get(name)(model, seed, **options)``.
"""

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, UsageError
from ..fields import INT64_MAX

_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


@dataclass(frozen=True)
class Option:
    """One option of a method: its default, help, type (from the default) and valid values.

    Args:
        default: the value when the option is not given; its type is the option's type (bool, int, float, str).
        help: one line for ``--help-all``.
        choices: the allowed values of a str option.
        lo: lower bound of a number (``lo_open``: exclusive); ``hi``: upper bound (inclusive).
        flag: the flag's name without ``--`` (default ``{method}-{option}``); methods sharing a flag (``fa-head``
            for fa and its relatives) are set together by it.
        legacy: the flat config field that holds this option in stored ``depthaudit.train.v1`` records (read back).
    """

    default: Any
    help: str = ""
    choices: tuple[str, ...] | None = None
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    flag: str | None = None
    legacy: str | None = None

    @property
    def type(self) -> type:
        """bool, int, float or str: the default's type."""
        return type(self.default)

    def parse(self, text: str | None) -> Any:
        """The value of ``text`` (``None``: a bare key, meaning yes for a yes/no option); ValueError if bad."""
        if self.type is bool:
            if text is None:
                return True
            if text.lower() not in _BOOL:
                _raise(f"{text!r} is not yes/no (1, 0, true, false)")
            return _BOOL[text.lower()]
        if text is None:
            _raise("needs a value (key=value)")
        if self.type is int:
            try:
                return int(text)
            except ValueError:
                _raise(f"{text!r} is not an integer")
        if self.type is float:
            try:
                return float(text)
            except ValueError:
                _raise(f"{text!r} is not a number")
        return text

    def check(self, value: Any) -> Any:
        """``value`` validated (and coerced: an int for a float option) or ValueError naming the valid range."""
        if self.type is bool:
            if type(value).__name__ in ("bool_", "bool") and type(value).__module__ == "numpy":  # (walk 45 case 52)
                value = bool(value)
            if not isinstance(value, bool):
                _raise(f"{value!r} is not yes/no")
            return value
        if self.type in (int, float):
            np_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")
            if isinstance(value, bool) or np_bool or not isinstance(value, numbers.Real):
                _raise(f"{value!r} is not a number")  # (a numpy scalar is a number: walk 43 case 192)
            if self.type is int and not float(value).is_integer():
                _raise(f"{value!r} is not an integer")
            value = self.type(value)
            if not math.isfinite(value):
                _raise(f"{value!r} is not finite")
            if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
                _raise(f"{value!r} must be {'>' if self.lo_open else '>='} {self.lo:g}")
            if self.hi is not None and value > self.hi:
                _raise(f"{value!r} must be <= {self.hi:g}")
            if self.type is int and abs(value) > INT64_MAX:  # (torch sizes and counts are 64-bit)
                _raise(f"{value!r} must be <= {INT64_MAX}")
            return value
        if not isinstance(value, str):
            _raise(f"{value!r} is not a string")
        if self.choices is not None and value not in self.choices:
            _raise(f"{value!r} is not one of {', '.join(self.choices)}")
        if not _SAFE_VALUE.fullmatch(value):  # it is part of the row's label, its file names and its store's keys:
            # (walk 34 W8–W10: "a/b" split the ladder's keys and wrote a grow store outside --out; "a|b" broke the
            # Markdown rows; 300 characters made names too long for the disk)
            _raise(f"{value[:40]!r}{'…' if len(value) > 40 else ''} is not a usable value: use 1 to 32 letters, "
                   "digits and . _ + - (not starting with .); it names the row and its files")
        return value

    def hint(self, exc: Exception) -> str:
        """`` (its rule)`` after an error that does not state it (a type error); a range or choice error does."""
        said = str(exc)
        typed = said.endswith(("is not a number", "is not an integer", "is not a string", "is not yes/no"))
        return f" ({self.describe()})" if typed else ""

    def describe(self) -> str:
        """Type and valid values for help and errors, e.g. ``float > 0`` or ``one of state, error``."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.type is bool:
            return "yes/no"
        t = self.type.__name__
        if self.lo is not None and self.hi is not None:
            return f"{t} in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"
        if self.lo is not None:
            return f"{t} {'>' if self.lo_open else '>='} {self.lo:g}"
        return f"{t} <= {self.hi:g}" if self.hi is not None else t


_SAFE_VALUE = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,31}")


def _raise(msg: str):
    raise ValueError(msg)


def declared(cls) -> dict[str, Option]:
    """The options a method class declares (``{}`` for none)."""
    return dict(getattr(cls, "options", None) or {})


def flag_name(method: str, key: str, opt: Option) -> str:
    """The flag (without ``--``) that sets ``key`` of ``method``: the option's own, else ``{method}-{key}``."""
    return opt.flag or f"{method}-{key}".replace("_", "-")


def resolve(name: str, cls, given: dict[str, Any], hint: str = "") -> dict[str, Any]:
    """Every declared option of ``cls`` in declaration order: ``given`` (validated) over the defaults.

    The one check of a method's option values (the run config calls it; a spec's text is only parsed). An
    unknown key or a bad value is one :class:`ConfigError` naming ``method_options`` (``--method`` on the CLI),
    the method, the option and its valid values.
    """
    opts = declared(cls)
    unknown = [k for k in given if k not in opts]
    if unknown:
        known = ", ".join(opts) or "none"
        raise ConfigError(f"{{method_options}}: {name} has no option {unknown[0]!r} (its options: {known}){hint}",
                          FLAGS)
    out = {}
    for key, opt in opts.items():
        value = given.get(key, opt.default)
        try:
            out[key] = opt.check(value)
        except ValueError as exc:
            if key not in given:  # the method's own default breaks its own declaration: its author's to fix
                raise UsageError(f"method {name}: its option {key}'s default {opt.default!r} breaks the option's own "
                                 f"declaration ({exc}); fix the method's Option (its file), or give {name}:{key}="
                                 "VALUE") from None
            raise ConfigError(f"{{method_options}}: {name} option {key}: {exc}{opt.hint(exc)}", FLAGS) from None
    return out


FLAGS = {"method_options": "--method"}  # where the CLI's user gave a method's options (a sweep: --methods)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return f"{value:g}" if isinstance(value, float) else str(value)
