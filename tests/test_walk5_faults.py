"""What the fifth independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import json
import re

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


def test_a_model_too_big_for_the_machine_is_refused_before_it_is_allocated(tmp_path, capsys, monkeypatch):
    """`train --num-blocks 100000000` allocated until the 24 GB machine swapped (killed by hand after minutes)."""
    import depthaudit.loop as loop

    out = tmp_path / "big"
    for cmd in (["train", *TINY, "--num-blocks", "100000000", "--out", str(out)],
                ["audit", *TINY, "--num-blocks", "100000000", "--methods", "fa", "--out", str(out)],
                ["identity", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "100000000",
                 "--out", str(tmp_path / "id.json")]):
        assert main(cmd) == 2, cmd[0]
        err = capsys.readouterr().err
        assert "--num-blocks 100000000, --d-hidden 8: the model has" in err and "GiB free on cpu" in err, err
        assert not out.exists() and not (tmp_path / "id.json").exists()
    # the rule itself: 16 bytes per parameter against what is free (here a pretend 1 MiB machine)
    monkeypatch.setattr(loop, "free_memory", lambda device: 2**20)
    cfg = da.TrainConfig(dataset="mnist1d", d_hidden=256, num_blocks=4, epochs=1)
    import torch

    from depthaudit.data import load_data
    from depthaudit.errors import UsageError

    data = load_data("mnist1d", None, False, torch.device("cpu"))
    model, _ = loop.build(da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), data)
    params = sum(p.numel() for p in loop.build_model("resmlp", data.input_shape, 10, 256, 4, None, 0).parameters())
    assert 16 * params > 2**20 > 16 * sum(p.numel() for p in model.parameters())
    import pytest

    with pytest.raises(UsageError, match=re.escape(f"the model has {params:.3g} parameters")):
        loop.build(cfg, data)
