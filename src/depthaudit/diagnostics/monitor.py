"""Training monitor (SPEC §3): the first epoch at which D1 and D2 fire, read from each measurement.

The reference reports e.g. "DFA fires at epoch 4, saving 96 % of the compute"; with ``stop_on_flag``
the training loop ends the run there (status ``stopped_flagged``).
"""

import math

from .base import registered


def check_values(measured: dict) -> dict:
    """Each protocol check's value in one measurement: ``{"D1": ρ, "D2": ‖g_L‖}``.

    Read through the registered diagnostics that feed a check (their ``checks``); a check whose diagnostic was
    not measured is absent.
    """
    return {check: cls.read(measured).get(key) for cls in registered() if cls.name in (measured or {})
            for check, key in cls.checks.items()}


class Monitor:
    """Reads D1's ρ and D2's ‖g_L‖ (:func:`check_values`) from each measurement; remembers first firings."""

    def __init__(self, rho_max: float = 50.0, g_min: float = 1e-7, stop_on_flag: bool = False):
        self.rho_max, self.g_min, self.stop_on_flag = rho_max, g_min, stop_on_flag
        self.fired: dict[str, dict | None] = {"D1": None, "D2": None}
        self.measured_epochs: list[int] = []

    def _fires(self, name: str, v) -> bool:
        if v is None or not math.isfinite(v):
            return True  # a missing or non-finite measurement is a FLAG, as in the verdicts
        return v > self.rho_max if name == "D1" else v < self.g_min

    def update(self, epoch: int, measured: dict) -> list[str]:
        """Record one measurement; return the checks that fired for the first time at ``epoch``."""
        self.measured_epochs.append(epoch)
        new = []
        for name, v in check_values(measured).items():
            if name in self.fired and self.fired[name] is None and self._fires(name, v):
                self.fired[name] = {"epoch": epoch, "value": v}
                new.append(name)
        return new

    @property
    def should_stop(self) -> bool:
        """Whether the run must end now: ``stop_on_flag`` and some check has fired."""
        return self.stop_on_flag and any(v is not None for v in self.fired.values())

    def describe(self, name: str) -> str:
        """``ρ = 78.5 > 50`` style text for a fired check."""
        f = self.fired[name]
        return (f"ρ = {f['value']:.3g} > {self.rho_max:g}" if name == "D1"
                else f"‖g_L‖ = {f['value']:.3g} < {self.g_min:.0e}")

    def to_dict(self) -> dict:
        """JSON-able: thresholds, first firings (None = never), whether it stopped runs, epochs measured."""
        return {"rho_max": self.rho_max, "g_min": self.g_min, "stop_on_flag": self.stop_on_flag,
                "fired": self.fired, "measured_epochs": self.measured_epochs}
