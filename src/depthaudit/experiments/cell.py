"""One cell of a depth sweep: the sweep's config plus the one thing that varies per cell.

A cell re-declares none of its config's fields: ``cell.lr`` *is* ``cell.config.lr``; a cell class declares only
what varies (``SaturationRun.extra``, ``GrowRun.arm``, ``PretrainedRun.model``) and ``KEYS``, the config keys its
record stores (the ``config`` entry of every run record, in the order earlier versions wrote them, so a stored
run is recognised and a record reads the same). Imports nothing heavy.
"""

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, kw_only=True)
class Cell:
    """A sweep's config (resolved: the family's defaults and the budget filled in) and what this cell varies."""

    config: Any
    KEYS: ClassVar[tuple[str, ...]] = ()  # what the record stores, in order

    def __getattr__(self, name: str):
        # only reached for names the cell does not declare: they are the config's (never a dunder: pickling asks)
        if name.startswith("__") or name == "config":
            raise AttributeError(name)
        return getattr(self.config, name)

    def to_dict(self) -> dict:
        """The record's ``config`` entry: :attr:`KEYS` of this cell."""
        return {k: getattr(self, k) for k in self.KEYS}
