"""Frozen-init identity check: how close a random-init residual stack is to the identity map (SPEC §3)."""

import torch
import torch.nn.functional as F

from ..models import build_model


@torch.no_grad()
def identity_stats(model, x: torch.Tensor) -> dict:
    """Per block ``‖f_l(h_{l-1})‖/‖h_{l-1}‖``; stack ``‖h_L−h_0‖/‖h_0‖`` and ``cos(h_L, h_0)``.

    Every quantity is per example and then averaged over the batch ``x``.
    """
    _, states = model(x, return_states=True)
    flat = [h.flatten(1).float() for h in states]  # each (B, D)

    def ratio(a, b):
        return ((a - b).norm(dim=1) / b.norm(dim=1)).mean().item()

    return {"block_ratio": [ratio(b, a) for a, b in zip(flat, flat[1:], strict=False)],
            "stack_rel_change": ratio(flat[-1], flat[0]),
            "stack_cos": F.cosine_similarity(flat[-1], flat[0], dim=1).mean().item()}


def identity_over_seeds(arch: str, input_shape, num_classes: int, d_hidden: int, num_blocks: int,
                        mlp_ratio: int, seeds, x: torch.Tensor) -> dict:
    """:func:`identity_stats` at the init of each seed, with per-seed values kept for mean ± std."""
    per_seed = []
    for s in seeds:
        model = build_model(arch, input_shape, num_classes, d_hidden, num_blocks, mlp_ratio, s).to(x.device)
        per_seed.append(identity_stats(model, x))
    return {"seeds": list(seeds), "per_seed": per_seed}
