"""Faults the second independent walk (issue 36) found, each reproduced here as the walker did and fixed.

Tiny models on MNIST-1D; each assertion fails on the code before its fix (named in each docstring)."""

from pathlib import Path

from depthaudit.cli import main

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1"]
PROBES = ["probes", *TINY, "--num-blocks", "1", "--method", "fa", "--alphas", "0", "1", "--probe-batches", "1"]


def test_grow_into_a_folder_of_another_recipe_is_refused_not_silently_replaced(tmp_path, capsys):
    """Walk 113–115: --lr/--batch-size/--weight-decay were not in the grow store's identity, so a rerun with another
    value retrained both arms and replaced the stored ones without a word."""
    args = ["grow", "--family", "resmlp", *TINY, "--base-blocks", "1", "--extra", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    doc = next(Path(tmp_path).glob("grow_*.json"))
    before = doc.read_bytes()
    capsys.readouterr()
    for extra in (["--lr", "0.002"], ["--batch-size", "64"], ["--weight-decay", "0.5"]):
        assert main([*args, *extra]) == 2
        err = capsys.readouterr().err
        assert "holds runs of a different configuration (differs in: " + extra[0][2:].replace("-", "_") in err, err
    assert doc.read_bytes() == before
    assert main(args) == 0  # the default recipe's own folder is still its own (no key added at the defaults)


def test_probes_warm_start_runs_are_listed_and_report_never_trains_them(tmp_path, capsys):
    """Walk 85–87: --list-cells left out the warm start's runs and `report` of a folder run by cells trained them
    (then ended with "holds no … report.json"). Now they are listed as what they are, and report refuses in one line,
    writing nothing."""
    out = str(tmp_path / "p")
    args = [*PROBES, "--pre-epochs", "1", "--out", out]
    assert main([*args, "--list-cells"]) == 0
    listing = capsys.readouterr().out
    assert "bp_pre/s42\tpending\tBP warm start, not a cell" in listing and "a1/s42\tpending" in listing, listing
    for cell in ("0", "1"):
        assert main([*args, "--cell", cell]) == 0
    capsys.readouterr()
    assert main(["report", out]) == 2
    err = capsys.readouterr().err
    assert "the BP warm start's runs are not stored (bp_pre/s42" in err and "--out " + out + " --out" not in err, err
    assert not (tmp_path / "p" / "warm_start").exists() and not list((tmp_path / "p").glob("probes_*"))


def test_report_of_a_finished_probes_cell_folder_renders_it_and_exits_0(tmp_path, capsys):
    """Walk 89: every cell done, `report` wrote the probes card and then said the folder "holds no … report.json"
    (exit 2)."""
    out = str(tmp_path / "p")
    for cell in ("0", "1"):
        assert main([*PROBES, "--out", out, "--cell", cell]) == 0
    capsys.readouterr()
    assert main(["report", out]) == 0
    assert (tmp_path / "p" / "probes_fa.md").is_file() and "holds no" not in capsys.readouterr().err
