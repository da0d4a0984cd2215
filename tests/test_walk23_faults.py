"""Walk 23's causes: each reproduced as the walker did it, failing without its fix."""

import hashlib

import numpy as np
import pytest
import torch

from depthaudit.data import DATASETS, ArrayData, load_data
from depthaudit.errors import UsageError


def _nan_loader(data_dir=None, download=False):
    rng = np.random.default_rng(0)
    x, xt = rng.normal(size=(30, 4)).astype(np.float32), rng.normal(size=(20, 4)).astype(np.float32)
    xt[0, 0] = np.nan
    return ArrayData(x, rng.integers(0, 3, 30), xt, rng.integers(0, 3, 20), num_classes=3, source="w23",
                     sha256=hashlib.sha256(b"w23").hexdigest())


def test_a_plugin_loaders_bad_data_is_refused_naming_the_loader():
    """W1 (cases 127, 129): NaN/inf inputs from a plug-in's loader were refused without its file:line, unlike a
    loader returning None."""
    DATASETS.register("w23nan", overwrite=True)(_nan_loader)
    try:
        with pytest.raises(UsageError) as exc:
            load_data("w23nan", None, False, torch.device("cpu"))
    finally:  # (the registry is the process's: no other test may see this dataset)
        DATASETS._items.pop("w23nan", None)
        DATASETS._meta.pop("w23nan", None)
    print(exc.value)
    assert f"--dataset w23nan (its loader: {__file__}:" in str(exc.value)
    assert "its test inputs hold 1 NaN or infinite values" in str(exc.value)
