"""Forward gradient by activity perturbation (Baydin et al. 2022; Ren, Kornblith, Liao & Hinton 2023).

Paper's rule: with a random tangent ``v`` (E[v vᵀ] = I), the forward-mode directional derivative
``∇ℓ·v`` (one jvp, no backward pass) gives ``ĝ = (∇ℓ·v) v``, an unbiased estimate of ``∇ℓ``. Perturbing
activities rather than weights (Ren et al.) keeps the variance at the dimension of a layer's output.

Our choices: at every stream position ``l = 0..L`` and for every example b, an independent tangent ``v_{l,b}``
shaped like ``h_{l,b}`` (option ``tangent``: ``gaussian`` N(0, I) or ``rademacher`` ±1); ``d_{l,b}`` is the
jvp of the example's loss ``ℓ_b(h_l)`` (the rest of the network after position l, run forward in torch.func's
forward mode) along ``v_{l,b}``, and ``c_{l,b} = (1/K) Σ_k d_{l,b,k} v_{l,b,k}`` over ``K`` tangents (option
``samples``). ``E[c_l] = ∂(Σ_b ℓ_b)/∂h_l``, BP's credit, for models whose examples do not interact (every model
here: LayerNorm, no BatchNorm). Cost: K·(L+1) partial forwards a step. Tangents of training step t come from a
generator seeded by (seed, t), t kept in the state, so measurements never draw from the training stream and a
resumed run draws the same tangents.
"""

import torch
import torch.nn.functional as F

from ..models.base import ResidualModel
from ..recipe import Trace
from .base import METHODS, CreditMethod
from .options import Option

STEP_KEY = "readout.tangent_step"


def forward_gradient(fn, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``(∇f_b(x_b) · v_b) v_b`` per example from one forward-mode jvp; ``fn`` maps (B, …) to per-example (B,)."""
    _, d = torch.func.jvp(fn, (x,), (v,))  # (B,): the directional derivatives
    return d.view(-1, *[1] * (x.dim() - 1)) * v


def draw_tangent(shape, kind: str, gen: torch.Generator, dtype) -> torch.Tensor:
    """A tangent with E[v vᵀ] = I: standard normal or Rademacher ±1 (drawn on the CPU from ``gen``)."""
    if kind == "rademacher":
        return torch.randint(0, 2, shape, generator=gen).to(dtype) * 2 - 1
    return torch.randn(shape, generator=gen, dtype=dtype)


@METHODS.register("fg")
class ForwardGradient(CreditMethod):
    """``c_l = (∇_{h_l}ℓ · v) v`` per example from forward-mode jvps: unbiased for BP's credit."""

    name = "fg"
    state_counters = {"t": STEP_KEY}  # the tangents are drawn from it
    options = {"tangent": Option("gaussian", "tangent distribution", choices=("gaussian", "rademacher")),
               "samples": Option(1, "tangents averaged per credit (K)", lo=1)}

    def __init__(self, model: ResidualModel, seed: int, tangent: str = "gaussian", samples: int = 1):
        super().__init__(model, seed)
        self.tangent, self.samples, self.t = tangent, int(samples), 0

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """Per position, the mean over K tangents of ``(jvp of ℓ_b along v) v``."""
        if tr.y is None:
            raise ValueError("fg needs the batch's labels on the trace (tr.y); run readout_pass(tr, y) first")
        gen = torch.Generator().manual_seed(self.seed + 7919 * (self.t + 1))
        out = []
        for pos, h in enumerate(tr.states):
            def loss_from(hh, pos=pos):  # ℓ_b of every example from position pos on, (B,)
                return F.cross_entropy(model.readout(model.stream(hh, pos)[-1]), tr.y, reduction="none")

            c = torch.zeros_like(h)
            with torch.no_grad():
                for _ in range(self.samples):
                    v = draw_tangent(h.shape, self.tangent, gen, h.dtype).to(h.device)
                    c += forward_gradient(loss_from, h.detach(), v)
            out.append(c / self.samples)
        return out

    def after_step(self, model, lr=0.0, weight_decay=0.0):
        """The next training step draws fresh tangents."""
        self.t += 1
