"""Scheduled diagnostics on a fixed probe batch (Cockpit style: one quantity per file, tiny base class).

Data flows one way: a :class:`Probe` computes stream states, the method's credits and the exact BP
reference once per measurement; each :class:`Diagnostic` only reads them. Results are moved to the
CPU (as Python floats) only when stored.
"""

from functools import cached_property
from typing import ClassVar

import torch

from ..methods import BP
from ..methods.base import CreditMethod
from ..methods.bp import bp_credits
from ..models.base import ResidualModel
from ..recipe import Trace, output_error, readout_pass, trace_forward

EPS = 1e-8  # the cosine's denominator floor (fp32)


class Probe:
    """One measurement point: lazily computed, shared by every diagnostic at that point."""

    def __init__(self, model: ResidualModel, method: CreditMethod, x: torch.Tensor, y: torch.Tensor,
                 eps: float = EPS):
        self.model, self.method, self.x, self.y, self.eps = model, method, x, y, eps

    @cached_property
    def trace(self) -> Trace:
        """One forward serves the method's credits, the BP reference and the update cosines."""
        tr = trace_forward(self.model, self.x, input_grad=True, cache=self.method.needs_cache)
        readout_pass(tr, self.y, accumulate=False)  # fills tr.gL; touches no .grad
        return tr

    @cached_property
    def error(self) -> torch.Tensor:
        """Per-example output error ``e`` (B, C)."""
        return output_error(self.trace.logits, self.y)

    @property
    def states(self) -> list[torch.Tensor]:
        """``h_0..h_L`` on the probe batch, fp32, each (B, …)."""
        return [h.float() for h in self.trace.states]

    @cached_property
    def credits(self) -> list[torch.Tensor]:
        """The method's ``c_0..c_L``, fp32."""
        if isinstance(self.method, BP):
            return self.reference
        return [c.detach().float() for c in self.method.credits(self.model, self.trace, self.error)]

    @cached_property
    def block_params(self) -> list[list[torch.Tensor]]:
        """Each block's trainable parameters (empty for a frozen block)."""
        return [[p for p in blk.parameters() if p.requires_grad] for blk in self.model.blocks]

    @cached_property
    def _reference(self):
        refs, grads = bp_credits(self.trace, self.block_params)
        return [g.detach().float() for g in refs], grads

    @property
    def reference(self) -> list[torch.Tensor]:
        """Exact BP ``g_l = ∂(Σ_b ℓ_b)/∂h_l`` on the same batch and parameters, fp32."""
        return self._reference[0]

    @property
    def reference_param_grads(self) -> list[list[torch.Tensor]]:
        """Per block, ``∇θ⟨f_l, g_l⟩`` (block l's exact BP gradient), from the reference's own backward."""
        return self._reference[1]


class Diagnostic:
    """A quantity measured on a :class:`Probe`; ``schedule(epoch)`` says when (epoch 0 = init)."""

    name: ClassVar[str] = ""

    def __init__(self, every: int = 1):
        self.every = every

    def schedule(self, epoch: int) -> bool:
        """Measure at epochs divisible by ``every`` (the final epoch is always measured by the tracker)."""
        return self.every > 0 and epoch % self.every == 0

    def compute(self, probe: Probe) -> dict:
        """Return JSON-able values."""
        raise NotImplementedError


def cosine(a: torch.Tensor, b: torch.Tensor, eps: float = EPS) -> float:
    """``⟨a, b⟩ / (max(‖a‖, ε) · max(‖b‖, ε))`` over the flattened tensors, in fp32.

    The floor is applied to each norm separately (as ``torch.nn.functional.cosine_similarity`` does),
    so a reference whose norm is below ε yields a deflated, floor-dominated value — what D2 guards.
    """
    a, b = a.float().flatten(), b.float().flatten()
    return (a @ b / (a.norm().clamp_min(eps) * b.norm().clamp_min(eps))).item()


class Tracker:
    """Runs scheduled diagnostics on a fixed probe batch; called by the training loop."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, diagnostics: list[Diagnostic], eps: float = EPS):
        self.x, self.y, self.diagnostics, self.eps = x, y, diagnostics, eps

    def __call__(self, epoch: int, model: ResidualModel, method: CreditMethod, final: bool = False):
        """Measurements due at ``epoch`` as ``{diagnostic name: values}``, or None when none is due."""
        due = [d for d in self.diagnostics if final or d.schedule(epoch)]
        if not due:
            return None
        probe = Probe(model, method, self.x, self.y, self.eps)
        return {d.name: d.compute(probe) for d in due}
