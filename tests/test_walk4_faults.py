"""Faults the fourth independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import depthaudit as da
from depthaudit.cli import main
from depthaudit.errors import UsageError

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_force_never_takes_over_another_commands_folder(tmp_path, capsys):
    """W1 (21, 215, 216): `train --force` into an audit folder turned its claim into a train's."""
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    claim = (a / "identity.json").read_bytes()
    capsys.readouterr()
    assert main(["train", *TINY, "--force", "--out", str(a)]) == 2
    assert "holds the results of another command (audit); train cannot write there" in capsys.readouterr().err
    assert (a / "identity.json").read_bytes() == claim


def test_a_run_the_data_cannot_train_is_refused_before_any_folder_is_claimed(tmp_path, capsys):
    """W5 (130–177): --augment crop on MNIST-1D or a ViT width not divisible by its heads left a claimed store
    that then refused the corrected command as "differs in: augment"."""
    for cmd, out_flag in (("audit", "--out"), ("ladder", "--output_dir"), ("probes", "--out")):
        out = tmp_path / cmd
        assert main([cmd, *TINY, "--augment", "crop", out_flag, str(out)]) == 2, cmd
        assert "is not an image dataset" in capsys.readouterr().err and not out.exists(), cmd
    out = tmp_path / "vit"
    assert main(["audit", "--arch", "vit", "--dataset", "mnist1d", "--d-hidden", "18", "--num-blocks", "1",
                 "--epochs", "1", "--out", str(out)]) == 2
    assert "not divisible by its 4 attention heads" in capsys.readouterr().err and not out.exists()


def test_python_entry_points_name_a_config_of_the_wrong_kind(tmp_path):
    """W3 (106, 107, 114): da.train(AuditConfig) / da.audit(TrainConfig) were AttributeErrors; an empty probe batch
    a raw torch error."""
    import torch

    from depthaudit.models import ResMLP

    base = da.TrainConfig(d_hidden=8, num_blocks=1, epochs=1)
    with pytest.raises(da.ConfigError, match="config must be a TrainConfig"):
        da.train(da.AuditConfig(base=base), tmp_path / "t")
    with pytest.raises(da.ConfigError, match="config must be a AuditConfig|config must be an AuditConfig"):
        da.audit(base, tmp_path / "a")
    m = ResMLP((8,), 3, d_hidden=8, num_blocks=1, seed=0)
    with pytest.raises(UsageError, match="holds no examples"):
        da.CreditEvaluator(m, [(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long))])
    assert not any(tmp_path.iterdir())


def test_the_report_scripts_exit_2_and_replace_only_their_own_files(tmp_path):
    """W4 (116–123): report.field exited 1 on a folder without report.json and overwrote an audit's report.md;
    report.claim replaced a user's notes.txt with a PNG."""
    shutil.copytree(RESULTS / "audit_mnist1d", tmp_path / "a", ignore=shutil.ignore_patterns("runs"))
    (tmp_path / "notes.txt").write_text("mine")
    before = (tmp_path / "a" / "report.md").read_bytes()
    for args in (["depthaudit.report.field", str(tmp_path / "f.md"), str(tmp_path)],
                 ["depthaudit.report.field", str(tmp_path / "a" / "report.md"), str(tmp_path / "a")],
                 ["depthaudit.report.claim", str(tmp_path / "notes.txt"), str(tmp_path / "a")]):
        p = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300)
        assert p.returncode == 2 and p.stderr.startswith("depthaudit: error:"), (args, p.stderr)
    assert (tmp_path / "a" / "report.md").read_bytes() == before and (tmp_path / "notes.txt").read_text() == "mine"


def test_grow_and_saturation_check_their_log_dir_before_claiming(tmp_path, capsys):
    """W6 (124): a bad --log-dir was refused after grow's/saturation's store was claimed."""
    (tmp_path / "afile").write_text("")
    for cmd in (["grow", "--family", "resmlp", "--base-blocks", "1", "--extra", "1"],
                ["saturation", "--family", "resmlp", "--base-blocks", "1", "--extra", "0"]):
        out = tmp_path / cmd[0]
        assert main([*cmd, "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1", "--log", "tensorboard",
                     "--log-dir", str(tmp_path / "afile"), "--out", str(out)]) == 2
        assert "--log-dir" in capsys.readouterr().err and (not out.exists() or not any(out.iterdir())), cmd


def test_probes_report_a_diverged_run_as_diverged_not_as_an_accuracy(tmp_path, capsys):
    """W7 (189, 192): runs recorded "diverged" were printed as test acc 0.106 (n=1) in the card and the JSON."""
    out = tmp_path / "p"
    assert main(["probes", *TINY, "--method", "fa", "--alphas", "0", "--optimizer", "sgd", "--lr", "1e6",
                 "--probe-batches", "1", "--out", str(out)]) == 0
    row = json.loads((out / "probes_fa.json").read_text())["credit_mix"]["rows"][0]
    assert row["diverged"] == 1 and row["test_acc"]["mean"] is None and row["test_acc"]["n"] == 0
    assert "| 0 | — (1 diverged) |" in (out / "probes_fa.md").read_text()


def test_an_edited_sweep_json_is_named_not_its_intact_records(tmp_path, capsys):
    """W8 (194, 196): a ladder JSON whose schema was edited blamed the intact .runs folder ("differs in: schema")
    and advised moving the records away too; the JSON alone is at fault (and is rebuilt from them)."""
    args = ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--output_dir", str(tmp_path)]
    assert main(args) == 0
    doc = next(tmp_path.glob("ladder_*.json"))
    doc.write_text(doc.read_text().replace("ladder.v1", "ladder.v9"))
    capsys.readouterr()
    for cmd in (["report", str(tmp_path)], args):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert "it was edited; move " + doc.name + " away" in err and "runs away" not in err, err
    doc.unlink()  # the advice, followed
    assert main(["report", str(tmp_path)]) == 0


def test_a_float64_default_dtype_is_named_before_any_folder_is_claimed(tmp_path, capsys):
    """W2 (88): a plug-in calling torch.set_default_dtype(torch.float64) was an internal error after the claim."""
    import torch

    torch.set_default_dtype(torch.float64)
    try:
        assert main(["audit", *TINY, "--methods", "bp", "--out", str(tmp_path / "a")]) == 2
    finally:
        torch.set_default_dtype(torch.float32)
    assert "torch's default dtype is torch.float64" in capsys.readouterr().err and not (tmp_path / "a").exists()


def test_a_subclass_of_the_config_is_still_that_config(tmp_path):
    """The wrong-kind check (W3) must not refuse a user's subclass of TrainConfig."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Mine(da.TrainConfig):
        pass

    res = da.train(Mine(d_hidden=8, num_blocks=1, epochs=0), tmp_path / "t", progress=False)
    assert json.loads(res.path.read_text())["status"] == "ok"
