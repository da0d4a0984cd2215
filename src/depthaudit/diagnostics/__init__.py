"""Diagnostics read stream states and credits on a fixed probe batch; they never touch the optimizer."""

from .base import EPS, Diagnostic, Probe, Tracker, cosine
from .credit_cosine import CreditCosine, aggregate_cosines
from .stream import ReferenceNorm, StreamNorms
from .update_cosine import UpdateCosine

__all__ = ["EPS", "Diagnostic", "Probe", "Tracker", "cosine", "CreditCosine", "aggregate_cosines",
           "ReferenceNorm", "StreamNorms", "UpdateCosine", "audit_tracker"]


def audit_tracker(x, y, every: int = 1, eps: float = EPS) -> Tracker:
    """The audit's standard set: credit and update cosines, stream norms/ρ, reference norms."""
    return Tracker(x, y, [CreditCosine(every), UpdateCosine(every), StreamNorms(every), ReferenceNorm(every)],
                   eps)
