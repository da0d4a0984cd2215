"""Faults the third independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import json
import shutil
from pathlib import Path

import pytest

import depthaudit as da
from depthaudit.cli import main
from depthaudit.errors import UsageError

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_identity_replaces_only_its_own_file_and_carries_provenance(tmp_path, capsys):
    """Walk 40/41/44: `identity --out` overwrote an audit's report.json and a ladder's JSON, and its own JSON had no
    schema and no provenance."""
    shutil.copytree(RESULTS / "audit_mnist1d", tmp_path / "a", ignore=shutil.ignore_patterns("runs"))
    before = (tmp_path / "a" / "report.json").read_bytes()
    args = ["identity", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--seeds", "1"]
    assert main([*args, "--out", str(tmp_path / "a" / "report.json")]) == 2
    assert "not an identity check's result (another command's file); choose another --out" in \
        capsys.readouterr().err
    assert (tmp_path / "a" / "report.json").read_bytes() == before
    assert main([*args, "--out", str(tmp_path / "id.json")]) == 0
    assert main([*args, "--out", str(tmp_path / "id.json")]) == 0  # its own file: replaced
    doc = json.loads((tmp_path / "id.json").read_text())
    assert doc["schema"] == "depthaudit.identity_check.v1" and doc["provenance"]["torch"] and doc["provenance"]["git"]


def test_registered_names_cannot_escape_their_folders():
    """Walk 82/83: a plug-in dataset named 'my/data' or '../../esc' wrote results through those paths."""
    from depthaudit.data import DATASETS

    for bad in ("my/data", "../../esc", "", ".hidden"):
        with pytest.raises(ValueError, match="use letters, digits"):
            DATASETS.register(bad)(lambda *a: None)


def test_python_configs_and_arguments_of_the_wrong_kind_are_one_line(tmp_path):
    """Walk 104, 118, 122, 218, 220, 107: each was a raw AttributeError/RuntimeError or accepted."""
    with pytest.raises(da.ConfigError, match="audit must be an AuditConfig"):
        da.InterveneConfig(audit="bp", lambdas=(0, 1))
    for kw in (dict(rho_max=-1), dict(eps=float("nan"))):
        with pytest.raises(da.ConfigError):
            da.Thresholds(**kw)
    with pytest.raises(da.ConfigError, match="log_dir '' is an empty path"):
        da.SweepOptions(log=("tensorboard",), log_dir="")
    lc = da.LadderConfig(base=da.TrainConfig(d_hidden=8, num_blocks=1, epochs=1), methods=("bp",))
    with pytest.raises(da.ConfigError, match="data must be a dataset loaded by depthaudit"):
        da.ladder(lc, tmp_path / "l", data="notdata")
    import torch

    from depthaudit.models import ResMLP

    model = ResMLP((8,), 3, d_hidden=8, num_blocks=1, seed=0)
    pb = [(torch.randn(16, 8), torch.randint(0, 3, (16,)))]
    with pytest.raises(UsageError, match="eps=-1"):
        da.CreditEvaluator(model, pb, eps=-1)
    with pytest.raises(UsageError, match="thresholds must be a Thresholds"):
        da.TrainingMonitor(model, pb, thresholds={"rho": 5})


def test_a_bad_log_dir_is_refused_before_the_folder_is_claimed(tmp_path, capsys):
    """Walk 193–197: --log-dir a file (or under /proc) was refused after the store was claimed, which then refused
    the next, correct, command as "another configuration"."""
    (tmp_path / "afile").write_text("")
    out = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--log", "tensorboard", "--log-dir", str(tmp_path / "afile"),
                 "--out", str(out)]) == 2
    assert "--log-dir" in capsys.readouterr().err and not out.exists()


def test_the_monitor_does_not_write_over_a_commands_folder(tmp_path):
    """Walk 131: TrainingMonitor.write into a CLI audit folder replaced the audit's report with its own."""
    shutil.copytree(RESULTS / "audit_mnist1d", tmp_path / "a")
    before = (tmp_path / "a" / "report.json").read_bytes()
    import torch

    from depthaudit.models import ResMLP

    model = ResMLP((40,), 10, d_hidden=8, num_blocks=1, seed=0)
    pb = [(torch.randn(16, 40), torch.randint(0, 10, (16,)))]
    mon = da.TrainingMonitor(model, pb)
    mon.step(0)
    mon.report(test_acc=0.5, frozen_acc=0.4, budget=1)
    with pytest.raises(UsageError, match="holds another command's results"):
        mon.write(tmp_path / "a")
    assert (tmp_path / "a" / "report.json").read_bytes() == before


