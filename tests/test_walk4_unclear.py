"""The fourth walk's UNCLEAR outcomes (issue 36) made clear: each test fails without its change."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import depthaudit as da
from depthaudit.cli import main
from depthaudit.errors import UsageError

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_an_abbreviated_flag_is_refused_and_the_real_one_named(tmp_path, capsys):
    """26: `audit --seeds 1 --seed 2` trained seed 2 only (argparse read --seed as --seeds)."""
    out = tmp_path / "a"
    assert main(["audit", *TINY, "--seeds", "1", "--seed", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --seed 2; did you mean --seeds?" in err and not out.exists()
    assert main(["train", *TINY, "--epoch", "1", "--out", str(out)]) == 2
    assert "did you mean --epochs?" in capsys.readouterr().err and not out.exists()


def test_a_flag_given_twice_is_said(tmp_path, capsys):
    """26: `--seeds 1 --seeds 2`: the last wins, now with a note."""
    assert main(["audit", *TINY, "--methods", "bp", "--seeds", "1", "--seeds", "2", "--list-cells",
                 "--out", str(tmp_path / "a")]) == 0
    cap = capsys.readouterr()
    assert "--seeds is given 2 times; only the last one counts" in cap.err
    assert "bp/trained/s2" in cap.out and "/s1" not in cap.out


def test_credit_mix_with_bp_says_it_has_no_effect(tmp_path, capsys):
    """5: `train --method bp --credit-mix 0.5` said nothing."""
    assert main(["train", *TINY, "--credit-mix", "0.5", "--out", str(tmp_path / "t")]) == 0
    assert "--credit-mix has no effect with --method bp" in capsys.readouterr().err
    assert main(["train", *TINY, "--method", "fa", "--credit-mix", "0.5", "--out", str(tmp_path / "u")]) == 0
    assert "--credit-mix has no effect" not in capsys.readouterr().err


def test_report_says_audit_dir_has_no_effect_without_a_ladder(tmp_path, capsys):
    """44: `report <audit folder> --audit-dir A` ignored --audit-dir silently (it cross-checks ladders only)."""
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    capsys.readouterr()
    assert main(["report", str(a), "--audit-dir", str(a)]) == 0
    assert "--audit-dir has no effect here" in capsys.readouterr().err


def test_float_labels_are_named_as_a_dtype_problem():
    """83: float labels 0.0..2.0 were blamed on their range."""
    from depthaudit.data import check_arrays
    from depthaudit.data.base import ArrayData

    x = np.zeros((6, 4), np.float32)
    y = np.array([0, 1, 2, 0, 1, 2], np.float32)
    with pytest.raises(UsageError, match=r"labels are float32, not integers; give integer class labels in 0\.\.2"):
        check_arrays("floaty", ArrayData(x, y, x, y.astype(np.int64), 3, "t", "0" * 64))


def test_monitor_steps_must_be_integers_from_zero():
    """112: step(-1) and step(nan) were accepted; step("3") a raw TypeError."""
    from depthaudit.models import ResMLP

    model = ResMLP((8,), 3, d_hidden=8, num_blocks=1, seed=0)
    g = torch.Generator().manual_seed(0)
    mon = da.TrainingMonitor(model, [(torch.randn(4, 8, generator=g), torch.tensor([0, 1, 2, 0]))], log=None)
    for bad in (-1, float("nan"), "3", 2.5, True):
        with pytest.raises(UsageError, match="integer >= 0"):
            mon.step(bad)
    assert mon.history == []
    mon.step(np.int64(0))  # a numpy integer is an integer
    assert mon.history[-1]["epoch"] == 0 and type(mon.history[-1]["epoch"]) is int


def test_depth_configs_refuse_an_unknown_method_where_they_are_built():
    """163: SaturationConfig(method="nosuch") / GrowConfig(...) were built; refused only when run."""
    for cls in (da.SaturationConfig, da.GrowConfig):
        with pytest.raises(UsageError, match="unknown method 'nosuch'"):
            cls(family="resmlp", method="nosuch")
        with pytest.raises(UsageError, match="always trains with plain backprop"):
            cls(family="resnet", method="fa")
        assert cls(family="resmlp", method="fa").method == "fa"


def test_python_out_of_the_wrong_type_names_the_keyword(tmp_path):
    """108, 113: an int as out was a TypeError; a file as the ladder's out named the CLI's --output_dir."""
    sc = da.SaturationConfig(family="resmlp", dataset="mnist1d", extra=(0,), epochs=1, d_hidden=8)
    with pytest.raises(da.ConfigError, match="out must be a folder path .* got int 123"):
        da.saturation(sc, 123)
    f = tmp_path / "file"
    f.write_text("x")
    lc = da.LadderConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1))
    with pytest.raises(da.ConfigError) as exc:
        da.ladder(lc, f)
    assert str(exc.value).startswith(f"out={f}:") and "--output_dir" not in str(exc.value)
    assert exc.value.render(cli=True).startswith(f"--output_dir {f}:")


def test_identity_replacing_another_configurations_check_says_so(tmp_path, capsys):
    """72: an identity JSON of another config was replaced without a word."""
    out = tmp_path / "id.json"
    args = ["identity", "--dataset", "mnist1d", "--num-blocks", "1", "--seeds", "1", "--probe-batches", "1",
            "--probe-batch-size", "16", "--out", str(out)]
    assert main([*args, "--d-hidden", "8"]) == 0
    assert main([*args, "--d-hidden", "8"]) == 0
    assert "replaced" not in capsys.readouterr().err  # the same check again: nothing to say
    assert main([*args, "--d-hidden", "16"]) == 0
    err = capsys.readouterr().err
    assert "note: replaced" in err and "differed in d_hidden" in err
    assert json.loads(out.read_text())["config"]["d_hidden"] == 16


def test_the_same_audit_with_its_methods_reordered_is_the_same_audit(tmp_path, capsys):
    """137: `--methods fa bp` after `--methods bp fa` (the same runs) was refused as another audit."""
    a = tmp_path / "a"
    common = ["audit", *TINY, "--probe-batches", "1", "--seeds", "43", "42", "--out", str(a)]
    assert main([*common, "--methods", "bp", "fa"]) == 0
    runs = sorted(p.name for p in (a / "runs").iterdir() if not p.name.startswith("."))
    capsys.readouterr()
    assert main([*common, "--methods", "fa", "bp"]) == 0
    assert "already" in capsys.readouterr().err  # reused, nothing retrained
    assert sorted(p.name for p in (a / "runs").iterdir() if not p.name.startswith(".")) == runs
    assert [m["method"] for m in json.loads((a / "report.json").read_text())["methods"]] == ["fa", "bp"]
    assert main([*common, "--methods", "fa", "bp", "--lr", "0.002"]) == 2
    assert "another audit (differs in" in capsys.readouterr().err


def test_a_ladder_table_counting_earlier_runs_says_so_and_returns_its_json(tmp_path, capsys):
    """138: `ladder --seeds 2` into a ladder of seeds 1 2 rendered n=2 without a word; res.record was Markdown."""
    lc = da.LadderConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), methods=("bp",),
                         seeds=(1, 2), probe_batches=1, probe_batch_size=16)
    res = da.ladder(lc, tmp_path / "l")
    assert isinstance(res.record, dict) and set(res.record["runs"]) == {f"bp/k{k}/s{s}" for k in (0, 1) for s in (1, 2)}
    assert "counts every run" not in capsys.readouterr().err
    from dataclasses import replace

    res = da.ladder(replace(lc, seeds=(2,)), tmp_path / "l")
    assert "also 2 this call did not ask for (bp/k0/s1, bp/k1/s1)" in capsys.readouterr().err
    assert Path(res.path).name.startswith("ladder_")


def test_a_plugin_changing_the_working_folder_does_not_move_the_results(tmp_path, monkeypatch, capsys):
    """87: a plug-in that chdir'd at import sent `--out t87` (relative) into its own folder."""
    plug, work = tmp_path / "plug", tmp_path / "work"
    plug.mkdir()
    work.mkdir()
    (plug / "walk4_chdir_plugin.py").write_text(f"import os\nos.chdir({str(plug)!r})\n")
    monkeypatch.syspath_prepend(str(plug))
    monkeypatch.chdir(work)
    assert main(["--plugin", "walk4_chdir_plugin", "train", *TINY, "--out", "t87"]) == 0
    assert "a plug-in changed the working folder" in capsys.readouterr().err
    assert (work / "t87" / "result.json").is_file() and not (plug / "t87").exists()


