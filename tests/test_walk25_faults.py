"""Walk 25's wrong and unclear cases, each reproduced as the walker did it (docs/walks/walk25_*.txt)."""

import os

import pytest

import depthaudit as da
from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]
SMALL = ["--probe-batches", "1", "--probe-batch-size", "32"]


def test_an_image_augment_on_flat_data_is_refused_before_any_folder(tmp_path, capsys):
    """W1 (cases 18, 19, 21): --augment crop on mnist1d into a finished folder was "already exists … differs in
    augment; pass --force", and --force then gave the real refusal; Python built the config without complaint."""
    t = str(tmp_path / "t")
    assert main(["train", *C, "--out", t]) == 0
    capsys.readouterr()
    assert main(["train", *C, "--augment", "crop", "--out", t]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "--augment crop: mnist1d is not an image dataset; use --augment none" in err and "--force" not in err
    a = str(tmp_path / "a")
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", a]) == 0
    capsys.readouterr()
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--augment", "flip", "--out", a]) == 2
    assert "--augment flip: mnist1d is not an image dataset" in capsys.readouterr().err
    with pytest.raises(da.ConfigError) as exc:
        da.TrainConfig(dataset="mnist1d", augment="crop")
    assert exc.value.field == "augment" and "mnist1d is not an image dataset; use augment=none" in str(exc.value)
    assert da.TrainConfig(dataset="cifar10").augment == "crop+flip"  # images: the recipe's augmentation
    with pytest.raises(ValueError, match="augments images, and images=False"):
        da.DATASETS.register("w25flat", augment="crop", images=False)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_ladder_record_that_no_write_replaces_is_refused_before_training(tmp_path, capsys, kind):
    """W2 (cases 31, 32): a FIFO or folder at a ladder run's record: the run trained its whole budget, then failed
    to store (a folder: after a note promising a retrain). stores.md: refused in one line before anything trains."""
    out = tmp_path / "l"
    args = ["ladder", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", str(out)]
    assert main(args) == 0
    rec = next((out).glob("ladder_*.runs")) / "bp%2Fk1%2Fs1.json"
    rec.unlink()
    os.mkfifo(rec) if kind == "fifo" else rec.mkdir()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    print(err)
    assert f"{rec} is not a regular file" in err and "move it away and rerun" in err
    assert "run bp/k1/s1" not in err  # nothing trained


def test_report_of_unfinished_cells_never_advises_a_flag_report_lacks(tmp_path, capsys):
    """Case 37: `report` of a --cell folder with a cell pending advised "drop --stored-only" (report has none)."""
    out = str(tmp_path / "a")
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--cell", "0", "--out", out]) == 0
    capsys.readouterr()
    assert main(["report", out]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "1 of 2 cells are not finished" in err and "--stored-only" not in err
    assert "or rerun the command without --cell" in err


def test_a_replace_report_takeover_forgets_the_old_commands_cells(tmp_path, capsys):
    """W3 (cases 102, 103): after --replace-report took over a folder whose cells ran with --cell, `report` assembled
    the stale sweep.json's command and refused the folder's own, intact report as another audit's."""
    out = str(tmp_path / "r")
    args = ["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", out]
    for cell in ("0", "1"):
        assert main([*args, "--cell", cell]) == 0
    assert main(["report", out]) == 0 and (tmp_path / "r" / "sweep.json").is_file()
    assert main([*args, "--lr", "0.005", "--replace-report"]) == 0
    assert not (tmp_path / "r" / "sweep.json").exists()
    capsys.readouterr()
    assert main(["report", out]) == 0
    assert "differs in" not in capsys.readouterr().err


def test_a_plugins_variable_with_another_separator_names_the_comma(monkeypatch, capsys):
    """Case 96: DEPTHAUDIT_PLUGINS="p25:p24m" (PATH-like) gave no word on the separator and "(its p25:p24m)"."""
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "p25:p24m")
    assert main(["train", "--help"]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "DEPTHAUDIT_PLUGINS=p25:p24m: no such module" in err and "separates several modules with commas" in err


def test_report_of_cells_says_an_edited_report_is_rewritten(tmp_path, capsys):
    """Case 88: with sweep.json, `report` rewrote an edited report.json from the records without a word (without
    sweep.json the edit is refused, stores.md)."""
    import json

    out = tmp_path / "r"
    args = ["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", str(out)]
    for cell in ("0", "1"):
        assert main([*args, "--cell", cell]) == 0
    assert main(["report", str(out)]) == 0
    doc = json.loads((out / "report.json").read_text())
    doc["methods"][0]["standard_pair"]["test_acc"]["mean"] = 0.95
    (out / "report.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "report.json was edited after it was written" in err and "it is rewritten from the run records" in err
    assert json.loads((out / "report.json").read_text())["methods"][0]["standard_pair"]["test_acc"]["mean"] != 0.95


def test_cells_into_another_commands_folder_are_refused_first(tmp_path, capsys):
    """W4 (cases 119–121): audit --stored-only into a train folder said "cells are not finished; run them first",
    and intervene --cell trained and stored cells there whose report could never be written."""
    t = tmp_path / "t"
    assert main(["train", *C, "--out", str(t)]) == 0
    before = sorted(p.name for p in t.iterdir())
    capsys.readouterr()
    for argv in (["audit", *C, "--methods", "bp", "fa", "--seeds", "1", "--stored-only"],
                 ["audit", *C, "--methods", "bp", "--seeds", "1", "--list-cells"],
                 ["audit", *C, "--methods", "bp", "--seeds", "1", "--cell", "0"],
                 ["intervene", *C, "--methods", "bp", "--seeds", "1", "--penalty", "0.1", "--cell", "1"]):
        assert main([*argv, "--out", str(t)]) == 2
        err = capsys.readouterr().err
        print(err)
        assert f"{t} holds the results of another command (train); {argv[0]} cannot write there" in err
    assert sorted(p.name for p in t.iterdir()) == before  # nothing trained or written there


def test_reused_runs_of_changed_plugin_code_are_said(tmp_path, monkeypatch, capsys):
    """Case 141: the plug-in's file changed (its sha256 in the records no longer matches) and the audit reused the
    old code's runs without a word; case 140: the missing-section note names the records' plug-in module."""
    import sys

    from depthaudit.methods import METHODS

    src = tmp_path / "p25chg.py"
    src.write_text("from depthaudit.methods import METHODS\nfrom depthaudit.methods.bp import BP\n\n\n"
                   "@METHODS.register('x25chg')\nclass X25(BP):\n    K = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = str(tmp_path / "a")
    argv = ["--plugin", "p25chg", "audit", *C, "--methods", "x25chg", "--seeds", "1", *SMALL, "--out", out]
    try:
        assert main(argv) == 0
        capsys.readouterr()
        assert main(argv) == 0
        assert "plug-in code that is not what is loaded now" not in capsys.readouterr().err
        src.write_text(src.read_text().replace("K = 1.0", "K = -1.0"))
        assert main(argv) == 0  # the module is loaded already: the code that runs is the one that trained them
        assert "plug-in code that is not what is loaded now" not in capsys.readouterr().err  # (walk 34 W11)
        METHODS._items.pop("x25chg", None)  # a new process (the CLI's next command) imports the edited file
        METHODS._meta.pop("x25chg", None)
        sys.modules.pop("p25chg", None)
        assert main(argv) == 0
        err = capsys.readouterr().err
        print(err)
        assert f"{src} (changed since they were trained: another sha256)" in err and "write to a new --out" in err
    finally:
        METHODS._items.pop("x25chg", None)
        METHODS._meta.pop("x25chg", None)
        sys.modules.pop("p25chg", None)


def test_the_missing_section_note_names_the_records_plugin(tmp_path, capsys):
    """Case 140: "rerun with --plugin MODULE" though every record names the module in provenance.plugins."""
    import json

    from depthaudit.diagnostics import MEASUREMENT_KEY
    from depthaudit.stores import seal, unsealed

    out = tmp_path / "g"
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", str(out)]) == 0
    for path in (out / "runs").glob("*_all_*/result.json"):
        rec = unsealed(json.loads(path.read_text()))
        rec["history"][-1][MEASUREMENT_KEY]["gn24"] = {"per_layer": [1.0, 2.0]}
        rec["provenance"]["plugins"] = [{"module": "p24d", "file": "/nowhere/p24d.py", "sha256": "0" * 64}]
        path.write_text(json.dumps(seal(rec)))
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "the runs measured gn24" in err and "rerun the audit with --plugin p24d" in err


def test_execution_flags_without_training_are_said(tmp_path, capsys):
    """W5 (cases 157, 158): --batch-runs and --cuda-graphs with --stored-only (nothing trains) had no note, while
    --jobs had one."""
    out = str(tmp_path / "a")
    args = ["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", out]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--stored-only", "--batch-runs", "4", "--cuda-graphs", "off"]) == 0
    assert "--batch-runs, --cuda-graphs have no effect with --stored-only: nothing trains" in capsys.readouterr().err
    assert main([*args, "--list-cells", "--batch-runs", "2"]) == 0
    assert "--batch-runs has no effect with --list-cells" in capsys.readouterr().err


def test_bad_input_is_named_before_another_audits_report(tmp_path, capsys):
    """W1 (cases 193, 194): a probe batch beyond the held-out split, or a missing --data-dir, into a folder of another
    audit was "the report of another audit … --replace-report", which then refused the input itself."""
    out = str(tmp_path / "a")
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", out]) == 0
    capsys.readouterr()
    assert main(["audit", *C, "--methods", "bp", "fa", "--seeds", "1", "--probe-batch-size", "100000",
                 "--out", out]) == 2
    err = capsys.readouterr().err
    assert "--probe-batch-size 100000 exceeds the 2000 held-out examples" in err and "another audit" not in err
    assert main(["audit", "--dataset", "cifar10", "--data-dir", str(tmp_path / "none"), "--methods", "bp",
                 "--seeds", "1", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "does not exist; point it at a CIFAR copy or use --download" in err and "another audit" not in err