def test_a_swapped_or_damaged_checkpoint_is_named_not_read(tmp_path, capsys):
    """Walk 53: fa's checkpoint copied over bp's made the CKA table read fa 1.000 (no refusal); walk 48: a truncated
    checkpoint was an internal error (EOFError). Each record now carries its checkpoint's sha256."""
    args = ["audit", *TINY, "--methods", "bp", "fa", "--probe-batches", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    bp = next(tmp_path.glob("runs/*_bp_all_*"))
    fa = next(tmp_path.glob("runs/*_fa_all_*"))
    assert json.loads((bp / "result.json").read_text())["checkpoint_sha256"]
    good = (bp / "checkpoint.pt").read_bytes()
    for damage in ((fa / "checkpoint.pt").read_bytes(), good[: len(good) // 2]):
        (bp / "checkpoint.pt").write_bytes(damage)
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"{bp / 'checkpoint.pt'} is not the checkpoint its run record was written with" in err, err
        assert len([ln for ln in err.splitlines() if "error" in ln]) == 1 and "Traceback" not in err
    shutil.move(bp, tmp_path / "moved")  # the advice, followed: that run trains again
    assert main(args) == 0


def test_a_swapped_warm_start_checkpoint_is_retrained_not_used(tmp_path, capsys):
    """Walk 187/188: probes' BP pre-run checkpoint swapped for another run's: the warm-started arms trained from the
    foreign weights, silently."""
    args = ["probes", *TINY, "--method", "fa", "--alphas", "0", "--pre-epochs", "1", "--probe-batches", "1",
            "--out", str(tmp_path / "p")]
    assert main(args) == 0
    ckpt = next((tmp_path / "p" / "warm_start").glob("bp_pre_*.pt"))
    assert main(["train", *TINY, "--seed", "7", "--out", str(tmp_path / "t")]) == 0
    shutil.copy(tmp_path / "t" / "checkpoint.pt", ckpt)
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"{ckpt} is not the checkpoint its run record was written with" in err and "trains again" in err, err


def test_stderr_on_a_full_device_loses_only_the_progress(tmp_path):
    """Walk 223–227: with stderr on /dev/full the first progress line failed and every command ended in exit 1
    (after claiming its store). Now the lines are lost quietly, as with `2>&-`, and the work is done; bad input
    still exits 2."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root / "src"),
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    py = f"{sys.executable} -m depthaudit"
    p = subprocess.run(f"{py} train {' '.join(TINY)} --out t 2>/dev/full", shell=True, env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and (tmp_path / "t" / "result.json").is_file(), p.stdout
    p = subprocess.run(f"{py} train --lr -1 --out u 2>/dev/full", shell=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and not (tmp_path / "u").exists()


def test_hf_models_that_cannot_run_are_refused_before_the_store_is_claimed(tmp_path, capsys):
    """Walk 241–249: no tokenizer, token ids beyond the vocabulary (after the claim: the next run was refused as
    "differs in: context"), a config.json whose vocab_size the weights do not have (an internal-error traceback)."""
    import numpy as np

    tf = pytest.importorskip("transformers")
    m = tmp_path / "tinygpt"
    tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=300, n_positions=64)).save_pretrained(m)
    voc = tmp_path / "tg_voc"
    shutil.copytree(m, voc)
    cfg = json.loads((voc / "config.json").read_text())
    (voc / "config.json").write_text(json.dumps({**cfg, "vocab_size": 100}))
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 300, 5000))
    np.save(tmp_path / "big.npy", np.random.default_rng(0).integers(0, 500, 5000))
    cases = [([str(m)], "ships no tokenizer"), ([str(voc), "--text", str(tmp_path / "ids.npy")],
                                                "its weights do not fit its config.json"),
             ([str(m), "--text", str(tmp_path / "big.npy")], "is not below the model's vocabulary (300)")]
    capsys.readouterr()  # (transformers' own notes while saving)
    for args, said in cases:
        out = tmp_path / "o"
        assert main(["saturation", "--family", "hf", "--model", *args, "--context", "16", "--out", str(out)]) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("depthaudit")]
        assert len(err) == 1 and said in err[0] and not out.exists(), err


def test_four_inputs_that_were_silently_reread_are_named(tmp_path, capsys):
    """Walk 3's unclear 11, 20, 25/101, 212: --device '' read as auto; --jobs with --cell; --penalty 0 collapsing the
    grid to λ = 0 (and penalty=-0.1 named as lambdas); `identity --out newdir/` writing a file named newdir."""
    assert main(["train", "--device", "", "--out", str(tmp_path / "d")]) == 2
    assert "--device '' is empty" in capsys.readouterr().err
    with pytest.raises(da.ConfigError, match="penalty 0.0: the penalized λ"):
        da.InterveneConfig(audit=da.AuditConfig(base=da.TrainConfig()), penalty=0.0)
    with pytest.raises(da.ConfigError, match=r"^penalty -0.1"):
        da.InterveneConfig(audit=da.AuditConfig(base=da.TrainConfig()), penalty=-0.1)
    assert main(["identity", "--out", str(tmp_path / "newdir") + "/"]) == 2
    assert "is a folder; give a .json file path" in capsys.readouterr().err and not (tmp_path / "newdir").exists()
    args = ["audit", *TINY, "--cell", "0", "--jobs", "2", "--probe-batches", "1", "--out", str(tmp_path / "c")]
    assert main(args) == 0
    assert "--jobs has no effect with --cell" in capsys.readouterr().err
