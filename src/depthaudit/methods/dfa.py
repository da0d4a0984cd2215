"""Direct feedback alignment (Nøkland): ``c_l = B_l e`` straight from the output error."""

import math

import torch

from ..models.base import ResidualModel
from ..recipe import Trace
from .base import METHODS, CreditMethod


@METHODS.register("dfa")
class DFA(CreditMethod):
    """One fixed random ``B_l`` (state numel × C) per stream position ``l = 0..L``.

    Entries U(±1/√C). For token or spatial states the projection covers the whole state. The
    matrices are drawn on first use (their shape needs one batch) from the method's seed, in
    order l = 0..L, so they are the same whenever they are drawn (after growth: only the missing ones).
    """

    name = "dfa"
    random_feedback = True
    stackable = True
    graphable = True
    state_tensors = {"feedback": ""}  # B0..BL, saved, stacked and moved by CreditMethod

    def __init__(self, model: ResidualModel, seed: int):
        super().__init__(model, seed)
        self.feedback: dict[str, torch.Tensor] = {}

    def _draw(self, states: list[torch.Tensor], num_classes: int) -> None:
        gen = torch.Generator().manual_seed(self.seed)
        bound = num_classes**-0.5
        for i, h in enumerate(states):
            b = torch.empty(math.prod(h.shape[1:]), num_classes).uniform_(-bound, bound, generator=gen)
            self.feedback.setdefault(f"B{i}", b.to(device=h.device, dtype=h.dtype))  # kept ones stay (growth)

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """``c_l = (e @ B_lᵀ)`` reshaped to ``h_l``."""
        if len(self.feedback) < len(tr.states):  # first use, or a block was inserted (see CreditMethod.grown)
            self._draw(tr.states, e.shape[1])
        return [(e @ self.feedback[f"B{i}"].mT).view_as(h) for i, h in enumerate(tr.states)]

