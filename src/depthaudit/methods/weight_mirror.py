"""Weight mirrors (Akrout, Wilson, Humphreys, Lillicrap & Tweed 2019, "Deep learning without weight transport").

Paper's rule: FA's feedback ``B`` is learned in a "mirror mode" interleaved with training: each layer is driven
by zero-mean noise ``x`` (variance σ²), emits ``y = W x``, and updates ``ΔB = η_B x yᵀ − λ_B B`` (B shaped like
``Wᵀ``). Since ``E[x yᵀ] = σ² Wᵀ``, B tracks a multiple of ``Wᵀ`` without any weight being transported.

Our choices: feedback is stored in ``W``'s shape (the matrix used in place of ``Wᵀ``, as every FA relative
here), initialised as FA's draw; after every optimizer step each feedback weight ``W`` (out × in, a
higher-order weight flattened to (out, −1)) takes one mirror step with ``n`` standard-normal inputs
(σ = 1; option ``noise``) and ``η_B = λ_B = rate`` (option ``rate``)::

    B ← (1 − rate)·B + rate · (1/n) Σ_i y_i x_iᵀ,   y_i = W x_i

an exponential average of unbiased estimates of ``W``, so ``E[B] → W`` exactly (no rescaling left to tune).
Every feedback weight mirrors, a frozen block's too (its credit still passes through B). The noise of step t is
drawn from a generator seeded by (seed, t), t stored with the feedback, so a resumed run mirrors the same
noise and a measurement never draws from the training stream.
"""

import torch

from ..models.base import ResidualModel
from .base import METHODS
from .fa import FA
from .options import Option

STEP_KEY = "readout.mirror_step"  # the mirror-step counter, kept with the feedback (a readout.* key: growth keeps it)


@METHODS.register("wm")
class WeightMirror(FA):
    """FA whose feedback is mirrored from the forward weights through noise: ``B → W`` in expectation."""

    name = "wm"
    stackable = False  # one noise stream per run
    graphable = False
    state_counters = {"t": STEP_KEY}  # kept with the learned feedback
    options = {**FA.options,
               "rate": Option(0.05, "mirror rate η_B = λ_B: B ← (1−rate)B + rate·mean(y xᵀ)", lo=0, hi=1),
               "noise": Option(64, "noise inputs per mirror step", lo=1)}

    def __init__(self, model: ResidualModel, seed: int, head: str = "feedback", rate: float = 0.05,
                 noise: int = 64):
        super().__init__(model, seed, head)
        self.rate, self.noise, self.t = float(rate), int(noise), 0
        self._weights = {f"block{i}.{k}": w for i, blk in enumerate(model.blocks, start=1)
                         for k, w in blk.feedback_weights().items()}
        self._weights.update({f"readout.{k}": w for k, w in model.readout.feedback_weights().items()})

    @torch.no_grad()
    def mirror(self) -> None:
        """One mirror step for every feedback weight (noise seeded by (seed, t))."""
        gen = torch.Generator().manual_seed(self.seed + 7919 * (self.t + 1))
        for k, b in self.feedback.items():
            w = self._weights[k].detach().flatten(1)  # (out, in)
            x = torch.randn(self.noise, w.shape[1], generator=gen, dtype=w.dtype).to(w.device)  # (n, in)
            est = (x @ w.mT).mT @ x / self.noise  # mean_i y_i x_iᵀ, (out, in); E = W
            b.mul_(1 - self.rate).add_(est.view_as(b), alpha=self.rate)
        self.t += 1

    def after_step(self, model, lr=0.0, weight_decay=0.0):
        """Mirror mode after every training step."""
        self.mirror()