def test_a_plugin_given_as_an_absolute_path_is_named_with_an_importable_fix(tmp_path, capsys):
    """92: `--plugin /abs/dir/p.py` suggested `--plugin abs.dir.p`, not importable from where the user is."""
    assert main(["--plugin", str(tmp_path / "myplug.py"), "train", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert f"PYTHONPATH={tmp_path} depthaudit --plugin myplug" in err and not (tmp_path / "t").exists()


def test_field_and_claim_say_which_folders_they_left_out(tmp_path, capsys):
    """120, 121: a folder of another dataset/budget (field) or with nothing to plot (claim) was dropped silently."""
    from depthaudit.report import claim, field

    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    capsys.readouterr()
    assert field.main([str(tmp_path / "f.md"), str(a)]) == 0
    cap = capsys.readouterr()
    assert f"{a} left out: its audit is mnist1d, 1 epochs" in cap.err and "0 of" in cap.out
    assert field.main([str(tmp_path / "f.md"), str(a), "--dataset", "mnist1d", "--epochs", "1"]) == 0
    assert "left out" in capsys.readouterr().err  # (d=8 L=1 is not the reference ResMLP: still left out, said)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert claim.main([str(tmp_path / "c.png"), str(a), str(empty)]) == 0
    err = capsys.readouterr().err
    assert f"{empty} holds no audit or intervention result" in err and f"{a} holds" not in err


def test_an_audit_inside_another_audits_run_store_is_refused(tmp_path, capsys):
    """145: `audit --out A0/runs` wrote a second audit among A0's run folders."""
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    before = sorted(p.name for p in (a / "runs").iterdir())
    capsys.readouterr()
    for cmd, flag in (("audit", "--out"), ("ladder", "--output_dir"), ("intervene", "--out")):
        assert main([cmd, *TINY, "--methods", "bp", flag, str(a / "runs")]) == 2, cmd
        assert "it is the run store of the results in" in capsys.readouterr().err
    assert sorted(p.name for p in (a / "runs").iterdir()) == before
