"""Drop-in audit of any residual model at any step, and a monitor for a user's own training loop.

Public names (see docs/python-api.md): :class:`CreditEvaluator`, :func:`capture_credits`, :class:`TrainingMonitor`,
:func:`frozen_twin`, :func:`bp_twin`.
"""

from .core import CreditEvaluator, bp_twin, capture_credits, custom_backward_nodes, forward_states, untouched
from .monitor import TrainingMonitor, frozen_twin

__all__ = ["CreditEvaluator", "capture_credits", "TrainingMonitor", "frozen_twin", "bp_twin",
           "custom_backward_nodes", "forward_states", "untouched"]
