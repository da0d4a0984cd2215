"""Walk 20's causes: each reproduced as the walker did it, failing without its fix."""

import json
import os
import shutil

import pytest

import depthaudit as da
from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


@pytest.mark.parametrize("kw,field", [(dict(continue_steps=3), "continue_steps"), (dict(model=("gpt2",)), "model"),
                                      (dict(importance=(1,)), "importance"), (dict(text="/etc/hostname"), "text")])
def test_a_pretrained_or_text_field_on_resmlp_is_refused_by_the_config_naming_it(kw, field):
    """W1: SaturationConfig(family="resmlp", continue_steps=3) was built, and da.saturation refused it naming
    'model'; the config now refuses each such field itself, by its own name."""
    with pytest.raises(da.ConfigError) as exc:
        da.SaturationConfig(family="resmlp", dataset="mnist1d", extra=(0,), epochs=1, **kw)
    print(exc.value.field, exc.value)
    assert exc.value.field == field and "--" not in str(exc.value)


def test_an_option_flag_that_rewrites_a_row_gets_a_hint_that_works(tmp_path, capsys):
    """W2: --fa-head exact made the row fa:head=exact, and the refusal's hint named exactly `bp fa` again."""
    out = str(tmp_path / "A1")
    assert main(["audit", *C, "--methods", "bp", "fa", "--seeds", "1", "--out", out]) == 0
    capsys.readouterr()
    assert main(["audit", *C, "--methods", "bp", "fa", "--fa-head", "exact", "--seeds", "1", "--out", out]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "name everything it holds too (methods bp fa:head=feedback fa:head=exact)" in err
    hint = err.split("(methods ")[1].split(")")[0].split()
    assert main(["audit", *C, "--methods", *hint, "--fa-head", "exact", "--seeds", "1", "--out", out]) == 0
    assert [m["method"] for m in json.loads((tmp_path / "A1" / "report.json").read_text())["methods"]] == \
        ["bp", "fa", "fa:head=exact"]


def test_a_symlink_loop_as_out_is_named_a_loop(tmp_path, capsys, monkeypatch):
    """W3: a loop was "a symbolic link to loopB, which does not exist; make that folder" (mkdir fails)."""
    monkeypatch.chdir(tmp_path)
    os.symlink("loopA", "loopB")
    os.symlink("loopB", "loopA")
    for cmd in (["ladder", *C, "--methods", "bp", "--seeds", "1"], ["audit", *C, "--methods", "bp"], ["train", *C],
                ["identity", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1"]):
        assert main([*cmd, "--out", "loopA"]) == 2
        err = capsys.readouterr().err
        print(err)
        assert "loopA is a loop of symbolic links (loopA → loopB → …); remove one of the links" in err
        assert os.path.islink("loopA") and os.path.islink("loopB")  # (identity once replaced the link by a file)


def test_log_dir_without_log_is_noted(tmp_path, capsys):
    """W4: --log-dir without --log was ignored without a word."""
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--log-dir", str(tmp_path / "lg"),
                 "--out", str(tmp_path / "a")]) == 0
    assert "--log-dir has no effect without --log" in capsys.readouterr().err
    assert not (tmp_path / "lg").exists()


def test_train_and_identity_refuse_a_device_this_machine_lacks(tmp_path):
    """W5: a device="cuda" config (built inside nothing_trains) reached torch: AssertionError."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal cannot be made")
    with da.nothing_trains():
        b = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1, device="cuda")
    for call in (lambda: da.train(b, tmp_path / "t", progress=False), lambda: da.identity(b, seeds=(1,))):
        with pytest.raises(da.ConfigError) as exc:
            call()
        print(exc.value)
        assert exc.value.field == "device" and "CUDA is not available here" in str(exc.value)
    assert not (tmp_path / "t").exists()


def test_a_grid_in_another_order_is_the_same_grid(tmp_path, capsys):
    """W6: probes --alphas 1 0 into a folder of 0 1 was "another probes"; intervene --lambdas 0.1 0 replaced the
    report of λ ∈ 0, 0.1."""
    b = da.TrainConfig(dataset="mnist1d", method="dfa")
    assert da.ProbesConfig(base=b, alphas=(1.0, 0.0)).alphas == (0.0, 1.0)
    a = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d"), methods=("bp",))
    assert da.InterveneConfig(audit=a, lambdas=(0.1, 0)).lambdas == (0.0, 0.1)
    P = ["probes", *C, "--method", "dfa", "--seeds", "1", "--out", str(tmp_path / "p")]
    assert main([*P, "--alphas", "0", "1"]) == 0
    assert main([*P, "--alphas", "1", "0"]) == 0
    iv = ["intervene", *C, "--methods", "bp", "--seeds", "1", "--out", str(tmp_path / "iv")]
    assert main([*iv, "--penalty", "0.1"]) == 0
    capsys.readouterr()
    assert main([*iv, "--lambdas", "0.1", "0"]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "replaced" not in err and "4 of 4 runs already finished" in err


def test_an_edited_audit_claim_is_named_as_edited(tmp_path, capsys):
    """W7: identity.json edited (base.lr) was "belongs to another audit"; its sealed report.json says otherwise."""
    out = tmp_path / "A1k"
    A = ["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]
    assert main(A) == 0
    d = json.loads((out / "identity.json").read_text())
    d["identity"]["base"]["lr"] = 0.5
    (out / "identity.json").write_text(json.dumps(d))
    capsys.readouterr()
    assert main(A) == 2
    err = capsys.readouterr().err
    print(err)
    assert "identity.json differs from the sealed report.json beside it, which is this configuration's (in: base.lr)" \
        in err and "another audit" not in err
    (out / "identity.json").unlink()  # as the line says
    assert main(A) == 0
    assert json.loads((out / "identity.json").read_text())["identity"]["base"]["lr"] == 0.001


def test_a_missing_image_set_for_an_image_family_offers_a_fix_that_works(tmp_path, capsys, monkeypatch):
    """W8: grow/saturation --family resnet without CIFAR said "or use --dataset mnist1d", which they refuse."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DEPTHAUDIT_CACHE_DIR", raising=False)
    for cmd in (["grow", "--family", "resnet", "--extra", "1"], ["saturation", "--family", "resnet", "--extra", "0"]):
        assert main([*cmd, "--epochs", "1", "--out", str(tmp_path / cmd[0])]) == 2
        err = capsys.readouterr().err
        print(err)
        assert "or use --family resmlp (any dataset, e.g. --dataset mnist1d)" in err
        assert not (tmp_path / cmd[0]).exists()


def test_credit_mix_zero_is_the_methods_own_run(tmp_path, capsys):
    """W9: --credit-mix 0 changed nothing (the same test numbers) but was "another configuration"."""
    T = ["train", *C, "--method", "fa", "--seed", "3"]
    assert main([*T, "--out", str(tmp_path / "a")]) == 0
    assert main([*T, "--credit-mix", "0", "--out", str(tmp_path / "b")]) == 0
    ra, rb = (json.loads((tmp_path / p / "result.json").read_text()) for p in "ab")
    assert (ra["final"]["test_acc"], ra["final"]["test_loss"]) == (rb["final"]["test_acc"], rb["final"]["test_loss"])
    assert rb["config"]["credit_mix"] is None
    capsys.readouterr()
    assert main([*T, "--credit-mix", "0", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "--credit-mix 0 has no effect" in err and "(this configuration's)" in err
    assert da.TrainConfig(method="fa", credit_mix=0.0) == da.TrainConfig(method="fa")
    shutil.rmtree(tmp_path / "b")
