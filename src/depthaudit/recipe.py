"""The training recipe shared by every credit method (SPEC §2).

One step: forward → readout trained on the exact loss → method credits ``c_0..c_L`` → each trainable
block gets the gradient of its rms-normalised local surrogate ``⟨f_l(h_{l-1}), sg(c_l/rms(c_l))⟩``
(batch mean), the embedding likewise from ``c_0``.

Conventions (documented in the README):
* a credit is per example: ``c_l = ∂(Σ_b ℓ_b)/∂h_l`` for BP, so its scale does not depend on batch size;
  ``e = softmax(logits) − onehot(y)`` is the per-example output error;
* ``rms(c)`` is one scalar over the whole batch credit tensor, floored at the dtype's ``tiny``;
* hence under BP a block's update is exactly ``∇_θ ℓ_mean · 1/rms(c_l)``.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .models.base import ResidualModel


@dataclass
class Trace:
    """One forward pass, cut at every block input so each block's graph reaches only its own params."""

    h0: torch.Tensor  # (B, …) embedding output, graph to embed params
    states: list[torch.Tensor]  # h_0..h_L detached, each (B, …)
    inputs: list[torch.Tensor]  # x_l (= h_{l-1}) per block, leaves (requiring grad if asked)
    outs: list[torch.Tensor]  # f_l(x_l), graph to block-l params (and x_l)
    caches: list | None  # per-block data for feedback VJPs
    hL: torch.Tensor  # readout input leaf (requires grad if asked)
    logits: torch.Tensor  # (B, C), graph to readout params (and hL)
    gL: torch.Tensor | None = None  # ∂(Σ_b ℓ_b)/∂h_L when hL requires grad (after the readout pass)
    y: torch.Tensor | None = None  # the batch's labels (set by the readout pass; methods that need ℓ read them)
    runs: int = 0  # R > 0: R independent runs stacked along a leading dim, every tensor (R, B, …) (see batched.py)


def trace_forward(model: ResidualModel, x: torch.Tensor, *, input_grad: bool = False,
                  cache: bool = False) -> Trace:
    """Forward ``x`` through ``model`` with the stream cut before every block."""
    h0 = model.embed(x)
    h = h0.detach()
    states, inputs, outs, caches = [h], [], [], [] if cache else None
    for blk in model.blocks:
        xin = h.detach().requires_grad_() if input_grad else h
        if cache:
            f, c = blk.forward_cached(xin)
            caches.append(c)
        else:
            f = blk(xin)
        inputs.append(xin)
        outs.append(f)
        h = h + f.detach()
        states.append(h)
    hL = h.detach().requires_grad_(input_grad)
    return Trace(h0, states, inputs, outs, caches, hL, model.readout(hL), runs=getattr(model, "runs", 0))


def readout_pass(tr: Trace, y: torch.Tensor, *, accumulate: bool = True) -> torch.Tensor:
    """Exact task-loss gradient into the readout's ``.grad`` (if ``accumulate``); returns the mean loss.

    Also fills ``tr.gL`` when ``tr.hL`` requires grad.
    """
    tr.y = y
    if tr.runs:  # the sum of R per-run mean losses: each run's parameters get exactly its own gradient
        per_run = F.cross_entropy(tr.logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)
        loss = per_run.sum()
    else:
        loss = F.cross_entropy(tr.logits, y)
    if accumulate:
        loss.backward()
        g = tr.hL.grad
    elif tr.hL.requires_grad:
        (g,) = torch.autograd.grad(loss, tr.hL)
    else:
        g = None
    if g is not None:
        tr.gL = g * y.shape[1 if tr.runs else 0]  # mean-loss gradient → per-example convention (× B)
    return per_run.detach() if tr.runs else loss.detach()


