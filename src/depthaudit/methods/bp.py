"""Backprop: ``c_l = ∂ℓ/∂h_l`` exactly — the positive control under the same recipe."""

import torch
import torch.nn.functional as F

from ..models.base import ResidualModel
from ..recipe import Trace, as_penalty, rms
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
    exact_credits = True
    stackable = True
    graphable = True
    fast = True

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """Exact credits (see :func:`bp_credits`)."""
        return bp_credits(tr)

    def step(self, model, x, y, scale_penalty=0.0):
        """One ordinary forward/backward whose gradients already are the recipe's updates.

        Around each trainable block, an identity with a custom backward rescales the gradient entering
        the block by ``s_l = 1/(B·rms(c_l))`` and the one leaving it by ``1/s_l``: the block's parameters
        get ``s_l · Σ_b J_lᵀ c_l`` (the recipe's update) while the credit passed down is exact. This
        costs two activation-sized products per block instead of a pass over every gradient. The
        penalty needs the surrogate itself, so it takes the generic path.
        """
        if as_penalty(scale_penalty).lam > 0 or not self.fast or getattr(model, "runs", 0):
            return super().step(model, x, y, scale_penalty)
        batch = x.shape[0]
        h = model.embed(x)
        if any(p.requires_grad for p in model.embed.parameters()):
            h = _Rescale.apply(h, {}, batch)
        for blk in model.blocks:
            if any(p.requires_grad for p in blk.parameters()):
                cell: dict = {}
                h = h + _Rescale.apply(blk(_Unscale.apply(h, cell)), cell, batch)
            else:
                h = h + blk(h)
        loss = F.cross_entropy(model.readout(h), y)  # mean loss: the readout's exact gradient
        loss.backward()
        return loss.detach()


class _Rescale(torch.autograd.Function):
    """Identity; backward multiplies the incoming credit by ``1/(B·rms)`` of its per-example version."""

    @staticmethod
    def forward(ctx, f, cell, batch):
        ctx.cell, ctx.batch = cell, batch
        return f.view_as(f)

    @staticmethod
    def backward(ctx, g):
        # g = ∂ℓ_mean/∂h_l = c_l/B, and the block then gets s·Jᵀg = s·Jᵀc_l/B; the recipe wants
        # Jᵀc_l/(B·rms(c_l)), so s = 1/rms(c_l) = 1/(B·rms(g))
        s = 1.0 / (ctx.batch * rms(g))
        ctx.cell["s"] = s
        return g * s, None, None


class _Unscale(torch.autograd.Function):
    """Identity; backward undoes the block's :class:`_Rescale` so the credit passed down is exact."""

    @staticmethod
    def forward(ctx, h, cell):
        ctx.cell = cell
        return h.view_as(h)

    @staticmethod
    def backward(ctx, g):
        return g / ctx.cell["s"], None
