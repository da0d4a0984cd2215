"""Sign-DFA (Frenkel et al. 2021, the DRTP paper's code): DFA driven by the sign of the output error.

Paper's rule: ``δ_l = B_l sign(e)`` with a fixed random ``B_l`` per layer — only the sign of each output
error component travels back (one bit per class), which is what a low-precision on-chip learner can afford.
Our choices: the same ``B_l`` as :class:`~depthaudit.methods.dfa.DFA` (U(±1/√C), drawn on first use from the
method's seed, one per stream position ``l = 0..L``), so ``sign-dfa`` and ``dfa`` with one seed differ only in
``e → sign(e)``; ``sign(0) = 0``. The recipe's rms normalisation of each credit removes the lost scale.
"""

import torch

from ..models.base import ResidualModel
from ..recipe import Trace
from .base import METHODS
from .dfa import DFA


@METHODS.register("sign-dfa")
class SignDFA(DFA):
    """``c_l = B_l sign(e)``: DFA's fixed projections of the error's sign."""

    name = "sign-dfa"

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """DFA's credits of ``sign(e)`` (B, C)."""
        return super().credits(model, tr, torch.sign(e))
