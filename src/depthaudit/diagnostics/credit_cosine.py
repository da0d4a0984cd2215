"""Per-layer credit cosine ``cos(c_l, g_l)``: the field's standard cosine and our robust one."""

import torch
import torch.nn.functional as F

from .base import Diagnostic, Probe, robust_cosine


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


class CreditCosine(Diagnostic):
    """The standard pair's cosine: per-layer Γ_l and the headline mean over layers (Mode 2 shows per layer)."""

    name = "credit_cosine"

    def compute(self, probe: Probe) -> dict:
        """``per_layer`` Γ_l for l = 0..L and ``mean_per_layer`` (the headline Γ)."""
        per = standard_cosines(probe.credits, probe.reference, probe.batch_size, probe.eps)
        return {"per_layer": per, "mean_per_layer": sum(per) / len(per), "eps": probe.eps,
                "batch_size": probe.batch_size}


class RobustCosine(Diagnostic):
    """Ours, beside the standard one: what the credit's direction really is when Γ has degenerated."""

    name = "robust_cosine"

    def compute(self, probe: Probe) -> dict:
        """``per_layer``, ``mean_per_layer`` and ``concat`` in fp64 without a floor."""
        return robust_aggregates(probe.credits, probe.reference)
