"""Warm-up under another method (a recipe option, usable with any method): the first steps train under ``warm``.

The reference's CIFAR bridge runs trained "with a DFA warm-up for the first 20 % of training" (``wr=0.2``,
called essential there); whether its Table 1 runs did is not stated (issue 34), so it is an option of every
run (``--warmup dfa --warmup-fraction 0.2``), never the default. Steps ``0 … switch−1`` of the run (counted over
the whole cosine budget) take ``warm``'s step, every later one ``main``'s; both methods are built at the start
from the run's seed, so the main method's feedback or auxiliary network is the one it would have drawn alone.
"""

import torch

from ..models.base import ResidualModel
from ..recipe import Trace
from .base import CreditMethod


class Warmup(CreditMethod):
    """``warm`` for the first ``switch`` recipe steps, then ``main``; measurements read the method in use."""

    growable = False  # two methods sized for one depth

    def __init__(self, warm: CreditMethod, main: CreditMethod, switch: int):
        super().__init__(None, main.seed)
        self.warm, self.main, self.switch, self.steps = warm, main, int(switch), 0
        self.name = f"{main.name} after {warm.name}"

    @property
    def active(self) -> CreditMethod:
        """The method the next step trains under."""
        return self.warm if self.steps < self.switch else self.main

    @property
    def needs_input_grad(self) -> bool:  # noqa: D102 (the active method's tracing needs)
        return self.active.needs_input_grad

    @property
    def needs_cache(self) -> bool:  # noqa: D102
        return self.active.needs_cache

    def step(self, model: ResidualModel, x: torch.Tensor, y: torch.Tensor, scale_penalty=0.0) -> torch.Tensor:
        """The active method's step; the step counter (a Python int: no device sync) moves on."""
        loss = self.active.step(model, x, y, scale_penalty)
        self._last, self.steps = self.active, self.steps + 1
        return loss

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """The active method's credits (what a diagnostic measures at this point of the run)."""
        return self.active.checked_credits(model, tr, e)

    def measure_credits(self, model: ResidualModel, x: torch.Tensor, y: torch.Tensor):
        """The active method's measurement."""
        return self.active.measure_credits(model, x, y)

    def after_step(self, model, lr=0.0, weight_decay=0.0):
        """Delegates to the method that took the step (learning feedback keeps learning)."""
        self._last.after_step(model, lr, weight_decay)

    def epoch_stats(self) -> dict:
        """Both methods' epoch statistics (an auxiliary network's losses), and which one is in use."""
        return {**self.warm.epoch_stats(), **self.main.epoch_stats(), "warmup_active": self.steps < self.switch}

    def state_dict(self):
        """The main method's state (``main.*``) and the warm-up method's (``warm.*``)."""
        return {**{f"main.{k}": v for k, v in self.main.state_dict().items()},
                **{f"warm.{k}": v for k, v in self.warm.state_dict().items()}}

    def load_state_dict(self, state):
        """Restore both methods."""
        for name, m in (("main", self.main), ("warm", self.warm)):
            part = {k.split(".", 1)[1]: v for k, v in state.items() if k.startswith(name + ".")}
            if part:
                m.load_state_dict(part)
