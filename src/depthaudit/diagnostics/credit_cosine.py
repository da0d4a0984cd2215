"""Per-layer credit cosine ``cos(c_l, g_l)`` and the two aggregates the field reports."""

import torch

from .base import Diagnostic, Probe, cosine


def aggregate_cosines(credits: list[torch.Tensor], reference: list[torch.Tensor], eps: float) -> dict:
    """Per-layer cosines, their mean, and the cosine of the concatenated vectors."""
    per_layer = [cosine(c, g, eps) for c, g in zip(credits, reference, strict=True)]
    cat_c = torch.cat([c.flatten() for c in credits])
    cat_g = torch.cat([g.flatten() for g in reference])
    return {"per_layer": per_layer, "mean_per_layer": sum(per_layer) / len(per_layer),
            "concat": cosine(cat_c, cat_g, eps)}


class CreditCosine(Diagnostic):
    """``cos(c_l, g_l)`` for l = 0..L over the whole probe batch, plus aggregates (Mode 2 shows here)."""

    name = "credit_cosine"

    def compute(self, probe: Probe) -> dict:
        """Per-layer list, ``mean_per_layer`` and ``concat``."""
        return aggregate_cosines(probe.credits, probe.reference, probe.eps)
