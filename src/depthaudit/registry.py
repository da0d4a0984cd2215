"""Name → factory registries (timm style): models, credit methods and datasets are looked up by name."""

import hashlib
import re
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

from .errors import UsageError

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # (".." cannot start a name)

T = TypeVar("T")


MAX_NAME = 64  # a registered name's length: a run's file name holds it beside the rest of its config (255 at most)


class Registry(Generic[T]):
    """A named table of factories; the CLI's choices are its keys.

    Example:
        >>> METHODS = Registry("method")
        >>> @METHODS.register("mine")
        ... class Mine: ...
    """

    factories = True  # what is registered builds the thing (a class or function); a registry of instances: False

    def __init__(self, kind: str, check_meta: Callable[[str, dict], None] | None = None,
                 meta_keys: tuple[str, ...] = ()):
        self.kind = kind
        self.check_meta = check_meta  # refuses bad registered defaults where they are registered (a ValueError)
        self.meta_keys = tuple(meta_keys)  # the defaults a registration may tie to its name: any other is a typo
        self._items: dict[str, T] = {}
        self._meta: dict[str, dict] = {}

    def register(self, name: str, *, overwrite: bool = False, **meta) -> Callable[[T], T]:
        """Decorator that registers ``obj`` under ``name``; ``meta`` are defaults tied to it (e.g. ``epochs``)."""
        if not isinstance(name, str) or not _SAFE.fullmatch(name):  # it names files and folders of results
            raise ValueError(f"{self.kind} name {name!r}: use letters, digits and . _ + - only (no '/', no '..'), "
                             "starting with a letter or digit")
        if len(name) > MAX_NAME:  # (walk 31 W1: a 241-character method made run file names too long for the disk,
            raise ValueError(f"{self.kind} name {name[:40]!r}… is {len(name)} characters long; use at most "  # after
                             f"{MAX_NAME}: it is part of every result's file name")  # the folder was claimed)

        unknown = [k for k in meta if k not in self.meta_keys]  # (walk 33 W1: epoch=2 for epochs=2 was kept,
        if unknown:  # unread, and the budget fell back to 20 without a word)
            takes = ", ".join((*self.meta_keys, "overwrite"))
            raise ValueError(f"{self.kind} {name!r}: register() has no keyword {unknown[0]!r} (it takes {takes}); "
                             "fix the register call")
        if self.check_meta is not None:  # (walk 18 cases 143, 144: epochs=-1 was refused later as if typed)
            self.check_meta(name, meta)

        def deco(obj: T) -> T:
            if self.factories and not callable(obj):  # (walk 18 cases 140, 141: register("x")(42) was an
                # internal error when used)
                raise ValueError(f"{self.kind} {name!r}: register a class or function that builds it, not "
                                 f"{type(obj).__name__} {obj!r}"[:200])
            if name in self._items and not overwrite:  # named with who holds it (walk 24 case 58: the message
                held = self._items[name]  # and the plug-in's file:line after it read as if the plug-in held it)
                mod = getattr(held, "__module__", None) or "?"
                who = f"depthaudit's own ({mod})" if mod.startswith("depthaudit.") else f"registered by {mod}"
                raise ValueError(f"{self.kind} {name!r} is taken: it is {who}; register yours under another name")
            self._items[name] = obj
            self._meta[name] = dict(meta)
            _remember_source(obj)
            return obj

        return deco

    def meta(self, name: str) -> dict:
        """The defaults registered with ``name`` (empty for an unknown name)."""
        return self._meta.get(name, {})

    def get(self, name: str) -> T:
        """Look up ``name``; an unknown name is a UsageError listing the known ones."""
        try:
            return self._items[name]
        except KeyError:
            raise UsageError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def __iter__(self):
        """Its names, as a dict's keys (``sorted(da.FAMILIES)``)."""
        return iter(self.names())

    def keys(self) -> list[str]:
        """Its names (:meth:`names`)."""
        return self.names()

    def __contains__(self, name: str) -> bool:
        return name in self._items


# the sha256 of each plug-in source file as it was when its code registered (the code that runs), by file path:
# a file edited afterwards, in a notebook that does not reload it, still names the code that ran (walk 34 W11)
LOADED_AS: dict[str, str] = {}


def _remember_source(obj) -> None:
    mod = getattr(obj, "__module__", None) or ""
    if not mod or mod == "depthaudit" or mod.startswith("depthaudit."):
        return
    file = getattr(sys.modules.get(mod), "__file__", None)
    if not isinstance(file, str):
        return
    try:
        with open(file, "rb") as f:  # (a plug-in's source: small; hashlib.file_digest is 3.11+)
            LOADED_AS[file] = hashlib.sha256(f.read()).hexdigest()
    except (OSError, ValueError):
        LOADED_AS.pop(file, None)
