"""Per-block update cosine (ours): the block's surrogate parameter gradient vs its exact BP gradient."""

import torch

from .base import Diagnostic, Probe, robust_cosine


class UpdateCosine(Diagnostic):
    """For block l: ``cos(∇θ⟨f_l, c_l⟩, ∇θ⟨f_l, g_l⟩)`` over the probe set; the latter is block l's BP gradient.

    The recipe's rms normalisation is a positive scalar, so it does not change the cosine. Computed in
    fp64 without a floor (a robust cosine). Frozen blocks report None.
    """

    name = "update_cosine"

    def compute(self, probe: Probe) -> dict:
        """``per_block``: list of L cosines (None for frozen blocks)."""
        ref = probe.reference_param_grads
        live = [i for i, ps in enumerate(probe.block_params) if ps]
        out: list[float | None] = [None] * len(probe.model.blocks)
        if not live:
            return {"per_block": out}
        if probe.method.exact_credits:
            mine = ref  # identical credits: identical updates, no second backward
        else:  # per probe batch, one backward for every block at once, cotangent = the method's credit
            params = [p for i in live for p in probe.block_params[i]]
            total, start = None, 0
            for tr in probe.traces:
                n = tr.states[0].shape[0]
                cots = [probe.credits[i + 1][start:start + n].to(tr.outs[i].dtype) for i in live]
                flat = torch.autograd.grad([tr.outs[i] for i in live], params, cots, retain_graph=True)
                total = list(flat) if total is None else [a + b for a, b in zip(total, flat, strict=True)]
                start += n
            mine, k = [[] for _ in out], 0
            for i in live:
                m = len(probe.block_params[i])
                mine[i], k = total[k:k + m], k + m
        for i in live:
            out[i] = robust_cosine(torch.cat([t.flatten() for t in mine[i]]), torch.cat([t.flatten() for t in ref[i]]))
        return {"per_block": out}
