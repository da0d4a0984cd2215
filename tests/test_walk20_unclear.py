"""Walk 20's unclear cases that were made clear: each reproduced as the walker did it."""

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_grow_with_jobs_names_each_arm_once_per_line(tmp_path):
    """Case 191: with --jobs 2 every epoch line read "grown: grown: epoch 1/2" (a real process: stderr a file)."""
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "depthaudit", "grow", "--family", "resmlp", "--dataset", "mnist1d",
                        "--d-hidden", "8", "--epochs", "2", "--extra", "1", "--jobs", "2",
                        "--out", str(tmp_path / "g")],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    err = p.stderr
    print(err)
    assert p.returncode == 0
    assert "grown: epoch 1/2" in err and "scratch: epoch 1/2" in err
    assert "grown: grown:" not in err and "scratch: scratch:" not in err


def test_an_out_with_a_blank_at_its_end_is_said(tmp_path, capsys):
    """Case 196: --out "c2 " (a copy-paste) trained a new folder beside c2 without a word."""
    assert main(["train", *C, "--out", str(tmp_path / "c2 ")]) == 0
    assert capsys.readouterr().err.count("begins or ends with a blank") == 1
    assert main(["audit", *C, "--methods", "bp", "--out", str(tmp_path / "c4 ")]) == 0  # (walk 21 W1: said twice)
    assert capsys.readouterr().err.count("begins or ends with a blank") == 1
    assert main(["train", *C, "--out", str(tmp_path / "c3")]) == 0
    assert "blank" not in capsys.readouterr().err


def test_identity_out_names_a_users_file_and_a_damaged_one_as_such(tmp_path, capsys):
    """Cases 132, 135: a user's JSON and a truncated identity result were both "another command's file"."""
    args = ["identity", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--seeds", "1", "--out"]
    (tmp_path / "mine.json").write_text('{"mine": 1}')
    assert main([*args, str(tmp_path / "mine.json")]) == 2
    assert "is not an identity check's result (a file of your own)" in capsys.readouterr().err
    assert main([*args, str(tmp_path / "id.json")]) == 0
    (tmp_path / "id.json").write_bytes((tmp_path / "id.json").read_bytes()[:40])
    capsys.readouterr()
    assert main([*args, str(tmp_path / "id.json")]) == 2
    assert "cannot be read as JSON (a damaged or truncated result" in capsys.readouterr().err
    assert (tmp_path / "mine.json").read_text() == '{"mine": 1}'


def test_an_unknown_method_on_the_cli_hints_at_a_plugin(capsys):
    """Case 215: a plug-in's method named without --plugin was only "unknown method"; Python keeps its own words."""
    import pytest

    import depthaudit as da

    assert main(["audit", *C, "--methods", "sdfa20", "--out", "never"]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "unknown method 'sdfa20'; choose one of" in err and "(a plug-in's? name its module with --plugin" in err
    with pytest.raises(da.ConfigError) as exc:
        da.AuditConfig(base=da.TrainConfig(dataset="mnist1d"), methods=("sdfa20",))
    assert "--" not in str(exc.value)
