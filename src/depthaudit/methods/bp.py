"""Backprop: ``c_l = ∂ℓ/∂h_l`` exactly — the positive control under the same recipe."""

import math

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
        """One ordinary forward/backward, then each trainable group's gradients rescaled in place.

        The mean loss's backward gives block l's parameters ``Σ_b J_lᵀ c_l / B`` and leaves the exact
        ``g_l = c_l / B`` on the stream state after block l (kept with ``retain_grad``); multiplying that
        block's gradients by ``s_l = 1/(B·rms(g_l)) = 1/rms(c_l)`` gives the recipe's update, and the credit
        passed down was exact all along. The embedding is scaled by ``h_0``'s credit the same way; the
        readout keeps the exact mean-loss gradient. One backward, one ``_foreach_norm`` and one
        ``_foreach_mul_``: no Python in the backward (``benchmarks/bench_engine.py``).

        Stacked runs on the CPU (``model.runs = R``, every tensor (R, B, …)) take the same path with the sum of
        the runs' mean losses and one scale per run and group, (R,): a slice of a run that does not train the
        group gets a gradient too, which the stacked optimizer never applies. On a GPU stacked steps take the
        generic path (they are recorded as CUDA graphs, checked there bit for bit against that path). The
        penalty needs the surrogate itself, so it takes the generic path, as does a call whose parameters
        already hold gradients (an in-place rescale would scale those too).
        """
        runs = getattr(model, "runs", 0)
        if as_penalty(scale_penalty).lam > 0 or not self.fast or (runs and x.device.type != "cpu"):
            return super().step(model, x, y, scale_penalty)
        groups = [[p for p in mod.parameters() if p.requires_grad] for mod in (model.embed, *model.blocks)]
        if any(p.grad is not None for g in groups for p in g):
            return super().step(model, x, y, scale_penalty)
        states = []  # the stream state after each trainable group: h_0 for the embedding, h_l for block l
        h = model.embed(x)  # (B, …, d), stacked (R, B, …, d): every stream state has this one shape
        if groups[0]:
            h.retain_grad()
            states.append(h)
        for blk, ps in zip(model.blocks, groups[1:], strict=True):
            h = h + blk(h)
            if ps:
                h.retain_grad()
                states.append(h)
        logits = model.readout(h)
        if runs:  # the sum of the runs' mean losses: each run's parameters get exactly their own gradient
            per_run = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)
            loss = per_run.sum()
        else:
            loss = F.cross_entropy(logits, y)  # mean loss: the readout's exact gradient
        loss.backward()
        groups = [g for g in groups if g]
        if states:
            batch = x.shape[1 if runs else 0]
            if runs:  # (n_groups, R): recipe.rms of each run's slice of each state's gradient
                rms_g = torch.stack([rms(st.grad, runs).flatten() for st in states])
            else:  # rms(g_l) = ‖g_l‖ / √numel, floored like recipe.rms so a zero credit gives a zero update
                norms = torch.stack(torch._foreach_norm([st.grad for st in states]))
                rms_g = (norms / math.sqrt(states[0].numel())).clamp_min(torch.finfo(norms.dtype).tiny)
            scales = (1.0 / (batch * rms_g)).unbind()
            pairs = [(p.grad, s.view(-1, *[1] * (p.dim() - 1)) if runs else s)
                     for s, g in zip(scales, groups, strict=True) for p in g if p.grad is not None]
            torch._foreach_mul_([g for g, _ in pairs], [s for _, s in pairs])
        return per_run.detach() if runs else loss.detach()
