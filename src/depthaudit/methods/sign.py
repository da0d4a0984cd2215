"""Sign-symmetry feedback (Liao et al. 2016; Moskovitz et al. 2018): ``B = sign(W) ⊙ magnitudes``.

The sign follows the *current* forward weight at every step; only the magnitudes differ:

* ``usf`` — uniform: every magnitude is the std of W's init distribution, ``1/√(3·fan_in)``;
* ``frsf`` — fixed random: magnitudes ``|R|``, R drawn once (W's init distribution) and kept for the run;
* ``brsf`` — batchwise random: magnitudes ``|R_t|`` redrawn at every step from a seeded generator.
"""

import torch

from ..models.base import ResidualModel
from .base import METHODS
from .fa import FA


@METHODS.register("usf")
class USF(FA):
    """Uniform sign-concordant feedback: ``B = sign(W) / √(3·fan_in)``."""

    name = "usf"
    random_feedback = False  # sign(W)/√(3·fan_in): nothing random to redraw

    def matrix(self, key: str, weight: torch.Tensor) -> torch.Tensor:
        """``sign(W)`` times the init std of W."""
        return torch.sign(weight.detach()) * (3 * weight.shape[-1]) ** -0.5


@METHODS.register("frsf")
class FRSF(FA):
    """Fixed random-magnitude sign-concordant feedback: ``B = sign(W) ⊙ |R|``, R fixed for the run."""

    name = "frsf"

    def matrix(self, key: str, weight: torch.Tensor) -> torch.Tensor:
        """``sign(W)`` with the run's fixed random magnitudes."""
        return torch.sign(weight.detach()) * self.feedback[key].abs()


@METHODS.register("brsf")
class BRSF(FA):
    """Batchwise random-magnitude sign-concordant feedback: fresh ``|R_t|`` at every step."""

    name = "brsf"
    stackable = False  # one magnitude stream per run, drawn in run order: stacked runs would draw differently

    def __init__(self, model: ResidualModel, seed: int, head: str = "feedback"):
        super().__init__(model, seed, head)
        self._gen = torch.Generator().manual_seed(seed + 1)
        self._fresh: dict[str, torch.Tensor] = {}

    def matrix(self, key: str, weight: torch.Tensor) -> torch.Tensor:
        """``sign(W)`` with this step's random magnitudes."""
        if key not in self._fresh:
            bound = weight.shape[1] ** -0.5
            r = torch.empty(weight.shape).uniform_(0, bound, generator=self._gen)
            self._fresh[key] = r.to(weight.device, weight.dtype)
        return torch.sign(weight.detach()) * self._fresh[key]

    def after_step(self, model, lr=0.0, weight_decay=0.0):
        """Magnitudes are redrawn for the next batch."""
        self._fresh = {}
