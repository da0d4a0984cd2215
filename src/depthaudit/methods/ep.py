"""Equilibrium propagation, feed-forward variant (SPEC §2; one of the published audit's five methods).

Energy ``E = ½ Σ_l ‖h_l − h_{l-1} − f_l(h_{l-1})‖²`` over the stream states ``h_1..h_L`` (``h_0`` is clamped
to the embedding output). The free phase is the forward pass (E = 0 there). The nudged phase minimises
``E + β·Σ_b ℓ_b(readout(h_L), y)`` over ``h_1..h_L`` by ``T`` gradient-descent steps of size ``η`` from the
free states; the credit is ``c_l = −(h_l^nudged − h_l^free)/β`` (the sign aligns it with BP) for l = 1..L,
and ``c_0 = (∂E/∂h_0)/β`` at the nudged states (to first order ``(I + J_1)ᵀ c_1``, the chain rule's step
into the embedding). With the summed loss the credits are per example like BP's. Reference values:
β = 0.5, T = 20. The step size η is ours (SPEC gives none): 0.5, stable for the near-identity stream.

What the state credit converges to: at the nudged equilibrium the prediction errors
``r_l = h_l − h_{l-1} − f_l(h_{l-1})`` satisfy ``−r_l/β → ∂ℓ/∂h_l`` (BP's credit) as β → 0, while the state
displacement accumulates them up the stream, ``Δh_l = (I + J_l)Δh_{l-1} + r_l``. So the protocol's state
credit equals BP's only for L = 1; deeper, its direction stays close to BP's in a near-identity residual
stream but its norm grows with l (the recipe's per-block rms normalisation removes the norm). The option
``credit="error"`` (ours, ``--ep-credit error``) reads ``c_l = −r_l/β`` instead, which tends to BP's credit
exactly (both tested).
"""

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..models.base import ResidualModel
from ..recipe import Trace
from .base import METHODS, CreditMethod
from .options import Option

CREDITS = ("state", "error")


@METHODS.register("ep")
class EP(CreditMethod):
    """Feed-forward EP: ``T`` gradient steps on the states of ``E + β·ℓ``; ``c_l = −Δh_l/β``."""

    name = "ep"
    stackable = True  # the energy is a sum over examples (and stacked runs): each run relaxes on its own
    options = {"beta": Option(0.5, "nudging strength β", lo=0, lo_open=True, legacy="ep_beta"),
               "steps": Option(20, "nudged-phase steps T", lo=1, legacy="ep_steps"),
               "step_size": Option(0.5, "step size η of those steps (ours)", lo=0, lo_open=True, legacy="ep_step_size"),
               "credit": Option("state", "state = -Δh/β (protocol) | error = -r/β (ours)", choices=CREDITS,
                                legacy="ep_credit")}

    def __init__(self, model: ResidualModel, seed: int, beta: float = 0.5, steps: int = 20, step_size: float = 0.5,
                 credit: str = "state"):
        super().__init__(model, seed)
        self.beta, self.steps, self.step_size, self.credit = float(beta), int(steps), float(step_size), credit

    def _energy(self, model: ResidualModel, h0: torch.Tensor, hs: list[torch.Tensor], y: torch.Tensor):
        e, prev = 0.0, h0
        for blk, h in zip(model.blocks, hs, strict=True):
            e = e + 0.5 * (h - prev - blk(prev)).pow(2).sum()
            prev = h
        logits = model.readout(hs[-1])  # (B, C), or (R, B, C) for stacked runs: the sum spans every run
        return e, e + self.beta * F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="sum")

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """Free states from the trace; the nudged phase by autograd on the states only (no ``.grad`` touched)."""
        if tr.y is None:
            raise UsageError("method ep needs the batch labels on the trace (readout_pass sets them)")
        free = [h.detach() for h in tr.states]  # h_0..h_L, each (B, …)
        h0 = free[0]
        with torch.enable_grad():
            hs = [h.clone().requires_grad_() for h in free[1:]]
            for _ in range(self.steps):
                _, total = self._energy(model, h0, hs, tr.y)
                grads = torch.autograd.grad(total, hs)
                with torch.no_grad():
                    for h, g in zip(hs, grads, strict=True):
                        h.sub_(self.step_size * g)
            x0 = h0.clone().requires_grad_()
            energy, _ = self._energy(model, x0, [h.detach() for h in hs], tr.y)
            (g0,) = torch.autograd.grad(energy, x0)
        out = [g0 / self.beta]
        if self.credit == "state":  # the protocol's: −(h^nudged − h^free)/β
            out += [-(h.detach() - f) / self.beta for h, f in zip(hs, free[1:], strict=True)]
        else:  # ours: −r_l/β, the prediction errors at the nudged states
            with torch.no_grad():
                prev = h0
                for blk, h in zip(model.blocks, hs, strict=True):
                    out.append(-(h - prev - blk(prev)) / self.beta)
                    prev = h
        return out
