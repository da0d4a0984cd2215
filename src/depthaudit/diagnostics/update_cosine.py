"""Per-block update cosine: the block's surrogate parameter gradient vs its exact BP gradient."""

import torch

from ..recipe import trace_forward
from .base import Diagnostic, Probe, cosine


class UpdateCosine(Diagnostic):
    """For block l: ``cos(∇θ⟨f_l, c_l⟩, ∇θ⟨f_l, g_l⟩)`` — the latter is exactly block l's BP gradient.

    The recipe's rms normalisation is a positive scalar, so it does not change the cosine. Frozen
    blocks report None.
    """

    name = "update_cosine"

    def compute(self, probe: Probe) -> dict:
        """``per_block``: list of L cosines (None for frozen blocks)."""
        tr = trace_forward(probe.model, probe.x)
        out = []
        for blk, f, c, g in zip(probe.model.blocks, tr.outs, probe.credits[1:], probe.reference[1:], strict=True):
            ps = [p for p in blk.parameters() if p.requires_grad]
            if not ps:
                out.append(None)
                continue
            gm = torch.autograd.grad(f, ps, c.to(f.dtype), retain_graph=True)
            gb = torch.autograd.grad(f, ps, g.to(f.dtype), retain_graph=True)
            out.append(cosine(torch.cat([t.flatten() for t in gm]), torch.cat([t.flatten() for t in gb]),
                              probe.eps))
        return {"per_block": out}
