"""Walk 33's wrong (and closest-to-wrong unclear) cases, reproduced as the walker did them (docs/walks/walk33_*)."""

import json

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]


def test_identity_stores_what_ran_not_the_idle_training_flags(tmp_path, capsys):
    """Case 63: ``identity --epochs 3`` noted that --epochs has no effect, then stored "epochs": 3 in its config
    (a rerun without it stored 20): cli.md "such a flag never makes another configuration: the config stores what
    ran". Idle flags are stored at their defaults, so the two checks' JSON configs are one."""
    base = ["identity", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--seeds", "1",
            "--probe-batches", "1", "--probe-batch-size", "16"]
    assert main([*base, "--epochs", "3", "--lr", "0.01", "--methods", "fa", "--out", str(tmp_path / "a.json")]) == 0
    assert "no effect with identity" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["config"] == b["config"] and a["per_seed"] == b["per_seed"]
    assert a["config"]["d_hidden"] == 16 and a["config"]["method"] == "bp"
