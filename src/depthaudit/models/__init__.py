"""Residual models, looked up by name in :data:`MODELS`."""

from .adapter import ResidualAdapter
from .base import ResidualModel
from .resmlp import MODELS, LinearReadout, LNReadout, MLPBlock, ResMLP, StudentNet
from .vit import ViTMini

__all__ = ["MODELS", "ResidualAdapter", "ResidualModel", "ResMLP", "StudentNet", "MLPBlock", "LNReadout",
           "LinearReadout", "ViTMini", "build_model"]


def build_model(arch: str, input_shape, num_classes: int, d_hidden: int, num_blocks: int,
                mlp_ratio: int, seed: int) -> ResidualModel:
    """Build a registered model; weights drawn from a generator seeded with ``seed``."""
    factory = MODELS.get(arch)
    try:
        return factory(input_shape, num_classes, d_hidden=d_hidden, num_blocks=num_blocks, mlp_ratio=mlp_ratio,
                       seed=seed)
    except ValueError as exc:  # a shape the architecture cannot take (e.g. heads, patch size)
        from ..errors import UsageError

        raise UsageError(f"--arch {arch}: {exc}") from None
