"""Config fields that carry their own command-line flag (Hugging Face's ``HfArgumentParser`` way).

A config dataclass declares each field once with :func:`arg`: its default, help, range or choices, the
help group it is listed in and whether only ``--help-all`` shows it. The CLI's flags are generated from these
declarations (``commands/args.py``), and :func:`check_ranges` applies the same ranges to a config built in
Python, so a default or a range lives in exactly one place. Imports nothing heavy (``--help`` stays fast).
"""

import math
import numbers
import types
import typing
from dataclasses import MISSING, field, fields, is_dataclass

from .errors import ConfigError


def arg(default=MISSING, *, help, group: str | None = None, advanced: bool = False, lo=None, hi=None,
        lo_open: bool = False, choices=None, metavar: str | None = None, flag: str | None = None,
        aliases: tuple[str, ...] = (), factory=MISSING, default_text=None, per_run: bool = False,
        training: bool = False, hidden: bool = False, optional_values: bool = False, repeats: bool = False):
    """A dataclass field with its flag's declaration in ``metadata``.

    ``help`` is the flag's help (or a callable returning it, read when the parser is built: a registry's
    entries); ``group`` the help group it is listed in (a field without one joins the group of the field before
    it); ``lo``/``hi`` bound a number (``lo_open``: strictly above ``lo``); ``choices`` is a sequence or a
    callable returning one (a registry's names); ``flag`` overrides the flag's name (default: the field's,
    dashed) and ``aliases`` are other accepted spellings; ``default_text`` (a string or a callable returning
    one) is what the help says for a default that is resolved later (``None`` = the dataset's); ``per_run``: a
    flag of commands that train one run (``train``), not of sweeps; ``training``: hidden by commands that train
    nothing; ``hidden``: accepted, never listed. For a sequence: ``optional_values``, the flag may be given
    with no value (an empty tuple: "the defaults"); ``repeats``, a value given twice is kept (else once).
    """
    meta = {"help": help, "group": group, "advanced": advanced, "lo": lo, "hi": hi, "lo_open": lo_open,
            "choices": choices, "metavar": metavar, "flag": flag, "aliases": tuple(aliases),
            "default_text": default_text, "per_run": per_run, "training": training, "hidden": hidden,
            "optional_values": optional_values, "repeats": repeats}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def like(cls, name: str, default=MISSING, **changes):
    """The field ``cls.name`` declared for another config too: its default, help, range, choices and group.

    Two configs that share a field (a depth sweep's ``lr`` is the recipe's) declare it once, in ``cls``;
    ``default`` and ``changes`` (any :func:`arg` keyword) are what differs for the other config.
    """
    f = cls.__dataclass_fields__[name]
    meta = {**f.metadata, **changes}
    if default is not MISSING:
        return field(default=default, metadata=meta)
    if f.default_factory is not MISSING:
        return field(default_factory=f.default_factory, metadata=meta)
    return field(default=f.default, metadata=meta)


def text_of(value) -> str | None:
    """A declared help or default text: as given, or what its callable returns now."""
    return value() if callable(value) else value


def flag_name(f) -> str:
    """The flag a field is given as: ``--d-hidden`` for ``d_hidden`` (or the declared ``flag``)."""
    return "--" + (f.metadata.get("flag") or f.name.replace("_", "-"))


def out_of_range(value, meta) -> str | None:
    """What is wrong with a number against its field's range (``"must be >= 1"``), None when it is in range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    lo, hi = meta.get("lo"), meta.get("hi")
    if lo is not None and (value <= lo if meta.get("lo_open") else value < lo):
        return f"must be {'>' if meta.get('lo_open') else '>='} {lo}"
    if hi is not None and value > hi:
        return f"must be <= {hi}"
    if isinstance(value, int) and abs(value) > INT64_MAX:  # (torch sizes, seeds and counts are 64-bit)
        return f"must be <= {INT64_MAX}"
    return None


INT64_MAX = 2**63 - 1


def shown_flag(f) -> str:
    """The flag as the help lists it, and as refusals name it.

    A declared underscore spelling with a dashed alias (``--k_values``, ``--k-values``) is the dashed one (walk
    28 case 16: a refusal named the spelling the help hides).
    """
    flag = flag_name(f)
    dashed = flag.replace("_", "-")
    return dashed if dashed != flag and dashed in f.metadata.get("aliases", ()) else flag


def refuse(obj, template: str):
    """A :class:`ConfigError` of ``template`` whose ``{field}`` names take ``obj``'s declared flags on the CLI."""
    flags = {f.name: shown_flag(f) for f in fields(obj) if f.metadata.get("flag")}
    return ConfigError(template, flags)


def check_ranges(obj) -> None:
    """Refuse a config (or a nested one) holding a number outside its field's declared range: one line."""
    for f in fields(obj):
        v = getattr(obj, f.name)
        if is_dataclass(v):
            check_ranges(v)
            continue
        if "help" not in f.metadata or v is None:
            continue
        for x in v if isinstance(v, tuple | list) else (v,):
            bad = out_of_range(x, f.metadata)
            if bad:
                raise refuse(obj, f"{{{f.name}}} {bad}, got {x}")


