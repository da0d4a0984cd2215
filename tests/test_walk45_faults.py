"""Walk 45's wrong cases, reproduced as the walker did them (docs/walks/walk45_*.txt)."""

import sys

import pytest
from _util import plugin_in

from depthaudit.cli import main

PLUGIN = '''
import hashlib
import numpy as np
from depthaudit.data import DATASETS, ArrayData

def _mk():
    r = np.random.default_rng(0)
    xt, xe = r.normal(size=(600, 8)).astype(np.float32), r.normal(size=(200, 8)).astype(np.float32)
    return xt, r.integers(0, 3, 600), xe, r.integers(0, 3, 200)

def H(s):
    return hashlib.sha256(s.encode()).hexdigest()

@DATASETS.register("y2d45", epochs=1, generated=True)
def y2d45(data_dir=None, download=False):
    xt, yt, xe, ye = _mk()
    return ArrayData(xt, yt[:, None], xe, ye[:, None], num_classes=3, source="y2d", sha256=H("y2d"))

@DATASETS.register("y2dtest45", epochs=1, generated=True)
def y2dtest45(data_dir=None, download=False):
    xt, yt, xe, ye = _mk()
    return ArrayData(xt, yt, xe, ye[:, None], num_classes=3, source="y2dt", sha256=H("y2dt"))

@DATASETS.register("yonehot45", epochs=1, generated=True)
def yonehot45(data_dir=None, download=False):
    xt, yt, xe, ye = _mk()
    return ArrayData(xt, np.eye(3, dtype=np.int64)[yt], xe, np.eye(3, dtype=np.int64)[ye], num_classes=3,
                     source="oh", sha256=H("oh"))
'''


@pytest.mark.parametrize("name, split, shape, hint", [("y2d45", "train", "(600, 1)", "y.reshape(-1)"),
                                                      ("y2dtest45", "test", "(200, 1)", "y.reshape(-1)"),
                                                      ("yonehot45", "train", "(600, 3)", "y.argmax(1)")])
def test_labels_that_are_not_one_class_index_per_example_are_refused_before_anything(tmp_path, monkeypatch, capsys,
                                                                                     name, split, shape, hint):
    """W1 (cases 153–156): a plug-in dataset with labels of shape (N, 1), or one-hot (N, C), passed the loader
    check and failed inside the loss as "internal error" (rc 1) — an audit after claiming its new folder, which
    then refused the fixed dataset. One line naming the dataset, the split and the shape, exit 2, nothing made."""
    from depthaudit.data.base import DATASETS

    plugin_in(monkeypatch, tmp_path, "p45d", PLUGIN, DATASETS)
    try:
        small = ["--dataset", name, "--d-hidden", "16", "--num-blocks", "2"]
        audit = ["audit", *small, "--methods", "bp", "--seeds", "1", "--out", "A"]
        for cmd in (["train", *small, "--out", "T"], audit):
            assert main(["--plugin", "p45d", *cmd]) == 2
            err = capsys.readouterr().err
            print(err)
            assert "internal error" not in err and f"--dataset {name}" in err
            assert f"its {split} labels have shape {shape}; give one class index per example" in err and hint in err
            assert not (tmp_path / cmd[-1]).exists()
        import depthaudit as da
        with pytest.raises(da.UsageError, match=f"its {split} labels have shape"):
            da.train(da.TrainConfig(dataset=name, d_hidden=16, num_blocks=2), tmp_path / "P", progress=False)
    finally:
        sys.modules.pop("p45d", None)
