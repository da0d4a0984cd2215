"""Per-layer weight alignment ∠(W, Bᵀ) and norm ratio ‖B‖/‖W‖ (biotorch's layer measures), for per-weight feedback.

A method with per-weight feedback (FA and its relatives: fa, usf, frsf, brsf, kp, wm, pfa) exposes
``feedback_for(prefix, module)``: the matrix it uses in place of each ``Wᵀ``, stored in ``W``'s shape (so it
*is* ``Bᵀ`` in the papers' notation). For each block and the readout this diagnostic reports the angle in
degrees between ``W`` and that matrix (biotorch's ``compute_matrix_angle``: the flattened tensors, fp64) and
the Frobenius norm ratio ``‖B‖/‖W‖``; per block, over all its feedback weights concatenated, and per weight.
Methods without per-weight feedback (bp, dfa, drtp, fa-stream, fg, …) report nothing. Laws: angle 0 and ratio 1
when ``B = Wᵀ`` (fa with its feedback set to the weights; kp with ``D = 0``).
"""

import math

import torch

from ..verdicts import fmt_ms, mean_std
from .base import Diagnostic, Snapshot, register


def angle_deg(w: torch.Tensor, b: torch.Tensor) -> float:
    """Degrees between the flattened ``w`` and ``b`` in fp64 (cosine clipped to [−1, 1]; NaN if either is 0)."""
    w, b = w.detach().double().flatten(), b.detach().double().flatten()
    den = (w.norm() * b.norm()).item()
    if den == 0 or not math.isfinite(den):
        return math.nan
    return math.degrees(math.acos(max(-1.0, min(1.0, (w @ b).item() / den))))


def norm_ratio(w: torch.Tensor, b: torch.Tensor) -> float:
    """``‖b‖_F / ‖w‖_F`` (NaN for a zero ``w``)."""
    wn = w.detach().double().norm().item()
    return b.detach().double().norm().item() / wn if wn > 0 else math.nan


@register
class WeightAlignment(Diagnostic):
    """``angle`` ∠(W, Bᵀ) in degrees and ``ratio`` ‖B‖/‖W‖ per block (and readout, and each weight)."""

    name = "weight_alignment"
    order = 95
    needs_method = True  # reads the method's feedback

    def compute(self, snap: Snapshot) -> dict:
        """``per_block`` and ``readout`` ``{"angle", "ratio"}``, ``per_weight`` by key; ``{}`` without feedback."""
        method, model = snap.method, snap.model
        if not hasattr(method, "feedback_for"):
            return {}
        parts = [(f"block{i}", blk) for i, blk in enumerate(model.blocks, start=1)] + [("readout", model.readout)]
        per_weight, whole = {}, {}
        for prefix, mod in parts:
            ws, fb = mod.feedback_weights(), method.feedback_for(prefix, mod)
            for k, w in ws.items():
                per_weight[f"{prefix}.{k}"] = {"angle": angle_deg(w, fb[k]), "ratio": norm_ratio(w, fb[k])}
            cat_w = torch.cat([w.detach().flatten() for w in ws.values()])
            cat_b = torch.cat([fb[k].detach().flatten() for k in ws])
            whole[prefix] = {"angle": angle_deg(cat_w, cat_b), "ratio": norm_ratio(cat_w, cat_b)}
        return {"per_block": [whole[f"block{i}"] for i in range(1, len(model.blocks) + 1)],
                "readout": whole["readout"], "per_weight": per_weight}

    @classmethod
    def summarise(cls, finals: list[dict], num_blocks: int) -> dict:
        """Mean ± std over seeds of each block's angle and ratio (absent for methods without per-weight feedback)."""
        vals = [cls.read(p) for p in finals]
        if not vals or not all(v.get("per_block") for v in vals):
            return {}
        return {"weight_alignment": {
            key: [mean_std([v["per_block"][i][key] for v in vals]) for i in range(num_blocks)]
            + [mean_std([v["readout"][key] for v in vals])] for key in ("angle", "ratio")}}

    @classmethod
    def scalars(cls, values: dict) -> dict:
        """``weight_angle/block{i}`` and ``weight_ratio/block{i}``."""
        out = {}
        for i, v in enumerate(values.get("per_block") or [], start=1):
            out[f"weight_angle/block{i}"], out[f"weight_ratio/block{i}"] = v["angle"], v["ratio"]
        return out

    @classmethod
    def section(cls, report: dict, table) -> tuple[str, str] | None:
        """One row per method with per-weight feedback: each block's ∠(W, Bᵀ) and ‖B‖/‖W‖."""
        rows = [[m["method"], *(f"{fmt_ms(a, '.1f')}° / {fmt_ms(r, '.2f')}" for a, r in zip(
            m["weight_alignment"]["angle"], m["weight_alignment"]["ratio"], strict=True))]
                for m in report["methods"] if m.get("weight_alignment")]
        if not rows:
            return None
        L = report["config"]["base"]["num_blocks"]
        return ("Weight alignment ∠(W, Bᵀ) / norm ratio ‖B‖/‖W‖ per block (biotorch's measures), end of training",
                table(["method", *(f"block {i}" for i in range(1, L + 1)), "readout"], rows))