def output_error(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example ``e = ∂ℓ_b/∂logits_b = softmax − onehot``, (B, C)."""
    # softmax in at least fp32 (half-precision logits would round e)
    e = torch.softmax(logits.detach().to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    if y.dim() == 1:
        e[torch.arange(y.shape[0], device=y.device), y] -= 1.0
    else:  # stacked runs: (R, B) labels
        e.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(e[..., :1], -1.0))
    return e.to(logits.dtype)


def rms(c: torch.Tensor, runs: int = 0) -> torch.Tensor:
    """One scalar over the whole batch credit tensor, floored so a zero credit gives a zero update.

    With ``runs`` (stacked runs, ``c`` is (R, B, …)) one scalar per run, shaped (R, 1, …) to broadcast.
    """
    if runs:
        return c.pow(2).flatten(1).mean(1).sqrt().clamp_min(torch.finfo(c.dtype).tiny).view(-1, *[1] * (c.dim() - 1))
    return c.pow(2).mean().sqrt().clamp_min(torch.finfo(c.dtype).tiny)


PENALTY_FORMS = ("abs", "rel")
# how the penalty is reduced, relative to the recipe's surrogate ⟨f_l, ĉ_l⟩ averaged over the batch (SPEC leaves it
# unstated; the factor each applies to ``lam · mean_b term_b`` is in :func:`penalty_factor`)
PENALTY_REDUCTIONS = ("example", "element", "example-vs-sum", "element-vs-sum")


@dataclass(frozen=True)
class Penalty:
    """The scale penalty added to each block's local loss: ``lam · mean_b term_b``.

    ``form="abs"`` is the reference's ``‖f_l(h_{l-1})‖²`` (SPEC §2); ``"rel"`` is ours (depthaudit 0.1's),
    ``‖f_l(h_{l-1})‖² / ‖h_{l-1}‖²``. A plain float passed where a Penalty is expected means the ``abs`` form.
    ``reduction`` (SPEC leaves it open; :data:`PENALTY_REDUCTIONS`, :func:`penalty_factor`) scales the term.
    """

    lam: float = 0.0
    form: str = "abs"
    per_run: torch.Tensor | None = None  # stacked runs: (R,) λ of each run (then ``lam`` is their largest)
    reduction: str = "example"


def penalty_factor(reduction: str, batch: int, per_example: int) -> float:
    """The factor on ``lam · mean_b term_b`` (term_b = ``‖f_b‖²`` summed over the example's elements) per reduction.

    * ``example`` (depthaudit's default): the squared norm summed over each example's elements, averaged over
      the batch, beside the batch-*mean* surrogate: factor 1;
    * ``element``: ``(f**2).mean()`` over every element (batch and features): factor ``1/per_example``;
    * ``example-vs-sum`` / ``element-vs-sum``: the same penalty beside the reference's batch-*summed* surrogate
      ``(f_l · a_l).sum()``: relative to the surrogate the penalty is ``batch`` times weaker. Under the recipe's
      Adam(W) a common scale of a group's whole gradient cancels (up to Adam's ε), so this is applied as a
      factor ``1/batch`` on the penalty beside today's mean surrogate.
    """
    if reduction not in PENALTY_REDUCTIONS:
        raise ValueError(f"penalty reduction {reduction!r} not known; use one of {', '.join(PENALTY_REDUCTIONS)}")
    f = 1.0 / per_example if reduction.startswith("element") else 1.0
    return f / batch if reduction.endswith("-vs-sum") else f


def as_penalty(p) -> Penalty:
    """A :class:`Penalty` from a Penalty or a float λ (reference form)."""
    return p if isinstance(p, Penalty) else Penalty(float(p or 0.0))


def scale_penalty_terms(f: torch.Tensor, x: torch.Tensor, form: str = "rel") -> torch.Tensor:
    """Per-example ``‖f_l(h_{l-1})‖²`` (abs) or ``‖f_l(h_{l-1})‖² / ‖h_{l-1}‖²`` (rel), (B,); ``x`` is a constant."""
    sq = f.flatten(1).pow(2).sum(1)
    if form == "abs":
        return sq
    x = x.detach().flatten(1)
    return sq / x.pow(2).sum(1).clamp_min(torch.finfo(x.dtype).tiny)


def local_update(model: ResidualModel, tr: Trace, credits: list[torch.Tensor], scale_penalty=0.0) -> None:
    """Accumulate every trainable block's and the embedding's recipe gradient, in one backward call.

    ``scale_penalty`` is a :class:`Penalty` (or a float λ in the reference form).
    """
    pen = as_penalty(scale_penalty)
    runs = tr.runs
    batch = tr.states[0].shape[1 if runs else 0]
    outs, cots, params = [], [], []
    for blk, f, xin, c in zip(model.blocks, tr.outs, tr.inputs, credits[1:], strict=True):
        ps = [p for p in blk.parameters() if p.requires_grad]
        if not ps:
            continue  # frozen block
        chat = c / rms(c, runs)
        if pen.lam > 0:  # stacked runs: the sum of the runs' losses, each a batch mean
            k = penalty_factor(pen.reduction, batch, f[0, 0].numel() if runs else f[0].numel())
            if runs:  # Σ_r λ_r · (run r's batch mean): each run gets exactly its own penalty gradient
                terms = scale_penalty_terms(f.flatten(0, 1), xin.flatten(0, 1), pen.form).view(runs, -1)  # (R, B)
                lam = pen.per_run if pen.per_run is not None else pen.lam
                pen_term = k * (lam * terms.mean(1)).sum()
            else:
                pen_term = k * pen.lam * scale_penalty_terms(f, xin, pen.form).mean()
            loss = (f * chat).sum() / batch + pen_term
            outs.append(loss)
            cots.append(torch.ones_like(loss))
        else:
            outs.append(f)
            cots.append(chat / batch)
        params += ps
    eps = [p for p in model.embed.parameters() if p.requires_grad]
    if eps:
        outs.append(tr.h0)
        cots.append(credits[0] / rms(credits[0], runs) / batch)
        params += eps
    if outs:
        torch.autograd.backward(outs, cots, inputs=params)
