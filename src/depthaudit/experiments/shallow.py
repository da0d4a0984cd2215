"""The parameter-matched shallow baseline: "is it depth, or just capacity?" (the depth ladder's open item).

Beside the full model (d, L) the audit trains, under the same method, recipe, data and seed, a model with
fewer blocks ``L' < L`` whose width ``d'`` makes its parameter count match the full model's as closely as
an integer width allows (found by bisection on the registered model's own parameter count, so it holds
for any architecture). If the full model beats its frozen baseline (D3) but not the matched shallow
model, the gain is capacity, not depth. Ours: the protocol has no such arm.
"""

from dataclasses import replace

from ..config import TrainConfig
from ..models import MODELS, build_model


def param_count(cfg: TrainConfig, input_shape, num_classes: int, d_hidden: int, num_blocks: int) -> int:
    """Trainable parameters of ``cfg``'s model at width ``d_hidden`` with ``num_blocks`` blocks."""
    model = build_model(cfg.arch, input_shape, num_classes, d_hidden, num_blocks, cfg.mlp_ratio, 0, cfg.variant)
    return sum(p.numel() for p in model.parameters())


def matched_shallow(cfg: TrainConfig, input_shape, num_classes: int, blocks: int) -> dict:
    """``{num_blocks, d_hidden, params, full_params, match_pct}``: the width whose count is nearest the full model's."""
    target = param_count(cfg, input_shape, num_classes, cfg.d_hidden, cfg.num_blocks)
    step = MODELS.meta(cfg.arch).get("width_multiple", 1)  # widths the model can take (a ViT's: its heads')

    def count(k: int) -> int:  # the count at width k · step
        return param_count(cfg, input_shape, num_classes, k * step, blocks)

    lo, hi = 1, max(2, cfg.d_hidden // step)
    while count(hi) < target:  # fewer blocks: the matched width is wider
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # smallest d with count(d) >= target lies in (lo, hi]
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) < target else (lo, mid)
    k = min((lo, hi), key=lambda w: abs(count(w) - target))
    d, p = k * step, count(k)
    return {"num_blocks": blocks, "d_hidden": d, "params": p, "full_params": target,
            "match_pct": round(100.0 * (p - target) / target, 3)}


def shallow_config(cfg: TrainConfig, match: dict) -> TrainConfig:
    """The full run's config at the matched shallow shape, every block trained."""
    return replace(cfg, num_blocks=match["num_blocks"], d_hidden=match["d_hidden"], train_blocks="all")
