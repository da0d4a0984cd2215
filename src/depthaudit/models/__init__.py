"""Residual models, looked up by name in :data:`MODELS`."""

from .adapter import ResidualAdapter
from .base import ResidualModel
from .resmlp import MODELS, LinearReadout, LNReadout, MLPBlock, ResMLP, StudentNet

__all__ = ["MODELS", "ResidualAdapter", "ResidualModel", "ResMLP", "StudentNet", "MLPBlock", "LNReadout",
           "LinearReadout", "build_model"]


def build_model(arch: str, input_shape, num_classes: int, d_hidden: int, num_blocks: int,
                mlp_ratio: int, seed: int) -> ResidualModel:
    """Build a registered model; weights drawn from a generator seeded with ``seed``."""
    return MODELS.get(arch)(input_shape, num_classes, d_hidden=d_hidden, num_blocks=num_blocks,
                            mlp_ratio=mlp_ratio, seed=seed)
