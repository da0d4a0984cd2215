"""DRTP, direct random target projection (Frenkel, Lefebvre & Bol 2021, "Learning without feedback").

Paper's rule: every hidden layer k gets ``δ_k = B_kᵀ y*``, a fixed random projection of the one-hot target
``y*``; the output error ``e`` is never fed back (only the output layer learns from it). It works because for
a classifier the sign of the error is known in advance: the target class's component of ``e = p − y*`` is
always negative and the others positive, so ``−y*`` is a fixed-sign surrogate of ``e``.

Our choices: ``c_l = −y* B_lᵀ`` at every stream position ``l = 0..L`` (the ``−`` gives the credit the sign of
``e``'s target component, so ``c_l`` is in the same convention as DFA's ``e B_lᵀ``); ``B_l`` is DFA's
(U(±1/√C), drawn on first use from the method's seed), so ``drtp`` and ``dfa`` with one seed differ only in
``e → −y*``. The readout still learns from the exact loss (the recipe). The credit does not depend on the
network's output at all: it is a per-class constant at each position.
"""

import torch

from ..models.base import ResidualModel
from ..recipe import Trace
from .base import METHODS
from .dfa import DFA


def neg_one_hot(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``−onehot(y)`` shaped and typed like ``like`` ((B, C), or (R, B, C) for stacked runs); no host sync."""
    return torch.zeros_like(like).scatter_(-1, y.unsqueeze(-1), -1.0)


@METHODS.register("drtp")
class DRTP(DFA):
    """``c_l = −y* B_lᵀ``: fixed random projections of the target, blind to the output error."""

    name = "drtp"

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """DFA's credits of ``−y*`` in place of ``e`` (the labels are the trace's, set by the readout pass)."""
        if tr.y is None:
            raise ValueError("drtp needs the batch's labels on the trace (tr.y); run readout_pass(tr, y) first")
        return super().credits(model, tr, neg_one_hot(tr.y, e))
