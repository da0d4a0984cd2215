"""Per-layer credit cosine ``cos(c_l, g_l)``: the field's standard cosine and our robust one."""

import torch
import torch.nn.functional as F

from ..verdicts import mean_std
from .base import Diagnostic, Snapshot, layer_headers, per_layer_rows, register, robust_cosine


def standard_cosines(credits: list[torch.Tensor], reference: list[torch.Tensor], batch_size: int,
                     eps: float) -> list[float]:
    """The field's per-layer cosine Γ_l (SPEC §3), computed exactly as the field does.

    Per example, ``F.cosine_similarity(c_{l,b}, g_{l,b}, eps)`` in fp32 on the flattened vectors, with
    both in the mean-loss convention of a probe batch of ``batch_size`` (per-example tensors ÷ B_p), then
    the mean over all probe examples (= the mean over equal-sized probe batches). PyTorch's floor
    ``max(‖a‖, ε)·max(‖b‖, ε)`` makes Γ collapse toward 0 once ‖g‖ nears ε: Mode 1, which D2 guards.
    Values are clamped to [−1, 1] (fp32 rounding can exceed 1 by ~1e-7).
    """
    out = []
    for c, g in zip(credits, reference, strict=True):
        a = (c.flatten(1) / batch_size).float()  # (N, D)
        b = (g.flatten(1) / batch_size).float()
        out.append(F.cosine_similarity(a, b, dim=1, eps=eps).clamp(-1.0, 1.0).mean().item())
    return out


def robust_aggregates(credits: list[torch.Tensor], reference: list[torch.Tensor]) -> dict:
    """Ours: per-layer fp64 cosine of the whole probe-set tensors (no floor), their mean, and the concat cosine."""
    per_layer = [robust_cosine(c, g) for c, g in zip(credits, reference, strict=True)]
    cat_c = torch.cat([c.flatten() for c in credits])
    cat_g = torch.cat([g.flatten() for g in reference])
    return {"per_layer": per_layer, "mean_per_layer": sum(per_layer) / len(per_layer),
            "concat": robust_cosine(cat_c, cat_g)}


@register
class CreditCosine(Diagnostic):
    """The standard pair's cosine: per-layer Γ_l and the headline mean over layers (Mode 2 shows per layer)."""

    name = "credit_cosine"
    order = 10

    def compute(self, snap: Snapshot) -> dict:
        """``per_layer`` Γ_l for l = 0..L and ``mean_per_layer`` (the headline Γ)."""
        per = standard_cosines(snap.credits, snap.reference, snap.batch_size, snap.eps)
        return {"per_layer": per, "mean_per_layer": sum(per) / len(per), "eps": snap.eps,
                "batch_size": snap.batch_size}

    @classmethod
    def summarise(cls, finals: list[dict], num_blocks: int) -> dict:
        """The standard pair's aggregate Γ and the per-layer Γ_l (mean ± std over seeds)."""
        cos = [cls.read(p) for p in finals]
        return {"standard_pair": {"aggregate_cosine_mean_per_layer": mean_std([c.get("mean_per_layer") for c in cos])},
                "per_layer_cosine": [mean_std([c.get("per_layer", [None] * (num_blocks + 1))[i] for c in cos])
                                     for i in range(num_blocks + 1)]}

    @classmethod
    def scalars(cls, values: dict) -> dict:
        """Each ``cosine/l{i}`` (Γ_l)."""
        return {f"cosine/l{i}": c for i, c in enumerate(values.get("per_layer") or [])}

    @classmethod
    def trajectory(cls, points: list[list[dict]], num_blocks: int) -> dict:
        """Per measured epoch, the seed-mean Γ_l of every layer."""
        return {"per_layer_cosine": [[mean_std([cls.read(a)["per_layer"][i] for a in at])["mean"]
                                      for i in range(num_blocks + 1)] for at in points]}

    @classmethod
    def section(cls, report: dict, table) -> tuple[str, str]:
        """The per-layer Γ_l table."""
        eps = (report.get("thresholds") or {}).get("eps", 1e-8)  # the floor this audit measured with (walk 26)
        return (f"Per-layer credit cosine Γ_l (standard: per-example, mean-loss reference, ε = {eps:g}, fp32), end of "
                "training", table(layer_headers(report), per_layer_rows(report, "per_layer_cosine")))


@register
class RobustCosine(Diagnostic):
    """Ours, beside the standard one: what the credit's direction really is when Γ has degenerated."""

    name = "robust_cosine"
    order = 20

    def compute(self, snap: Snapshot) -> dict:
        """``per_layer``, ``mean_per_layer`` and ``concat`` in fp64 without a floor."""
        return robust_aggregates(snap.credits, snap.reference)

    @classmethod
    def summarise(cls, finals: list[dict], num_blocks: int) -> dict:
        """Mean ± std over seeds of the per-layer mean, the concatenated cosine and each layer's."""
        rob, L1 = [cls.read(p) for p in finals], num_blocks + 1
        return {"robust_cosine": {"mean_per_layer": mean_std([c.get("mean_per_layer") for c in rob]),
                                  "concat": mean_std([c.get("concat") for c in rob]),
                                  "per_layer": [mean_std([c.get("per_layer", [None] * L1)[i] for c in rob])
                                                for i in range(L1)]}}

    @classmethod
    def section(cls, report: dict, table) -> tuple[str, str]:
        """The per-layer robust cosine table."""
        return ("Per-layer robust cosine (ours: fp64 over the whole probe set, no floor)",
                table(layer_headers(report), per_layer_rows(report, "robust_cosine", "per_layer")))
