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


def test_taking_over_a_folder_of_other_data_says_its_runs_are_replaced(tmp_path, capsys, monkeypatch):
    """W2 (cases 246–249): a rerun on regenerated data (another data_sha256) was refused with "--replace-report to
    take it over (the runs of both are kept)"; followed, the new runs overwrote the old ones in place (a run's
    folder names its config, not its data). The advice says so, and the other ways out."""
    import hashlib

    import numpy as np

    from depthaudit.data import DATASETS, ArrayData

    monkeypatch.setattr(DATASETS, "_items", dict(DATASETS._items))
    monkeypatch.setattr(DATASETS, "_meta", dict(DATASETS._meta))
    seed = {"v": 0}

    @DATASETS.register("w35data", epochs=1)
    def w35data(data_dir=None, download=False):
        r = np.random.default_rng(seed["v"])
        return ArrayData(r.normal(size=(256, 8)).astype(np.float32), r.integers(0, 3, 256),
                         r.normal(size=(256, 8)).astype(np.float32), r.integers(0, 3, 256), 3, f"rng {seed['v']}",
                         hashlib.sha256(str(seed["v"]).encode()).hexdigest())

    out = tmp_path / "RD"
    argv = ["audit", "--dataset", "w35data", "--d-hidden", "8", "--num-blocks", "1", "--methods", "bp", "--seeds", "1",
            "--probe-batches", "1", "--probe-batch-size", "32", "--out", str(out)]
    assert main(argv) == 0
    runs = sorted(p.name for p in (out / "runs").iterdir() if not p.name.startswith("."))
    seed["v"] = 1
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "differs in data_sha256" in err and "the runs of both are kept" not in err, err
    assert "its runs are retrained on this data in place: those of the other data are replaced" in err, err
    assert main([*argv, "--replace-report"]) == 0  # as said: the same run folders, now of the new data
    assert sorted(p.name for p in (out / "runs").iterdir() if not p.name.startswith(".")) == runs
    shas = {json.loads((out / "runs" / r / "result.json").read_text())["provenance"]["data"]["sha256"] for r in runs}
    assert shas == {hashlib.sha256(b"1").hexdigest()}


def test_runs_of_a_builtin_name_a_plugin_now_registers_are_said_when_reused(tmp_path, capsys, monkeypatch):
    """W1 (cases 237–243): a plug-in re-registering the built-in "bp" (or "resmlp") with overwrite=True reused the
    built-in's stored runs without a word, its card showing the built-in's numbers under the plug-in's code."""
    import sys

    from depthaudit.methods import METHODS

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))
    own = METHODS._items["bp"]
    out = tmp_path / "OV"
    argv = ["audit", *C, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
            "--out", str(out)]
    assert main(argv) == 0
    (tmp_path / "p35o.py").write_text(
        "from depthaudit.methods import METHODS\nfrom depthaudit.methods.bp import BP\n\n\n"
        "@METHODS.register('bp', overwrite=True)\nclass NoisyBP(BP):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    capsys.readouterr()
    try:
        assert main(["--plugin", "p35o", *argv]) == 0
    finally:
        sys.modules.pop("p35o", None)
    err = capsys.readouterr().err
    print(err)
    assert "2 of 2 runs already finished" in err
    assert f"{tmp_path / 'p35o.py'} (module p35o, which now registers a name they were trained under) changed " \
           "since the reused runs were trained" in err
    METHODS._items["bp"] = own  # depthaudit's own bp again (a new process): the runs' own code, nothing to say
    monkeypatch.delenv("DEPTHAUDIT_PLUGINS", raising=False)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "changed since" not in err, err


def test_a_train_over_a_run_of_other_data_says_so(tmp_path, capsys, monkeypatch):
    """W3 (cases 259, 260): a train whose data file was regenerated was refused with "result.json already exists
    (this configuration's)", though the stored run was trained on other data."""
    import hashlib

    import numpy as np

    from depthaudit.data import DATASETS, ArrayData

    monkeypatch.setattr(DATASETS, "_items", dict(DATASETS._items))
    monkeypatch.setattr(DATASETS, "_meta", dict(DATASETS._meta))
    seed = {"v": 1}

    @DATASETS.register("w35file", epochs=1)
    def w35file(data_dir=None, download=False):
        r = np.random.default_rng(seed["v"])
        return ArrayData(r.normal(size=(128, 8)).astype(np.float32), r.integers(0, 3, 128),
                         r.normal(size=(64, 8)).astype(np.float32), r.integers(0, 3, 64), 3, "rng",
                         hashlib.sha256(str(seed["v"]).encode()).hexdigest())

    argv = ["train", "--dataset", "w35file", "--d-hidden", "8", "--num-blocks", "1", "--out", str(tmp_path / "T")]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2
    assert "already exists (this configuration's);" in capsys.readouterr().err
    seed["v"] = 4
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    old, new = (hashlib.sha256(s).hexdigest()[:12] for s in (b"1", b"4"))
    assert f"already exists (this configuration's, trained on other data: its data sha256 {old}…, this data's " \
           f"{new}…); pass --force" in err, err


def test_report_of_an_edited_cell_folder_offers_only_the_fix_that_works(tmp_path, capsys):
    """W4 (cases 279–283): a --cell folder whose identity.json was edited got "move it away and rerun (or rerun
    the command without --cell …)" (audit) or "(or … remove sweep.json)" (ladder); the alternative was refused by
    the same line. Only the fix that works is offered, and followed, it works."""
    for kind in ("audit", "ladder"):
        out = tmp_path / kind
        argv = [kind, *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]
        cells = 2 if kind == "audit" else 3
        for i in range(cells):
            assert main([*argv, "--cell", str(i)]) == 0
        assert main(["report", str(out)]) == 0
        claim = out / "identity.json" if kind == "audit" else next(out.glob("*.runs")) / "identity.json"
        doc = json.loads(claim.read_text())
        doc["identity"]["seeds" if kind == "audit" else "base"] = [7] if kind == "audit" else {"lr": 9}
        claim.write_text(json.dumps(doc))
        capsys.readouterr()
        assert main(["report", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "edited" in err and "(or" not in err, err
        claim.rename(tmp_path / f"{kind}.identity.json")  # the advice: move it away (it is rewritten), rerun
        assert main(["report", str(out)]) == 0, capsys.readouterr().err


def test_report_assembling_cells_run_with_jobs_says_nothing_of_jobs(tmp_path, capsys):
    """Walk 36 case 107: after cells run with --jobs 2, `report OUT` (given no --jobs) noted "--jobs has no effect
    with --stored-only": a flag of the kept cell command, never given to report."""
    out = tmp_path / "L1"
    argv = ["ladder", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]
    for i in range(3):
        assert main([*argv, "--cell", str(i), "--jobs", "2"]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    assert "no effect" not in err, err
