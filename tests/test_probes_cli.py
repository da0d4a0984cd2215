"""The intervention and probes commands end to end on a tiny config, and CIFAR-100 end to end."""

import json
import pickle

import numpy as np

from depthaudit.cli import main

TINY = ["--d-hidden", "24", "--num-blocks", "2", "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "64"]


def test_intervene_sweeps_lambda_grid(tmp_path, capsys):
    assert main(["intervene", *TINY, "--methods", "dfa", "--lambdas", "0", "1e-2", "0.5", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "intervention.json").read_text())
    (row,) = res["rows"]
    assert row["method"] == "dfa" and res["lambdas"] == [0.0, 0.01, 0.5] and res["penalty_form"] == "abs"
    for d in row["by_lambda"]:
        assert {"D1", "D2", "D3", "test_acc", "per_layer_cosine", "lambda"} <= set(d)
    cfgs = [json.loads(p.read_text())["config"] for p in (tmp_path / "runs").glob("*/result.json")]
    assert sorted({c["scale_penalty"] for c in cfgs}) == [0.0, 0.01, 0.5] and len(cfgs) == 6  # trained + frozen
    assert {c["penalty_form"] for c in cfgs} == {"abs"}
    assert "| dfa | 0.5 |" in capsys.readouterr().out and (tmp_path / "intervention.png").stat().st_size > 0
    assert main(["intervene", *TINY, "--methods", "dfa", "--penalty", "0.5", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "intervention.json").read_text())["lambdas"] == [0.0, 0.5]
    assert main(["intervene", *TINY, "--lambdas", "-1", "--out", str(tmp_path / "bad")]) == 2
    # another configuration into the folder: refused in one line before training, the report left as it was
    before = (tmp_path / "intervention.json").read_bytes()
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    capsys.readouterr()
    assert main(["intervene", *TINY, "--methods", "dfa", "--lr", "0.002", "--penalty", "0.5",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "belongs to another intervene (differs in base" in err and len(err.splitlines()) == 1, err
    assert "--replace-report" not in err  # intervene has no such flag: the line names only what the user can do
    assert (tmp_path / "intervention.json").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == runs


def test_probes_command_tables(tmp_path, capsys):
    assert main(["probes", *TINY[:-2], "--method", "fa", "--alphas", "0", "1", "--pre-epochs", "1",
                 "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "probes_fa.json").read_text())
    rows = res["credit_mix"]["rows"]
    assert [r["alpha"] for r in rows] == [0.0, 1.0]
    assert all(abs(c["mean"] - 1) < 1e-4 for c in rows[1]["per_layer"])  # α=1 credit is BP's, per layer
    assert [r["arm"] for r in res["warm_start"]["rows"]] == ["fa_from_bp", "fa_scratch", "bp_continued"]
    assert (tmp_path / "credit_mix_fa.png").stat().st_size > 0
    # rerun: everything is reused from the stores
    assert main(["probes", *TINY[:-2], "--method", "fa", "--alphas", "0", "1", "--pre-epochs", "1",
                 "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "2 of 2 runs already finished" in err and "3 of 3 runs already finished" in err


def test_cifar100_end_to_end(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, n in (("train", 300), ("test", 100)):
        d = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
             b"fine_labels": list(rng.integers(0, 100, n)), b"coarse_labels": list(rng.integers(0, 20, n))}
        (folder / name).write_bytes(pickle.dumps(d))
    out = tmp_path / "run"
    assert main(["train", "--dataset", "cifar100", "--data-dir", str(tmp_path), "--d-hidden", "32",
                 "--num-blocks", "2", "--epochs", "2", "--method", "fa", "--out", str(out)]) == 0
    res = json.loads((out / "result.json").read_text())
    assert res["provenance"]["data"]["num_classes"] == 100 and res["provenance"]["data"]["n_train"] == 300
    assert res["status"] == "ok" and len(res["history"]) == 2
