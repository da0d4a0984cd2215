"""The one-backward step: the recipe's update from one ordinary backward, for every credit-linear method.

Under the recipe (SPEC §2) block l's update is ``∇θ ⟨f_l(h_{l-1}), sg(c_l)⟩ / (B·rms(c_l))``: linear in its
credit ``c_l`` up to one scalar per block. So when a method's credit chain is a linear map applied to the
output error — BP (``Wᵀ``), FA and its relatives (a feedback matrix ``B`` in place of each ``Wᵀ``), stream-level
FA (one ``B_l`` per block) — one backward of the mean loss can carry the credit down the stream and every
block's exact local parameter gradient at once, scaled by ``1/(B·rms(g_l))``, ``g_l = c_l / B`` being the
gradient of the stream state after block l: BP rescales each group's gradients in place after the backward
(no Python node in it); the FA family rescales the cotangent entering each block inside it (:class:`Link`).

A method supplies only how the stream links up (:class:`Link`): the forward is the model's, ``h_l = h_{l-1} +
f_l(h_{l-1})``; the backward sends block l's output gradient into its parameters exactly, while the input
path is the method's (``h_{l-1}`` gets ``g + J̃ᵀ g``, or ``g B_lᵀ``). The readout's parameters always get the
exact mean-loss gradient; its input path is the method's too. :func:`step` is that step; :func:`fast_groups`
says when it applies (no penalty, no gradients already present, not a stacked step on a GPU), else the
method takes the generic path (``CreditMethod.step``). Equality with the generic path is tested in float64
(tests/test_onebackward.py, tests/test_methods.py).
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..recipe import as_penalty, rms

Vjp = Callable[[torch.Tensor], torch.Tensor]


class Link(torch.autograd.Function):
    """Forward ``h + f`` (or ``f`` alone: the readout); backward ``h`` gets ``vjp(g)`` (+ ``g``), ``f`` gets ``g``.

    ``f`` was computed from a detached copy of ``h``, so autograd's own input path (``Jᵀ g``) is never taken:
    the method's ``vjp`` replaces it. ``identity`` adds the residual path's ``g`` to ``h``'s gradient. With
    ``runs`` not None, ``f`` gets the recipe's cotangent ``g / (B·rms(g))`` instead (``g = c_l / B`` is the
    whole gradient of this stream state, so that is ``c_l / (B·rms(c_l))``; stacked runs, ``runs = R``: one rms
    per run): the block's parameters get the recipe's update straight from the backward, a (B, …, d) product
    instead of an in-place pass over their gradients afterwards.
    """

    @staticmethod
    def forward(ctx, h, f, vjp: Vjp, add: bool, identity: bool, runs: int | None):  # noqa: D102 (Function protocol)
        ctx.vjp, ctx.identity, ctx.runs = vjp, identity, runs
        return h + f if add else f.view_as(f)

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        gh = gf = None
        if ctx.needs_input_grad[0]:  # e.g. not for h_0 when the embedding is frozen: the VJP is skipped
            gh = ctx.vjp(g)
            if ctx.identity:
                gh = gh + g
        if ctx.needs_input_grad[1]:  # not for a frozen block
            gf = g if ctx.runs is None else g / (g.shape[1 if ctx.runs else 0] * rms(g, ctx.runs))
        return gh, gf, None, None, None, None


def link(h: torch.Tensor, f: torch.Tensor, vjp: Vjp, identity: bool = True, runs: int | None = None) -> torch.Tensor:
    """The stream state ``h + f`` whose backward sends ``vjp(g)`` (+ ``g`` with ``identity``) to ``h``.

    ``runs`` (0, or R for stacked runs): ``f`` gets the recipe's rescaled cotangent (see :class:`Link`).
    """
    return Link.apply(h, f, vjp, True, identity, runs)


def head(h: torch.Tensor, logits: torch.Tensor, vjp: Vjp) -> torch.Tensor:
    """``logits`` whose backward sends ``vjp(g)`` to ``h`` (the readout's feedback path)."""
    return Link.apply(h, logits, vjp, False, False, None)


def scaled(h0: torch.Tensor, runs: int) -> torch.Tensor:
    """``h_0`` whose backward hands the embedding ``g / (B·rms(g))`` (the recipe's update from ``c_0``)."""
    return Link.apply(None, h0, None, False, False, runs)


def fast_groups(method, model, x: torch.Tensor, scale_penalty,
                accumulates: bool = False) -> list[list[torch.Tensor]] | None:
    """The trainable parameters of embed, block 1..L (one list each, possibly empty), or None: take the generic path.

    The penalty needs the surrogate itself; a stacked step on a GPU is recorded as a CUDA graph and checked there
    against the generic path; parameters that already hold gradients would be rescaled too by an in-place
    rescale (``accumulates``: the step scales inside the backward, so they may).
    """
    runs = getattr(model, "runs", 0)
    if as_penalty(scale_penalty).lam > 0 or not method.fast or (runs and x.device.type != "cpu"):
        return None
    groups = [[p for p in mod.parameters() if p.requires_grad] for mod in (model.embed, *model.blocks)]
    if not accumulates and any(p.grad is not None for g in groups for p in g):
        return None
    return groups


def step(model, x: torch.Tensor, y: torch.Tensor, groups: list[list[torch.Tensor]],
         block: Callable | None = None, readout: Callable | None = None) -> torch.Tensor:
    """One forward and one backward of the mean loss, each trainable group's update the recipe's.

    ``block(i, blk, h) -> h_i`` builds the stream state after block ``i`` (1-based) from ``h = h_{i-1}``
    (default: the model's ``h + blk(h)``, BP); ``readout(h_L) -> logits`` (default: the model's readout).
    Without ``block`` (BP: no Python in the backward) each trainable group's gradients are rescaled in place
    after the backward; with it, ``block`` must return a :func:`link` with ``runs`` set (its block's cotangent
    is rescaled inside the backward) and the embedding's is rescaled by :func:`scaled`. Stacked runs
    (``model.runs = R``, every tensor (R, B, …)) use the sum of the runs' mean losses and one scale per run and
    group, (R,). Returns the mean loss (stacked: the (R,) per-run losses).
    """
    runs = getattr(model, "runs", 0)
    h = model.embed(x)  # (B, …, d), stacked (R, B, …, d): every stream state has this one shape
    if block is None:  # BP: the model's own walk; keep the state after each trainable group (h_0: the embedding)
        hs = model.stream(h)
        states = [s for s, ps in zip(hs, groups, strict=True) if ps]
        for s in states:
            s.retain_grad()
        h = hs[-1]
    else:
        states, h = [], scaled(h, runs) if groups[0] else h
        for i, blk in enumerate(model.blocks, start=1):
            h = block(i, blk, h)
    logits = model.readout(h) if readout is None else readout(h)
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
