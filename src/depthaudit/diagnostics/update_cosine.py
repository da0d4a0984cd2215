"""Per-block update cosine (ours): the block's surrogate parameter gradient vs its exact BP gradient."""

import torch

from ..verdicts import mean_std
from .base import Diagnostic, Snapshot, per_layer_rows, register, robust_cosine


@register
class UpdateCosine(Diagnostic):
    """For block l: ``cos(∇θ⟨f_l, c_l⟩, ∇θ⟨f_l, g_l⟩)`` over the probe set; the latter is block l's BP gradient.

    The recipe's rms normalisation is a positive scalar, so it does not change the cosine. Computed in
    fp64 without a floor (a robust cosine). Frozen blocks report None.
    """

    name = "update_cosine"
    order = 30
    needs_method = True  # the method's backward through its traces (the evaluator measures its own for a capture)

    def compute(self, snap: Snapshot) -> dict:
        """``per_block``: list of L cosines (None for frozen blocks)."""
        ref = snap.reference_param_grads
        live = [i for i, ps in enumerate(snap.block_params) if ps]
        out: list[float | None] = [None] * len(snap.model.blocks)
        if not live:
            return {"per_block": out}
        if snap.method.exact_credits:
            mine = ref  # identical credits: identical updates, no second backward
        else:  # per probe batch, one backward for every block at once, cotangent = the method's credit
            params = [p for i in live for p in snap.block_params[i]]
            total, start = None, 0
            for tr in snap.traces:
                n = tr.states[0].shape[0]
                cots = [snap.credits[i + 1][start:start + n].to(tr.outs[i].dtype) for i in live]
                flat = torch.autograd.grad([tr.outs[i] for i in live], params, cots, retain_graph=True,
                                           allow_unused=True)  # (a parameter the block never uses: zero, as in
                flat = [torch.zeros_like(p) if g is None else g for p, g in zip(params, flat, strict=True)]  # bp)
                total = list(flat) if total is None else [a + b for a, b in zip(total, flat, strict=True)]
                start += n
            mine, k = [[] for _ in out], 0
            for i in live:
                m = len(snap.block_params[i])
                mine[i], k = total[k:k + m], k + m
        for i in live:
            out[i] = robust_cosine(torch.cat([t.flatten() for t in mine[i]]), torch.cat([t.flatten() for t in ref[i]]))
        return {"per_block": out}

    @classmethod
    def summarise(cls, finals: list[dict], num_blocks: int) -> dict:
        """Mean ± std over seeds of each block's update cosine."""
        upd = [cls.read(p).get("per_block", [None] * num_blocks) for p in finals]
        return {"update_cosine": [mean_std([u[i] for u in upd]) for i in range(num_blocks)]}

    @classmethod
    def section(cls, report: dict, table) -> tuple[str, str]:
        """The per-block update cosine table."""
        L = report["config"]["base"]["num_blocks"]
        return ("Per-block update cosine (ours, robust: block's surrogate gradient vs its BP gradient)",
                table(["method", *(f"block {i + 1}" for i in range(L))], per_layer_rows(report, "update_cosine")))
