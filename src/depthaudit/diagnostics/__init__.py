"""Diagnostics read stream states and credits on fixed probe batches; they never touch the optimizer."""

from .base import EPS, Diagnostic, Probe, Tracker, robust_cosine
from .credit_cosine import CreditCosine, RobustCosine, robust_aggregates, standard_cosines
from .monitor import Monitor
from .stream import ReferenceNorm, StreamNorms
from .update_cosine import UpdateCosine

__all__ = ["EPS", "Diagnostic", "Probe", "Tracker", "robust_cosine", "CreditCosine", "RobustCosine",
           "standard_cosines", "robust_aggregates", "Monitor", "ReferenceNorm", "StreamNorms", "UpdateCosine",
           "audit_tracker", "audit_monitor"]


def audit_tracker(batches, every: int = 1, eps: float = EPS, d1_stat: str = "median") -> Tracker:
    """The audit's standard set: standard and robust credit cosines, update cosines, stream norms/ρ, ‖g_L‖."""
    return Tracker(batches, [CreditCosine(every), RobustCosine(every), UpdateCosine(every),
                             StreamNorms(every, d1_stat), ReferenceNorm(every)], eps)


def audit_monitor(tracking: dict) -> Monitor | None:
    """The monitor a tracking plan asks for (D1/D2 thresholds, stop-on-flag), or None."""
    mon = tracking.get("monitor")
    if not mon:
        return None
    return Monitor(mon["rho_max"], mon["ref_factor"] * tracking["eps"], mon.get("stop_on_flag", False))
