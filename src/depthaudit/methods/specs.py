"""Method specs (``fa:head=exact``): parsed once at the edge into a canonical label that knows its options."""

from typing import Any

from ..errors import UsageError
from .base import METHODS
from .options import Option, _fmt, declared, flag_name


class MethodSpec(str):
    """A parsed ``--methods`` entry: a ``str`` (its canonical label) that also knows its method and options.

    The label keys the row in tables and stores: ``name`` plus the options set away from their defaults, in
    declaration order (``fa:head=exact``; a yes/no option set to yes as its bare key, ``fa-stream:identity``;
    ``fa:`` and ``fa:head=feedback`` are ``fa``), so one configuration has one label. ``given`` are the options
    the entry sets (explicit defaults included, so a flag cannot override them); the rest are the defaults.
    """

    name: str
    given: tuple[tuple[str, Any], ...]

    def __new__(cls, name: str, given=()):  # noqa: D102 (the class docstring says it)
        opts = declared(METHODS.get(name))
        given = tuple(given)
        parts = [k if v is True else f"{k}={_fmt(v)}" for k, v in sorted(given, key=lambda kv: list(opts).index(kv[0]))
                 if v != opts[k].default]
        obj = super().__new__(cls, name + (":" + ",".join(parts) if parts else ""))
        obj.name, obj.given = name, given
        return obj

    def __getnewargs__(self):  # pickling (worker processes) rebuilds from the parts, not the label
        return (self.name, self.given)

    @property
    def label(self) -> str:
        """The canonical label as a plain str."""
        return str(self)

    @property
    def tag(self) -> str:
        """The label in file names: ``fa``, ``fa_head-exact``."""
        return self.label.replace(":", "_").replace("=", "-").replace(",", "_")


def parse_spec(spec: str) -> MethodSpec:
    """``name`` or ``name:key=value,key=value`` → :class:`MethodSpec`, each value parsed to its option's type.

    An unknown key, a value that does not parse and a repeated key (``fa:head=exact,head=feedback`` would be one
    label for two runs) are refused here; the values themselves are checked once, by the run config that takes
    them (:func:`~depthaudit.methods.options.resolve`).
    """
    if isinstance(spec, MethodSpec):
        return spec
    name, _, rest = spec.strip().partition(":")
    cls = METHODS.get(name)
    opts = declared(cls)
    given: dict[str, Any] = {}
    for item in (s.strip() for s in rest.split(",")):
        if not item:
            continue
        key, eq, val = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in opts:
            known = ", ".join(opts) or "none"
            example = next(iter(opts), "key")
            raise UsageError(f"method spec {spec!r}: {name} has no option {key!r} (its options: {known}); "
                             f"write e.g. {name}:{example}=value")
        if key in given:
            raise UsageError(f"method spec {spec!r}: option {key!r} is given twice; give it once")
        opt = opts[key]
        try:
            given[key] = opt.parse(val.strip() if eq else None)
        except ValueError as exc:
            raise UsageError(f"method spec {spec!r}: {key}: {exc}{opt.hint(exc)}") from None
    return MethodSpec(name, given.items())


def with_flags(ms: MethodSpec, flags: dict[str, Any]) -> MethodSpec:
    """``ms`` with the options that generated flags set (``{"fa-head": "exact"}``) where the entry sets none."""
    given = dict(ms.given)
    for key, opt in declared(METHODS.get(ms.name)).items():
        f = flag_name(ms.name, key, opt)
        if f in flags and flags[f] is not None and key not in given:
            given[key] = flags[f]
    return MethodSpec(ms.name, given.items())


def option_flags() -> dict[str, tuple[Option, list[str]]]:
    """Every generated flag (without ``--``): the first declaring option and the methods it sets."""
    out: dict[str, tuple[Option, list[str]]] = {}
    for name in METHODS.names():
        for key, opt in declared(METHODS.get(name)).items():
            f = flag_name(name, key, opt)
            out.setdefault(f, (opt, []))[1].append(name)
    return out


def legacy_fields() -> dict[str, tuple[str, str, Any]]:
    """``{flat field of a depthaudit.train.v1 record's config: (method, option, default)}`` over every method."""
    out = {}
    for name in METHODS.names():
        for key, opt in declared(METHODS.get(name)).items():
            if opt.legacy:
                out.setdefault(opt.legacy, (name, key, opt.default))
    return out


