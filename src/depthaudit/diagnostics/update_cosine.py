"""Per-block update cosine: the block's surrogate parameter gradient vs its exact BP gradient."""

import torch

from ..methods import BP
from .base import Diagnostic, Probe, cosine


class UpdateCosine(Diagnostic):
    """For block l: ``cos(∇θ⟨f_l, c_l⟩, ∇θ⟨f_l, g_l⟩)`` — the latter is exactly block l's BP gradient.

    The recipe's rms normalisation is a positive scalar, so it does not change the cosine. Frozen
    blocks report None.
    """

    name = "update_cosine"

    def compute(self, probe: Probe) -> dict:
        """``per_block``: list of L cosines (None for frozen blocks)."""
        tr = probe.trace  # block inputs are leaves, so each f_l reaches only its own block's params
        ref = probe.reference_param_grads
        live = [i for i, ps in enumerate(probe.block_params) if ps]
        out: list[float | None] = [None] * len(tr.outs)
        if not live:
            return {"per_block": out}
        if isinstance(probe.method, BP):
            mine = ref  # identical credits: identical updates, no second backward
        else:  # one backward for every block at once, cotangent = the method's credit
            params = [p for i in live for p in probe.block_params[i]]
            flat = torch.autograd.grad([tr.outs[i] for i in live], params,
                                       [probe.credits[i + 1].to(tr.outs[i].dtype) for i in live], retain_graph=True)
            mine, k = [[] for _ in tr.outs], 0
            for i in live:
                n = len(probe.block_params[i])
                mine[i], k = list(flat[k:k + n]), k + n
        for i in live:
            out[i] = cosine(torch.cat([t.flatten() for t in mine[i]]), torch.cat([t.flatten() for t in ref[i]]),
                            probe.eps)
        return {"per_block": out}
