"""Direct Kolen–Pollack (Webster, Choi & Ahn 2020, "Learning the connections in direct feedback alignment").

Paper's rule: DFA's direct feedback matrices ``B_k`` (layer k ← output error) are not fixed but learned with
Kolen–Pollack's transposed update: ``ΔB_k = −η_B (h_k ⊗ e)`` — the update a direct linear read-out from
``h_k`` to the output would receive, transposed — plus weight decay, so ``B_k`` comes to carry how ``h_k``
co-varies with the error instead of staying random.

Our choices: one ``B_l`` (state numel × C) per stream position ``l = 0..L``, initialised as
:class:`~depthaudit.methods.dfa.DFA`'s draw (so at ``lr = 0`` the method *is* DFA with that B); ``h_l`` is the
stream state at that position; on every training batch, before its credits are taken,
``B_l ← B_l − lr·(mean_b h_{l,b} e_bᵀ + wd·B_l)`` with the method's own constant ``lr`` and ``wd`` (options
``dkp:lr=…,wd=…``; not the optimizer's, whose AdamW steps are normalised and would not mean the same thing).
Diagnostics read the credits without learning (``measure_credits`` never calls :meth:`learn`).
"""

import torch

from ..models.base import ResidualModel
from ..recipe import Trace
from .base import METHODS
from .dfa import DFA
from .options import Option


@METHODS.register("dkp")
class DirectKolenPollack(DFA):
    """DFA whose direct feedback learns by the KP rule ``ΔB_l = −lr·(mean_b h_l eᵀ + wd·B_l)``."""

    name = "dkp"
    random_feedback = True
    stackable = False  # learns from each run's own states; not written for a leading run dim
    graphable = False
    options = {"lr": Option(1e-3, "learning rate of the direct feedback B_l (constant)", lo=0),
               "wd": Option(1e-3, "weight decay of B_l (coupled: lr·wd·B_l a step)", lo=0)}

    def __init__(self, model: ResidualModel, seed: int, lr: float = 1e-3, wd: float = 1e-3):
        super().__init__(model, seed)
        self.lr, self.wd = float(lr), float(wd)

    @torch.no_grad()
    def learn(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> None:
        """``B_l ← B_l − lr·(hᵀe / B + wd·B_l)`` for every position; h (B, numel), e (B, C)."""
        if len(self.feedback) < len(tr.states):
            self._draw(tr.states, e.shape[1])
        if self.lr == 0:
            return
        for i, h in enumerate(tr.states):
            b = self.feedback[f"B{i}"]
            g = h.flatten(1).mT @ e.to(h.dtype) / h.shape[0]  # (numel, C)
            b.sub_(self.lr * (g + self.wd * b))
