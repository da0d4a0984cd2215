"""Data: registry of loaders (:data:`DATASETS`), decoded-array cache, device placement."""

import torch

from . import cifar, mnist1d, teacher  # noqa: F401  (registers the loaders)
from .base import DATASETS, ArrayData, DataBundle, cache_dir, to_bundle

__all__ = ["DATASETS", "ArrayData", "DataBundle", "cache_dir", "load_data"]


def load_data(name: str, data_dir: str | None, download: bool, device: torch.device) -> DataBundle:
    """Load a registered dataset and place it on ``device``."""
    arrays = DATASETS.get(name)(data_dir=data_dir, download=download)
    return to_bundle(name, arrays, device)
