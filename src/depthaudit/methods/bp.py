"""Backprop: ``c_l = ∂ℓ/∂h_l`` exactly — the positive control under the same recipe."""

import torch

from ..models.base import ResidualModel
from ..recipe import Trace
from . import onebackward
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
        vjp, *gp = torch.autograd.grad(tr.outs[i], [tr.inputs[i], *ps], c, retain_graph=True, allow_unused=True)
        grads.append([torch.zeros_like(p) if g is None else g for p, g in zip(ps, gp, strict=True)])  # a block's
        # parameter its forward never uses gets no gradient: zero, as .grad would read (walk 30 W7: a traceback)
        vjp = torch.zeros_like(tr.inputs[i]) if vjp is None else vjp
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
        already hold gradients (an in-place rescale would scale those too). The step itself is
        :func:`depthaudit.methods.onebackward.step`, which FA, its relatives and stream-level FA share.
        """
        groups = onebackward.fast_groups(self, model, x, scale_penalty)
        if groups is None:
            return super().step(model, x, y, scale_penalty)
        return onebackward.step(model, x, y, groups)
