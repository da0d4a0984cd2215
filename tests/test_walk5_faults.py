"""What the fifth independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import json

import depthaudit as da
from depthaudit.cli import main

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_train_blocks_is_stored_in_its_one_spelling(tmp_path):
    """12 (unclear): `--train-blocks ALL` trained as all but was stored verbatim ("ALL") in the record."""
    for given, stored in (("ALL", "all"), (" None ", "none"), ("LAST:01", "last:1")):
        assert da.TrainConfig(num_blocks=1, train_blocks=given).train_blocks == stored
    assert main(["train", *TINY, "--train-blocks", "ALL", "--out", str(tmp_path / "t")]) == 0
    rec = json.loads((tmp_path / "t" / "result.json").read_text())
    assert rec["config"]["train_blocks"] == "all"
