"""The distribution of the per-example credit cosine per layer (TinyDFA's view), not only its mean Γ_l.

Per layer l, the per-example cosines are exactly the standard cosine's (``F.cosine_similarity(c_{l,b}, g_{l,b},
ε)`` in fp32, mean-loss convention; :func:`~depthaudit.diagnostics.credit_cosine.standard_cosines`), so their
mean *is* the card's Γ_l (the law the tests check). Stored: the mean, the 5/25/50/75/95th percentiles and a
20-bin histogram on [−1, 1] per layer; the audit draws one panel per layer (every method's seed-pooled
histogram), ``per_sample_cosine.png``.
"""

# imports inside functions: matplotlib is imported only when the figure is drawn (import cost)
import torch
import torch.nn.functional as F

from ..io import save_figure
from ..verdicts import fmt_ms, mean_std
from .base import Diagnostic, Snapshot, register

PERCENTILES = (5, 25, 50, 75, 95)
BINS = 20  # on [−1, 1]


def per_example_cosines(credit: torch.Tensor, reference: torch.Tensor, batch_size: int, eps: float) -> torch.Tensor:
    """(N,) per-example standard cosines of one layer, exactly as Γ_l's (fp32, mean-loss convention, clamped)."""
    a = (credit.flatten(1) / batch_size).float()
    b = (reference.flatten(1) / batch_size).float()
    return F.cosine_similarity(a, b, dim=1, eps=eps).clamp(-1.0, 1.0)


@register
class PerSampleCosine(Diagnostic):
    """Per layer: mean, percentiles and histogram of the per-example standard cosine."""

    name = "per_sample_cosine"
    order = 90

    def compute(self, snap: Snapshot) -> dict:
        """``per_layer``: ``{"mean", "p5", …, "p95", "hist"}`` for l = 0..L."""
        out = []
        for c, g in zip(snap.credits, snap.reference, strict=True):
            cos = per_example_cosines(c, g, snap.batch_size, snap.eps)
            q = torch.quantile(cos.double(), torch.tensor([p / 100 for p in PERCENTILES], dtype=torch.float64))
            hist = torch.histc(cos.double(), bins=BINS, min=-1.0, max=1.0)
            out.append({"mean": cos.mean().item(), **{f"p{p}": v for p, v in zip(PERCENTILES, q.tolist(),
                                                                                    strict=True)},
                        "hist": [int(h) for h in hist.tolist()]})
        return {"per_layer": out, "bins": BINS}

    @classmethod
    def summarise(cls, finals: list[dict], num_blocks: int) -> dict:
        """Per layer: each percentile's mean ± std over seeds and the seeds' pooled histogram."""
        vals = [cls.read(p).get("per_layer") for p in finals]
        if not vals or not all(vals):
            return {}
        keys = [f"p{p}" for p in PERCENTILES]
        return {"per_sample_cosine": [
            {**{k: mean_std([v[i][k] for v in vals]) for k in keys},
             "hist": [sum(v[i]["hist"][j] for v in vals) for j in range(BINS)]} for i in range(num_blocks + 1)]}

    @classmethod
    def section(cls, report: dict, table) -> tuple[str, str] | None:
        """Per method and layer: the median and the 5–95 % range of the per-example cosine."""
        rows = []
        for m in report["methods"]:
            for i, d in enumerate(m.get("per_sample_cosine") or []):
                rows.append([m["method"], f"l={i}", *(_f(d[f"p{p}"]) for p in PERCENTILES)])
        if not rows:
            return None
        return ("Per-example credit cosine per layer (percentiles over probe examples; mean = Γ_l), end of training",
                table(["method", "layer", *(f"p{p}" for p in PERCENTILES)], rows))

    @classmethod
    def figures(cls, report: dict, out) -> dict[str, str]:
        """``per_sample_cosine.png``: one panel per layer, each method's pooled histogram."""
        methods = [m for m in report["methods"] if m.get("per_sample_cosine")]
        if not methods:
            return {}
        import matplotlib

        matplotlib.use("Agg")  # as every audit figure (report/figures.py)
        import matplotlib.pyplot as plt


        L1 = len(methods[0]["per_sample_cosine"])
        fig, axes = plt.subplots(1, L1, figsize=(2.6 * L1, 2.6), sharey=True, squeeze=False)
        centres = [-1 + (j + 0.5) * 2 / BINS for j in range(BINS)]
        for i, ax in enumerate(axes[0]):
            for m in methods:
                h = m["per_sample_cosine"][i]["hist"]
                n = sum(h) or 1
                ax.step(centres, [c / n for c in h], where="mid", label=m["method"])
            ax.set_title(f"l={i}", fontsize=9)
            ax.set_xlim(-1, 1)
            ax.set_xlabel("cos(c, g) per example", fontsize=8)
        axes[0][0].set_ylabel("fraction of probe examples", fontsize=8)
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, out / "per_sample_cosine.png")
        plt.close(fig)
        return {"per_sample_cosine": "per_sample_cosine.png"}


def _f(ms: dict) -> str:
    return fmt_ms(ms, ".2f")