_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "True or False", dict: "a dict"}


def _fits(value, hint):
    """``(ok, value)``: whether ``value`` is of type ``hint``, and the value as stored.

    An int for a float field is stored as a float and a list as a tuple: what the CLI's parser would have made.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True, value
    if origin in (typing.Union, types.UnionType):
        for h in args:
            ok, v = _fits(value, h)
            if ok:
                return True, v
        return False, value
    if hint is type(None):
        return value is None, value
    if origin is tuple:
        if not isinstance(value, tuple | list) or isinstance(value, str):
            return False, value
        out = []
        for x in value:
            ok, x = _fits(x, args[0])
            if not ok:
                return False, value
            out.append(x)
        return True, tuple(out)
    if origin is dict:
        return isinstance(value, dict), value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:  # (a numpy or torch integer scalar is an integer: stored as Python's)
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        return ok, int(value) if ok else value
    if hint is float:  # (np.float32(1e-3) is a number too)
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if isinstance(hint, type):
        return isinstance(value, hint), value
    return True, value  # (a hint this check does not read: left to the config's own rules)


def _kind(hint) -> str:
    """How a type reads in a refusal: ``an integer``, ``an integer or None``, ``a tuple of integers``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("None" if h is type(None) else _kind(h) for h in args)
    if origin is tuple:
        return f"a tuple of {_kind(args[0]).split(' ', 1)[-1]}s"
    return _KINDS.get(hint, getattr(hint, "__name__", str(hint)))


def check_types(obj) -> None:
    """Refuse a field whose value is not of its declared type: one line naming the field, before anything uses it.

    ``d_hidden='8'``, ``8.5`` or ``True`` for an int are refused; ints given for a float field are stored as floats
    and lists as tuples (what the CLI's parser makes).
    """
    hints = typing.get_type_hints(type(obj))
    for f in fields(obj):
        hint = hints.get(f.name)
        if hint is None:
            continue
        ok, v = _fits(getattr(obj, f.name), hint)
        if not ok:
            raise refuse(obj, f"{{{f.name}}} must be {_kind(hint)}, got {getattr(obj, f.name)!r}")
        if v is not getattr(obj, f.name):
            object.__setattr__(obj, f.name, v)
        if f.name in PATH_FIELDS and isinstance(v, str) and (not v.strip() or "\0" in v):  # as the CLI refuses them
            raise refuse(obj, f"{{{f.name}}} {v!r} is {'an empty path' if not v.strip() else 'a path with a NUL byte'}"
                         f"; give a path, or leave {{{f.name}}} out (None) for its default")


PATH_FIELDS = ("data_dir", "warm_start", "text")  # a config's paths: '' is never read as "the default"


def check_choices(obj, only: tuple[str, ...] | None = None) -> None:
    """Refuse a field (or an item of a tuple field) outside its declared ``choices``: one line naming the field.

    ``only``: these fields (a config whose other choices are registries, checked against the live registry).
    """
    for f in fields(obj):
        if only is not None and f.name not in only:
            continue
        choices, v = f.metadata.get("choices"), getattr(obj, f.name)
        if choices is None or v is None:
            continue
        known = tuple(choices() if callable(choices) else choices)
        for x in v if isinstance(v, tuple | list) else (v,):
            if x not in known:
                raise refuse(obj, f"{{{f.name}}} {x!r} not known; use one of {', '.join(map(str, known))}")


def check_seeds(obj, name: str = "seeds") -> None:
    """A sweep's seeds: at least one, each counted once (a seed twice would double-count it in mean ± std)."""
    seeds = tuple(dict.fromkeys(getattr(obj, name)))
    if not seeds:
        raise refuse(obj, f"{{{name}}} is empty; give at least one seed (e.g. 42)")
    object.__setattr__(obj, name, seeds)


# fields shared by the sweep configs (AuditConfig, LadderConfig): declared once here
def methods_field(default=("bp", "fa", "dfa")):
    """``methods``: one row per credit-method spec."""
    return arg(default, help="credit methods, from {NAMES}; a variant as a row of its own: name:key=value "
               "(e.g. fa:head=exact, fa-stream:identity)", metavar="M", group="credit and recipe", training=True)


def seeds_field(default=(42,)):
    """``seeds``: each method's runs, aggregated as mean ± std."""
    return arg(default, help="seeds (mean ± std, ddof 1)", lo=0, hi=2**63 - 1, metavar="S")


def probe_batches_field():
    """``probe_batches``: the field's convention is 10 held-out batches of 128."""
    return arg(10, help="held-out probe batches per measurement", lo=1, group="measurement and thresholds")


def probe_batch_size_field():
    """``probe_batch_size``: B_p of the mean-loss reference."""
    return arg(128, help="probe batch size B_p of the mean-loss reference", lo=2)


def d1_stat_field():
    """``d1_stat``: the per-example stream-norm statistic of D1."""
    return arg("median", help="per-example stream norm statistic for D1 (median: the reference's)",
               choices=("median", "mean"), advanced=True)
