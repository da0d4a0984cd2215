"""Kolen–Pollack: the feedback receives the forward weights' update and the same weight decay.

With ``B ← B + ΔW_update − lr·wd·B`` and ``W ← W + ΔW_update − lr·wd·W`` (AdamW's decoupled decay),
the difference ``D = B − W`` obeys ``D ← (1 − lr·wd)·D`` exactly, whatever the update is. So the method
keeps ``D`` (initialised to ``B_0 − W_0`` with ``B_0`` an FA draw) and uses ``B = W + D``: B converges
to W geometrically. Feedback of a weight that does not train (a frozen block) stays fixed.
"""

import torch

from ..models.base import ResidualModel
from .base import METHODS
from .fa import FA


@METHODS.register("kp")
class KolenPollack(FA):
    """FA whose feedback learns with the forward weights' update and shared weight decay."""

    name = "kp"

    def __init__(self, model: ResidualModel, seed: int, head: str = "feedback"):
        super().__init__(model, seed, head)
        self._weights = {}
        for i, blk in enumerate(model.blocks, start=1):
            for k, w in blk.feedback_weights().items():
                self._weights[f"block{i}.{k}"] = w
        for k, w in model.readout.feedback_weights().items():
            self._weights[f"readout.{k}"] = w
        # stored: D = B − W (so that B tracks W's every update exactly)
        self.feedback = {k: b - self._weights[k].detach() for k, b in self.feedback.items()}
        self._masks: dict[str, torch.Tensor] | None = None  # stacked runs: (R,) runs whose weight trains

    @classmethod
    def stack(cls, methods, model, trains):
        """Stacked ``D``; the decay applies per run only where that run's weight trains."""
        stacked = super().stack(methods, model, trains)
        stacked._weights = {f"block{i}.{k}": w for i, blk in enumerate(model.blocks, start=1)
                            for k, w in blk.feedback_weights().items()}
        stacked._weights.update({f"readout.{k}": w for k, w in model.readout.feedback_weights().items()})
        stacked._masks = {k: trains[k.split(".")[0]] for k in stacked.feedback}
        return stacked

    def matrix(self, key: str, weight: torch.Tensor) -> torch.Tensor:
        """``B = W + D``."""
        return weight.detach() + self.feedback[key]

    @torch.no_grad()
    def after_step(self, model, lr=0.0, weight_decay=0.0):
        """``D ← (1 − lr·wd)·D`` for every trained weight."""
        for k, d in self.feedback.items():
            if self._masks is not None:  # stacked runs (R, …): decay where the run's weight trains
                keep = torch.tensor(1.0 - lr * weight_decay, dtype=d.dtype, device=d.device)
                d.mul_(torch.where(self._masks[k], keep, 1.0).view(-1, *[1] * (d.dim() - 1)))
            elif self._weights[k].requires_grad:
                d.mul_(1.0 - lr * weight_decay)
