"""Diagnostics read stream states and credits on fixed probe batches; they never touch the optimizer."""

from .base import EPS, Diagnostic, Probe, Tracker, robust_cosine
from .credit_cosine import CreditCosine, RobustCosine, robust_aggregates, standard_cosines
from .functional import FreshBNull, Nudging, PerturbationCorrelation
from .monitor import Monitor
from .stream import ReferenceNorm, StreamNorms
from .update_cosine import UpdateCosine

__all__ = ["EPS", "Diagnostic", "Probe", "Tracker", "robust_cosine", "CreditCosine", "RobustCosine",
           "standard_cosines", "robust_aggregates", "Monitor", "ReferenceNorm", "StreamNorms", "UpdateCosine",
           "FreshBNull", "Nudging", "PerturbationCorrelation", "audit_tracker", "audit_monitor"]


def audit_tracker(batches, every: int = 1, eps: float = EPS, d1_stat: str = "median",
                  functional: dict | None = None) -> Tracker:
    """The audit's standard set: standard and robust credit cosines, update cosines, stream norms/ρ, ‖g_L‖.

    ``functional`` (``{"every", "directions", "step", "eta", "fresh_b_draws", "seed"}``) adds the functional
    measurements (perturbation correlation, nudging, fresh-B null when ``fresh_b_draws > 0``).
    """
    diags = [CreditCosine(every), RobustCosine(every), UpdateCosine(every), StreamNorms(every, d1_stat),
             ReferenceNorm(every)]
    if functional:
        f = functional
        diags += [PerturbationCorrelation(f["every"], f["directions"], f["step"], f["seed"]),
                  Nudging(f["every"], f["eta"])]
        if f["fresh_b_draws"] > 0:
            diags.append(FreshBNull(f["every"], f["fresh_b_draws"], f["seed"]))
    return Tracker(batches, diags, eps)


def audit_monitor(tracking: dict) -> Monitor | None:
    """The monitor a tracking plan asks for (D1/D2 thresholds, stop-on-flag), or None."""
    mon = tracking.get("monitor")
    if not mon:
        return None
    return Monitor(mon["rho_max"], mon["ref_factor"] * tracking["eps"], mon.get("stop_on_flag", False))
