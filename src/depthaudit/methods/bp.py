"""Backprop: ``c_l = ∂ℓ/∂h_l`` exactly — the positive control under the same recipe."""

import torch
import torch.nn.functional as F

from ..models.base import ResidualModel
from ..recipe import Trace, rms
from .base import METHODS, CreditMethod


def bp_credits(tr: Trace, block_params: list[list[torch.Tensor]] | None = None):
    """Exact ``c_l``: from ``tr.gL``, chain ``c_{l-1} = c_l + J_lᵀ c_l`` down the stream with autograd.

    ``tr`` must come from ``trace_forward(..., input_grad=True)`` followed by ``readout_pass``. With
    ``block_params`` (one list per block, possibly empty) the same backward calls also return each
    block's parameter gradient ``∇θ⟨f_l, c_l⟩``: ``(credits, grads)``.
    """
    c = tr.gL
    out, grads = [c], []
    for i in range(len(tr.outs) - 1, -1, -1):
        ps = block_params[i] if block_params is not None else []
        vjp, *gp = torch.autograd.grad(tr.outs[i], [tr.inputs[i], *ps], c, retain_graph=True)
        grads.append(gp)
        c = c + vjp
        out.append(c)
    return (out[::-1], grads[::-1]) if block_params is not None else out[::-1]


@METHODS.register("bp")
class BP(CreditMethod):
    """Exact credits. ``step`` takes a one-backward fast path that is exactly the recipe (tested)."""

    name = "bp"
    needs_input_grad = True
    fast = True

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """Exact credits (see :func:`bp_credits`)."""
        return bp_credits(tr)

    def step(self, model, x, y, scale_penalty=0.0):
        """One ordinary forward/backward, then rescale each group's gradient to the recipe's.

        The summed loss's backward leaves ``Σ_b J_lᵀ c_l`` in block l's ``.grad`` and ``c_l`` in
        ``h_l.grad``; the recipe's update is that times ``1/(B·rms(c_l))``, and the readout's is the
        mean-loss gradient (×1/B). The penalty needs the surrogate itself, so it takes the generic path.
        """
        if scale_penalty > 0 or not self.fast:
            return super().step(model, x, y, scale_penalty)
        batch = x.shape[0]
        logits, states = model(x, return_states=True)
        for h in states:
            h.retain_grad()
        loss_sum = F.cross_entropy(logits, y, reduction="sum")
        loss_sum.backward()
        modules = [model.embed, *model.blocks]
        for mod, h in zip(modules, states, strict=True):
            ps = [p for p in mod.parameters() if p.grad is not None]
            if ps:
                torch._foreach_mul_([p.grad for p in ps], 1.0 / (batch * rms(h.grad)))
        ps = [p for p in model.readout.parameters() if p.grad is not None]
        torch._foreach_mul_([p.grad for p in ps], 1.0 / batch)
        return loss_sum.detach() / batch
