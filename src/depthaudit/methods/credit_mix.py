"""Credit mix (ours; not the protocol's Credit Bridge, which is ``cb``): a method's credit mixed with BP's.

At every stream position, with hats denoting rms normalisation (one scalar per batch tensor),
``c_l(α) = (1 − α)·ĉ_l(method) + α·ĝ_l(BP)``. α = 0 is the method, α = 1 is BP (the recipe
rms-normalises credits, so both limits give exactly those methods' updates). Sweeping α shows whether
a credit closer to BP — a higher cosine — buys accuracy.
"""

import torch

from ..models.base import ResidualModel
from ..recipe import Trace, rms
from .base import CreditMethod
from .bp import bp_credits


class CreditMix(CreditMethod):
    """Wraps a built method; needs the exact BP credit too, so traces keep block inputs differentiable."""

    growable = False  # an auxiliary network / wrapped method sized for a fixed depth

    needs_input_grad = True

    def __init__(self, base: CreditMethod, alpha: float):
        super().__init__(None, base.seed)
        self.base, self.alpha = base, float(alpha)
        self.name = f"{base.name}+mix({self.alpha:g})"
        self.needs_cache = base.needs_cache

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """``(1 − α)·ĉ_method + α·ĝ_BP`` per position (α = 0 skips the unneeded BP credit)."""
        if self.alpha == 0.0:
            return self.base.checked_credits(model, tr, e)
        g = bp_credits(tr)
        c = self.base.checked_credits(model, tr, e)
        a = self.alpha
        return [(1 - a) * ci / rms(ci) + a * gi.detach() / rms(gi) for ci, gi in zip(c, g, strict=True)]

    def learn(self, model, tr, e):
        """Delegates (a learned method's auxiliary network keeps learning under the mix)."""
        self.base.learn(model, tr, e)

    def after_step(self, model, lr=0.0, weight_decay=0.0):
        """Delegates (learning feedback keeps learning)."""
        self.base.after_step(model, lr, weight_decay)

    def state_dict(self):
        """The base method's feedback."""
        return self.base.state_dict()

    def load_state_dict(self, state):
        """Restore the base method's feedback."""
        self.base.load_state_dict(state)
