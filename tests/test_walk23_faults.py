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


C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_train_into_a_folder_with_a_foreign_claim_names_the_claim_first(tmp_path, capsys):
    """W2 (cases 200, 202): "already exists (this configuration's); pass --force", and --force then refused the
    foreign identity.json; the claim is named first, with the fix that works."""
    from depthaudit.cli import main

    out = tmp_path / "t1z"
    assert main(["train", *C, "--method", "fa", "--out", str(out)]) == 0
    (out / "identity.json").write_text('{"schema": "nope"}')
    capsys.readouterr()
    for extra in ([], ["--force"]):
        assert main(["train", *C, "--method", "fa", *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        print(err)
        assert "identity.json exists and is not depthaudit's" in err and "pass --force" not in err
    (out / "identity.json").unlink()  # as the line says
    assert main(["train", *C, "--method", "fa", "--force", "--out", str(out)]) == 0


def test_analysis_batches_beyond_the_split_are_capped_said_and_stored_as_measured(tmp_path, capsys):
    """W3 (cases 228, 229): --analysis-batches 1000 measured 15 batches, stored 1000, and a rerun with 15 (the same
    measurement) was "a different configuration"."""
    import json

    from depthaudit.cli import main

    S = ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1", "--extra",
         "0", "--out", str(tmp_path / "S")]
    assert main([*S, "--analysis-batches", "1000"]) == 0
    err = capsys.readouterr().err
    assert "measuring (and recording) 15 batches" in err, err
    doc = json.loads(next((tmp_path / "S").glob("saturation_*.json")).read_text())
    assert doc["identity"]["analysis_batches"] == 15
    assert main([*S, "--analysis-batches", "15"]) == 0
    assert "1 of 1 runs already finished" in capsys.readouterr().err
