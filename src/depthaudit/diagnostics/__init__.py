"""Diagnostics read stream states and credits on fixed probe batches; they never touch the optimizer.

Each quantity registers itself (:func:`register`, one file per quantity); the audit measures every registered
diagnostic its tracking plan asks for (:meth:`Diagnostic.from_plan`), in their ``order``.
"""

from .base import (
    DIAGNOSTICS,
    EPS,
    INIT_MEASUREMENT_KEY,
    MEASUREMENT_KEY,
    Diagnostic,
    Snapshot,
    Tracker,
    register,
    registered,
    robust_cosine,
)
from .cka import CKAToBP, linear_cka
from .credit_cosine import CreditCosine, RobustCosine, robust_aggregates, standard_cosines
from .functional import FreshBNull, Nudging, PerturbationCorrelation
from .monitor import Monitor
from .per_sample_cosine import PerSampleCosine
from .stream import ReferenceNorm, StreamNorms
from .update_cosine import UpdateCosine
from .weight_alignment import WeightAlignment

__all__ = ["DIAGNOSTICS", "EPS", "MEASUREMENT_KEY", "INIT_MEASUREMENT_KEY", "Diagnostic", "Snapshot", "Tracker",
           "register", "registered", "robust_cosine",
           "CreditCosine", "RobustCosine", "standard_cosines", "robust_aggregates", "Monitor", "ReferenceNorm",
           "StreamNorms", "UpdateCosine", "FreshBNull", "Nudging", "PerturbationCorrelation", "audit_tracker",
           "WeightAlignment", "PerSampleCosine", "CKAToBP", "linear_cka",
           "audit_monitor"]


def audit_tracker(batches, every: int = 1, eps: float = EPS, d1_stat: str = "median",
                  functional: dict | None = None) -> Tracker:
    """Every registered diagnostic the plan asks for, every ``every`` epochs.

    By default: the standard and robust credit cosines, update cosines, stream norms/ρ and ‖g_L‖.
    ``functional`` (``{"every", "directions", "step", "eta", "fresh_b_draws", "seed"}``) adds the functional
    measurements (perturbation correlation, nudging, fresh-B null when ``fresh_b_draws > 0``).
    """
    plan = {"every": every, "d1_stat": d1_stat, "functional": functional}
    return Tracker(batches, [d for cls in registered() if (d := cls.from_plan(plan)) is not None], eps)


def audit_monitor(tracking: dict) -> Monitor | None:
    """The monitor a tracking plan asks for (D1/D2 thresholds, stop-on-flag), or None."""
    mon = tracking.get("monitor")
    if not mon:
        return None
    return Monitor(mon["rho_max"], mon["ref_factor"] * tracking["eps"], mon.get("stop_on_flag", False))

