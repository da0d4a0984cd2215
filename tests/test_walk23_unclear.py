"""Walk 23's unclear cases that were made clear: each reproduced as the walker did it."""

import os

import pytest

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]
SMALL = ["--probe-batches", "1", "--probe-batch-size", "32"]


def test_a_d1_value_keeps_its_three_digits_on_every_card():
    """Case 240: D1 ρ = 1.0034 printed as "1 PASS" beside cells printed "1.02" (``.3g`` drops trailing zeros)."""
    from depthaudit.report.field import _check
    from depthaudit.verdicts import check_cells, fmt_num

    for x, want in ((1.0034, "1.00"), (1.02, "1.02"), (123.4, "123"), (50.0, "50.0"), (0.5, "0.500"),
                    (1234.5, "1.23e+03")):
        print(x, fmt_num(x, ".3g"))
        assert fmt_num(x, ".3g") == want
        assert float(want) == float(format(x, ".3g"))  # the same number as plain .3g, only its zeros kept
    assert fmt_num(float("nan"), ".3g") == "nan" and fmt_num(2.5, "+.1f") == "+2.5"  # other formats: as format()
    c = {"status": "PASS", "value": 1.0034, "threshold": 1e-3, "flag_when": "value < threshold", "margin": 3.0}
    assert check_cells(c, ".3g")[0] == "1.00"
    assert _check({**c, "margin_unit": "log10"}) == "1.00 PASS"


def test_a_method_flag_that_every_row_sets_itself_is_said_to_do_nothing(tmp_path, capsys):
    """Case 12: --fa-head feedback beside fa:head=exact (the row wins, as methods.md says) had no note."""
    args = ["audit", *C, "--seeds", "1", "--list-cells", "--out", str(tmp_path / "a")]
    assert main([*args, "--methods", "fa:head=exact", "dfa", "--fa-head", "feedback"]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "--fa-head feedback has no effect: fa:head=exact sets it in the row itself" in err
    assert main([*args, "--methods", "fa:head=exact", "fa", "--fa-head", "exact"]) == 0  # a bare fa reads it
    assert "has no effect" not in capsys.readouterr().err


def test_report_refuses_a_folder_at_report_md_before_rewriting_anything(tmp_path, capsys):
    """Case 116: report.json and the figures were rewritten before report.md (a folder) was refused."""
    out = tmp_path / "a"
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", str(out)]) == 0
    (out / "report.md").unlink()
    (out / "report.md").mkdir()
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir() if p.is_file()}
    os.utime(out / "report.json", ns=(1, 1))  # an old mtime: a rewrite (even with the same bytes) shows
    before["report.json"] = (1, before["report.json"][1])
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "report.md: Is a directory; a folder stands where a file must be" in err
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir() if p.is_file()}
    assert after == before
    assert not [p for p in out.iterdir() if p.name.startswith(".render-")]


def test_a_probes_grid_grows_like_an_audit(tmp_path, capsys):
    """Case 213: probes with more α into a folder of a smaller grid was refused (an audit grows; ladders extend)."""
    out = str(tmp_path / "p")
    args = ["probes", *C, "--method", "fa", "--seeds", "1", *SMALL, "--out", out]
    assert main([*args, "--alphas", "0.5"]) == 0
    capsys.readouterr()
    assert main([*args, "--alphas", "0", "0.5"]) == 0
    err = capsys.readouterr().err
    assert "1 of 2 runs already finished" in err
    assert main([*args, "--alphas", "0"]) == 2  # fewer: refused, naming the list that covers both
    err = capsys.readouterr().err
    print(err)
    assert "differs in alphas); to add to it, name everything it holds too (alphas 0 0.5)" in err


def test_plugins_variable_with_blanks_names_its_separator(monkeypatch, capsys):
    """Case 256: DEPTHAUDIT_PLUGINS="a b" was "no such module 'a b'", its separator said nowhere."""
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "p23 p23b")
    assert main(["train", "--help"]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "separates several modules with commas" in err
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "nosuchmodule23")
    assert main(["train", "--help"]) == 2
    assert "commas" not in capsys.readouterr().err


def test_stored_only_on_a_folder_without_runs_names_dropping_it(tmp_path):
    """Case 173: stored_only=True on an empty folder advised --cell, not the plain fix (train them)."""
    import depthaudit as da

    cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), methods=("bp",),
                         seeds=(1,))
    with pytest.raises(da.UsageError, match=r"or drop --stored-only \(stored_only=True\) to train them now"):
        da.audit(cfg, tmp_path / "empty", sweep=da.SweepOptions(stored_only=True), progress=False)
    assert not (tmp_path / "empty").exists() or not any((tmp_path / "empty").iterdir())


def test_a_monitor_refusing_a_train_folder_names_it_as_one_training(tmp_path):
    """Case 71: a train folder was "another command's results (its runs and report)"."""
    import torch

    import depthaudit as da
    from depthaudit.models.resmlp import ResMLP

    assert main(["train", *C, "--out", str(tmp_path / "t")]) == 0
    model = ResMLP((40,), 10, d_hidden=8, num_blocks=1, seed=0)
    mon = da.TrainingMonitor(model, [(torch.randn(16, 40), torch.randint(0, 10, (16,)))])
    mon.step(0)
    mon.report(test_acc=0.5, frozen_acc=0.4, budget=1)
    with pytest.raises(da.UsageError, match=r"it holds one training \(its result.json\); write the monitor's"):
        mon.write(tmp_path / "t")


def test_notes_name_the_flag_as_typed_and_unexpanded_or_dash_outs(tmp_path, monkeypatch, capsys):
    """Cases 225, 138, 141: the repeat note named --k_values; --out '~/x' and --out - made folders unsaid."""
    monkeypatch.chdir(tmp_path)
    assert main(["ladder", *C, "--k-values", "0", "0", "1", "--seeds", "1", "--list-cells", "--out", "l"]) == 0
    err = capsys.readouterr().err
    assert "--k-values repeats 0" in err and "--k_values" not in err
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--list-cells", "--out", "~/x"]) == 0
    assert "begins with '~', which no shell expanded" in capsys.readouterr().err
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--list-cells", "--out", "-"]) == 0
    assert "--out - is a folder named '-' here, not standard output" in capsys.readouterr().err
