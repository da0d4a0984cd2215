"""Stream norms and ρ (D1), and the norm of the BP reference in the standard cosine's convention (D2)."""

import math

from ..verdicts import mean_std
from .base import Diagnostic, Snapshot, median_norm, register


def _rho(norms: list[float]) -> tuple[list[float], float]:
    ratios = [b / a if a > 0 else float("inf") for a, b in zip(norms, norms[1:], strict=False)]
    if any(math.isnan(r) for r in ratios):  # a NaN norm (diverged): ρ is NaN, which D1 flags; max() would skip it
        return ratios, math.nan
    return ratios, (max(ratios) if ratios else 1.0)


@register
class StreamNorms(Diagnostic):
    """``‖h_l‖`` for l = 0..L, the ratios ``‖h_l‖/‖h_{l-1}‖`` and ρ = their max (D1).

    ``‖h_l‖`` is the **median** over probe examples of the per-example L2 norm (the reference's final form;
    ``stat="mean"`` is the option), on the audit view (ViT ``ref``: the cls token; else the whole state).
    Both statistics are stored, and for a token view the whole-state figures too, labelled.
    """

    name = "stream"
    order = 40
    checks = {"D1": "rho"}

    def __init__(self, every: int = 1, stat: str = "median"):
        super().__init__(every)
        self.stat = stat

    @classmethod
    def from_plan(cls, plan: dict) -> "StreamNorms":
        """Every ``plan['every']`` epochs in the plan's D1 statistic."""
        return cls(plan["every"], plan.get("d1_stat", "median"))

    def compute(self, snap: Snapshot) -> dict:
        """``norms``, ``ratios``, ``rho`` (in ``stat``), plus ``median``/``mean`` variants and ``full_state``."""
        views = [snap.view(h) for h in snap.states]  # each (N, D)
        med = [median_norm(v) for v in views]
        mean = [v.norm(dim=1).mean().item() for v in views]
        norms = med if self.stat == "median" else mean
        ratios, rho = _rho(norms)
        out = {"stat": self.stat, "view": snap.view_name, "norms": norms, "ratios": ratios, "rho": rho,
               "rho_median": _rho(med)[1], "rho_mean": _rho(mean)[1], "norms_median": med, "norms_mean": mean}
        if out["view"] != "full":
            full = [median_norm(h.flatten(1)) for h in snap.states]
            out["full_state"] = {"norms_median": full, "rho_median": _rho(full)[1]}
        return out

    @classmethod
    def summarise(cls, finals: list[dict], num_blocks: int) -> dict:
        """Mean ± std over seeds of each ‖h_l‖ (ρ is D1's, summarised with the checks)."""
        return {"stream_norms": [mean_std([cls.read(p).get("norms", [None] * (num_blocks + 1))[i] for p in finals])
                                 for i in range(num_blocks + 1)]}

    @classmethod
    def scalars(cls, values: dict) -> dict:
        """``audit/rho`` and each ``stream/norm_l{i}``."""
        norms = {f"stream/norm_l{i}": n for i, n in enumerate(values.get("norms") or [])}
        return {"audit/rho": values.get("rho"), **norms}

    @classmethod
    def trajectory(cls, points: list[list[dict]], num_blocks: int) -> dict:
        """Per measured epoch, the seed-mean ρ."""
        return {"rho": [mean_std([cls.read(a)["rho"] for a in at])["mean"] for at in points]}


@register
class ReferenceNorm(Diagnostic):
    """D2: per-example norm of the mean-loss BP reference ``g_l = ∂ℓ_mean/∂h_l`` on probe batches of B_p.

    ``norms[l]`` is the median over probe examples of ``‖g_{l,b}‖`` on the audit view — exactly the
    vectors the standard cosine's floor ε sees. It scales as 1/B_p, so ``batch_size`` is stored with it.
    ``whole_batch_sum`` keeps depthaudit 0.1's figure (ours): the norm of the per-example-sum reference over
    the whole probe set, ~B_p^1.5 larger, which is why D2 could not fire in that convention.
    """

    name = "reference"
    order = 50
    checks = {"D2": "g_L"}

    def compute(self, snap: Snapshot) -> dict:
        """``norms`` per layer, ``g_L`` (what D2 checks), ``batch_size`` and the 0.1 figure."""
        bp = snap.batch_size
        norms = [median_norm(snap.view(g)) / bp for g in snap.reference]
        out = {"norms": norms, "g_L": norms[-1], "batch_size": bp, "view": snap.view_name,
               "whole_batch_sum_g_L": snap.reference[-1].double().norm().item()}
        if out["view"] != "full":
            out["full_state_g_L"] = median_norm(snap.reference[-1].flatten(1)) / bp
        return out

    @classmethod
    def scalars(cls, values: dict) -> dict:
        """``audit/g_L`` (D2's quantity)."""
        return {"audit/g_L": values.get("g_L")}

    @classmethod
    def trajectory(cls, points: list[list[dict]], num_blocks: int) -> dict:
        """Per measured epoch, the seed-mean ‖g_L‖ (D2's quantity)."""
        return {"g_L": [mean_std([cls.read(a)["g_L"] for a in at])["mean"] for at in points]}
