"""Walk 32's unclear cases that a user could take for wrong, settled (docs/walks/walk32_cases.txt)."""

import pytest

import depthaudit as da
from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]


def test_report_of_a_missing_folder_says_it_does_not_exist(tmp_path, capsys):
    """Case 60: ``report NOPE_DIR`` said "is not a folder" of a path that does not exist at all."""
    assert main(["report", str(tmp_path / "NOPE_DIR")]) == 2
    err = capsys.readouterr().err.strip()
    assert "NOPE_DIR does not exist; pass the --out" in err, err
    (tmp_path / "f").write_text("x")
    assert main(["report", str(tmp_path / "f")]) == 2
    assert "f is not a folder" in capsys.readouterr().err


def test_stop_on_flag_takes_a_track_every_beyond_a_one_epoch_budget():
    """Case 206: the note said --track-every 2 with 1 epoch measures as 1 does, and --stop-on-flag refused it as
    not 1. Beyond the budget it is the budget's own N (here 1) before --stop-on-flag is checked; within a longer
    budget 2 is still refused."""
    base = da.TrainConfig(dataset="mnist1d", d_hidden=16, num_blocks=2, epochs=1)
    acfg = da.AuditConfig(base=base, methods=("bp",), seeds=(1,), stop_on_flag=True, track_every=2)
    assert acfg.track_every == 1 and acfg.stop_on_flag
    with pytest.raises(da.ConfigError, match="stop_on_flag=True needs the monitor every epoch"):
        da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", epochs=3), stop_on_flag=True, track_every=2)


def test_a_store_of_another_configuration_names_the_kept_cell_command_to_move_too(tmp_path, capsys):
    """Case 224: a folder a --cell sweep filled (its sweep.json kept) refuses another --alpha with "move X and
    X.runs away"; done, the new sweep ran and `report` then reran the old sweep.json's command and was refused.
    The advice names sweep.json too, and followed in full, report renders the new sweep."""
    out = tmp_path / "SAT"
    sat = ["saturation", "--family", "resmlp", "--method", "fa", "--dataset", "mnist1d", "--d-hidden", "16",
           "--epochs", "1", "--extra", "0", "1", "--out", str(out)]
    assert main([*sat, "--cell", "0"]) == 0
    assert (out / "sweep.json").is_file()
    capsys.readouterr()
    assert main([*sat, "--alpha", "0.01", "--list-cells"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds runs of a different configuration" in err and "(and sweep.json beside them" in err, err
    moved = tmp_path / "old"
    moved.mkdir()
    for p in out.iterdir():
        if p.name.startswith("saturation_") and p.suffix in (".json", ".runs") or p.name == "sweep.json":
            p.rename(moved / p.name)
    assert main([*sat, "--alpha", "0.01"]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("key,part", [("trained_test_acc", {"mean": 0.99, "std": 0.0, "n": 1}),
                                      ("checks", {"D1": {"status": "PASS"}})])
def test_a_diagnostic_summary_cannot_replace_the_audits_own_numbers(tmp_path, capsys, monkeypatch, key, part):
    """Case 154 led here: a plug-in diagnostic's summarise() is merged into each method's summary, and one keyed
    "trained_test_acc" (or "checks") replaced the audit's accuracy (or D1's verdict) in report.json: another number
    under the protocol's name. It is refused, naming the diagnostic; without it the same folder reports."""
    from depthaudit.diagnostics import DIAGNOSTICS, Diagnostic, register

    monkeypatch.setattr(DIAGNOSTICS, "_items", dict(DIAGNOSTICS._items))
    monkeypatch.setattr(DIAGNOSTICS, "_meta", dict(DIAGNOSTICS._meta))

    @register
    class Squatter(Diagnostic):
        name = "squatter"

        def compute(self, snap):
            return {"v": 1.0}

        @classmethod
        def summarise(cls, finals, num_blocks):
            return {key: part}

    out = tmp_path / "A"
    argv = ["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "diagnostic 'squatter'" in err and f"returned '{key}" in err and "its own name" in err, err
    assert not (out / "report.json").exists()
    DIAGNOSTICS._items.pop("squatter")
    DIAGNOSTICS._meta.pop("squatter", None)
    assert main(argv) == 0
    rep = __import__("json").loads((out / "report.json").read_text())
    assert rep["methods"][0]["trained_test_acc"]["mean"] != 0.99
