"""Walk 35's wrong (and closest-to-wrong unclear) cases, reproduced as the walker did them (docs/walks/walk35_*)."""

import json

import depthaudit as da
from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]


def test_a_registry_reads_as_its_names():
    """Case 132: sorted(da.FAMILIES) was a TypeError though python-api.md calls a family "a key of" it."""
    assert sorted(da.FAMILIES) == da.FAMILIES.names() == list(da.FAMILIES.keys())
    assert "resmlp" in da.FAMILIES and "bp" in list(da.METHODS)


def test_a_skipped_finished_cell_keeps_the_folders_sweep_command(tmp_path, capsys):
    """Case 166: a --cell of a narrower grid whose cell was already finished (skipped) rewrote sweep.json to its own
    command, so `report` assembled the 3-cell sweep, not the one the array was running."""
    out = tmp_path / "LC1"
    wide = ["ladder", *C, "--methods", "bp", "fa", "--seeds", "1", "--out", str(out)]
    assert main([*wide, "--cell", "0"]) == 0
    kept = json.loads((out / "sweep.json").read_text())
    assert "fa" in kept["argv"]
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--out", str(out), "--cell", "0"]) == 0
    assert "already finished" in capsys.readouterr().out
    assert json.loads((out / "sweep.json").read_text()) == kept


def test_integer_credits_are_named_as_such(tmp_path, capsys, monkeypatch):
    """Case 189: a plug-in method returning int64 credits was refused with torch's "mean(): could not infer output
    dtype …", not with what is wrong with the credits."""
    import sys

    from depthaudit.methods import METHODS

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))
    (tmp_path / "p35i.py").write_text(
        "from depthaudit.methods import METHODS\nfrom depthaudit.methods.dfa import DFA\n\n\n"
        "@METHODS.register('int35')\nclass Int35(DFA):\n    def credits(self, model, tr, e):\n"
        "        return [g.long() for g in super().credits(model, tr, e)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["--plugin", "p35i", "train", *C, "--method", "int35", "--out", str(tmp_path / "T")]) == 2
    finally:
        sys.modules.pop("p35i", None)
    err = capsys.readouterr().err.strip()
    assert "Int35.credits()[0] is torch.int64, not a floating-point tensor" in err, err
    assert "internal error" not in err and not (tmp_path / "T" / "result.json").exists()
