"""What the eighth independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import depthaudit as da
from depthaudit.cli import main
from depthaudit.errors import UsageError

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_a_sweeps_base_train_blocks_is_refused_not_recorded_as_what_trained(tmp_path):
    """W1 (31): AuditConfig(base=TrainConfig(train_blocks="last:1")) trained all/none but recorded last:1."""
    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1, train_blocks="last:1")
    for make in (da.AuditConfig, da.LadderConfig):
        with pytest.raises(da.ConfigError, match="train_blocks 'last:1' is not what this sweep trains"):
            make(base=base, methods=("bp",))
    assert not any(tmp_path.iterdir())


def test_a_users_own_files_in_the_report_folder_are_never_written_over(tmp_path, capsys):
    """W2 (40, 41): audit --out, report and TrainingMonitor.write replaced a user's report.md and pictures."""
    out = tmp_path / "a"
    out.mkdir()
    (out / "report.md").write_text("MY NOTES\n")
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "report.md exists and is not depthaudit's" in err and err.count("\n") == 1
    assert (out / "report.md").read_text() == "MY NOTES\n" and sorted(p.name for p in out.iterdir()) == ["report.md"]
    (out / "report.md").unlink()
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(out)]) == 0  # its own files: rewritten freely
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(out)]) == 0
    (out / "scale_checks.png").write_text("my picture")
    assert main(["report", str(out)]) == 2
    assert "scale_checks.png exists and is not depthaudit's" in capsys.readouterr().err
    assert (out / "scale_checks.png").read_text() == "my picture"
    # the monitor of a user's own loop
    from depthaudit.evaluator.monitor import TrainingMonitor

    mine = tmp_path / "m"
    mine.mkdir()
    (mine / "depth_utility.png").write_bytes(b"\x89PNG\r\n\x1a\nnot ours")
    mon = TrainingMonitor.__new__(TrainingMonitor)  # (write refuses before it reads the monitor's report)
    mon._need = lambda r: r
    with pytest.raises(UsageError, match="depth_utility.png exists and is not depthaudit's"):
        mon.write(mine, {"schema": "depthaudit.audit.v1"})
    assert sorted(p.name for p in mine.iterdir()) == ["depth_utility.png"]


def test_a_plugin_option_whose_flag_is_ours_is_one_line_naming_its_file(tmp_path, monkeypatch, capsys):
    """W3 (46): method 'batch' with option 'size' makes --batch-size twice: an internal-error traceback."""
    (tmp_path / "walk8coll.py").write_text(
        "from depthaudit.methods import METHODS, Option\nfrom depthaudit.methods.dfa import DFA\n\n\n"
        "@METHODS.register('walk8batch')\nclass BatchDFA(DFA):\n    options = {'size': Option(1.0, 'a size', lo=0)}\n\n"
        "    def __init__(self, model, seed, size=1.0):\n        super().__init__(model, seed)\n"
        "        self.size = size\n")
    (tmp_path / "walk8coll2.py").write_text(  # the flag --walk8batch-size is free; --batch-size needs the name
        "from depthaudit.methods import METHODS, Option\nfrom depthaudit.methods.dfa import DFA\n\n\n"
        "@METHODS.register('batch')\nclass BatchDFA(DFA):\n    options = {'size': Option(1.0, 'a size', lo=0)}\n\n"
        "    def __init__(self, model, seed, size=1.0):\n        super().__init__(model, seed)\n"
        "        self.size = size\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from depthaudit.methods import METHODS

    try:
        for argv in (["train", *TINY, "--out", str(tmp_path / "t")], ["ladder", "--help"]):
            assert main(["--plugin", "walk8coll2", *argv]) == 2
            err = capsys.readouterr().err
            assert "method 'batch' (walk8coll2.py)" in err and "--batch-size" in err and "Traceback" not in err
            assert err.count("\n") == 1
    finally:
        METHODS._items.pop("batch", None)
        METHODS._items.pop("walk8batch", None)
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("cmd", [
    ["grow", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "3", "--stop-after", "1",
     "--extra", "1"],
    ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "3",
     "--stop-after", "1", "--extra", "0"],
    ["ladder", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "3", "--stop-after", "1",
     "--methods", "bp", "--k-values", "1", "--seeds", "1"]])
def test_a_card_of_runs_cut_short_says_so_in_its_title(tmp_path, capsys, cmd):
    """W4 (59-61): with --stop-after, the ladder, saturation and grow cards titled the run with the full budget."""
    out = tmp_path / "o"
    assert main([*cmd, "--output_dir" if cmd[0] == "ladder" else "--out", str(out)]) == 0
    (md,) = out.glob("*.md")
    title = md.read_text().splitlines()[0]
    print(title)
    assert "first 1 of 3 epochs" in title and " 3 epochs" not in title.replace("of 3 epochs", "")


def test_a_warm_start_checkpoint_replaced_under_its_path_is_another_run(tmp_path, capsys):
    """W5 (78, 120): the warm start was named by its path only; a sweep reused runs from the old weights."""
    for seed in ("1", "2"):
        assert main(["train", *TINY, "--seed", seed, "--out", str(tmp_path / f"t{seed}")]) == 0
    ck = tmp_path / "ck.pt"
    shutil.copy(tmp_path / "t1" / "checkpoint.pt", ck)
    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1, warm_start=str(ck))
    assert base.warm_start_sha256 and len(base.warm_start_sha256) == 64
    # (a sweep's base no longer carries a warm start, walk 33 W3: it is train's alone, cli.md; the run is named
    # by the checkpoint's content there)
    first = da.train(dataclasses.replace(base, method="fa"), tmp_path / "L", progress=False).record
    shutil.copy(tmp_path / "t2" / "checkpoint.pt", ck)  # other weights, same path
    base2 = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1, warm_start=str(ck))
    assert base2.warm_start_sha256 != base.warm_start_sha256
    with pytest.raises(UsageError, match="warm_start_sha256"):  # the run of the old weights: another run
        da.train(dataclasses.replace(base2, method="fa"), tmp_path / "L", progress=False)
    fresh = da.train(dataclasses.replace(base2, method="fa"), tmp_path / "L2", progress=False).record
    a, b = (r["final"]["test_acc"] for r in (first, fresh))
    print("from the first checkpoint:", a, "from the second:", b)
    assert a != b
    # no warm start: the run's name is what it always was (stores written before the field still match)
    plain = da.TrainConfig(dataset="mnist1d")
    assert plain.warm_start_sha256 is None and "warm_start_sha256" not in plain.identity_dict()


def test_report_over_a_parent_folder_ends_non_zero_when_it_skipped_one(tmp_path, capsys):
    """W6 (80): `report PARENT` skipped an edited record with a note and exited 0 (the folder itself: exit 2)."""
    good, bad = tmp_path / "p" / "good", tmp_path / "p" / "bad"
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(good)]) == 0
    shutil.copytree(good, bad)
    doc = json.loads((bad / "report.json").read_text())
    doc["methods"][0]["trained_test_acc"]["mean"] = 0.99  # an edit of a sealed report
    (bad / "report.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["report", str(tmp_path / "p")]) == 2
    out, err = capsys.readouterr()
    assert f"(from {good})" in out  # the others are rendered
    assert f"skipped {bad}" in err and "1 folder(s) could not be rendered" in err
    assert main(["report", str(good)]) == 0


def test_walk8_unclear_outcomes_made_clear(tmp_path, capsys):
    """50, 52, 106 (unclear): the report scripts' --help printed only usage (exit 2); a repeated --epochs was read
    as a folder; da.identity(..., progress=False) a TypeError."""
    from depthaudit.report import claim, field

    for mod in (field, claim):
        assert mod.main(["--help"]) == 0
        assert "python -m depthaudit.report." in capsys.readouterr().out
    assert field.main([str(tmp_path / "f.md"), str(tmp_path), "--epochs", "1", "--epochs", "2"]) == 2
    assert "--epochs is given 2 times" in capsys.readouterr().err
    r = da.identity(da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1), seeds=1, progress=False)
    assert r.record["per_seed"]


def test_a_users_file_under_a_sweeps_table_name_is_refused_before_anything(tmp_path, capsys):
    """43 (unclear): a user's own ladder_d8_L1_mnist1d.md was replaced by the ladder's table without a word."""
    out = tmp_path / "l"
    out.mkdir()
    (out / "ladder_d8_L1_mnist1d.md").write_text("my notes\n")
    argv = ["ladder", *TINY, "--methods", "bp", "--k-values", "1", "--seeds", "1", "--output_dir", str(out)]
    assert main(argv) == 2
    assert "ladder_d8_L1_mnist1d.md exists and is not depthaudit's" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["ladder_d8_L1_mnist1d.md"]  # nothing made, no lock either
    (out / "ladder_d8_L1_mnist1d.md").unlink()
    assert main(argv) == 0 and main(argv) == 0  # its own table: rewritten freely


def test_a_warm_start_from_another_dataset_names_the_dataset(tmp_path, capsys):
    """75 (unclear): the advice named --arch/--d-hidden/--num-blocks when the dataset was what differed."""
    assert main(["train", *TINY, "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    assert main(["train", "--dataset", "teacher-a0", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--warm-start", str(tmp_path / "t" / "checkpoint.pt"), "--out", str(tmp_path / "u")]) == 2
    assert "it was trained with --dataset mnist1d: give the same" in capsys.readouterr().err
    assert not (tmp_path / "u").exists()


def test_executor_slurm_without_slurm_is_refused_before_the_folder_is_claimed(tmp_path, capsys, monkeypatch):
    """Walk 7 case 199 (unclear): with no sbatch, submitit quietly ran the 'array' here; now one line, nothing made."""
    import shutil as sh

    monkeypatch.setattr(sh, "which", lambda name, *a, **k: None)  # (a machine without SLURM, whatever this one has)
    assert main(["audit", *TINY, "--methods", "bp", "--executor", "slurm", "--out", str(tmp_path / "s")]) == 2
    assert "no SLURM here (sbatch is not on PATH)" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    with pytest.raises(da.ConfigError, match="no SLURM here"):
        da.SweepOptions(executor="slurm")
    da.SweepOptions(executor="slurm", slurm_cluster="local")  # submitit's local stand-in, asked for: allowed


def test_walk11_an_edited_monitor_report_names_the_way_it_is_written_again(tmp_path, capsys):
    """Walk 11 cases 86, 87: an edited report of a user's loop (TrainingMonitor.write) was refused with advice to
    rerun "the audit command" from its records; it has neither."""
    import json

    import torch

    from depthaudit.evaluator import TrainingMonitor
    from depthaudit.models import ResidualAdapter

    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, h):
            return h + self.lin(torch.relu(h))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
            self.layers = torch.nn.ModuleList([Block(), Block()])

        def forward(self, x):
            h = self.stem(x)
            for b in self.layers:
                h = b(h)
            return self.head(h)

    x, y = torch.randn(128, 8), torch.randint(0, 4, (128,))
    mon = TrainingMonitor(ResidualAdapter(Net(), embed="stem", blocks="layers", readout="head",
                                          block_includes_residual=True), [(x, y)], log=None)
    mon.step(0)
    mon.report(test_acc=0.5, frozen_acc=0.4, budget=1)
    mon.write(tmp_path / "m")
    assert main(["report", str(tmp_path / "m")]) == 0
    doc = json.loads((tmp_path / "m" / "report.json").read_text())
    doc["methods"][0]["trained_test_acc"]["mean"] = 0.95
    (tmp_path / "m" / "report.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["report", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "was edited after it was written" in err and "TrainingMonitor.report, then .write" in err, err
    assert "audit command" not in err


def test_walk11_a_report_set_stays_whole_when_one_file_cannot_be_replaced(tmp_path, monkeypatch, capsys):
    """Walk 11 cases 77, 78: report.md (or one figure) immutable: the audit replaced report.json and the other
    figures, leaving a mixed set while its line said "nothing half-written". Now the moves before the failing one
    are put back. The failure is injected at each file of the set in turn (and, where chattr works, for real)."""
    import os
    import subprocess

    import depthaudit.io as dio

    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "fa", "--out", str(a)]) == 0
    def report_set():  # (identity.json is the folder's claim, not the report: it grows with the dfa runs stored)
        return {p.name: p.read_bytes() for p in a.iterdir() if p.is_file() and p.name[0] != "." and p.suffix != ".lock"
                and p.name != "identity.json"}

    before = report_set()
    real = os.replace
    for victim in sorted(before):
        def failing(src, dst, victim=victim):
            if Path(dst) == a / victim and ".previous" not in str(src):
                raise PermissionError(1, "Operation not permitted", str(src))
            return real(src, dst)

        monkeypatch.setattr(dio.os, "replace", failing)
        capsys.readouterr()
        assert main(["audit", *TINY, "--methods", "bp", "fa", "dfa", "--out", str(a)]) == 2, victim
        err = capsys.readouterr().err
        assert f"{a / victim}" in err and "Operation not permitted" in err, err
        monkeypatch.setattr(dio.os, "replace", real)
        now = report_set()
        assert now == before, (victim, [n for n in now if now[n] != before.get(n)])
        assert not [p for p in a.iterdir() if p.name.startswith(".render-")]
    md = a / "report.md"
    if subprocess.run(["chattr", "+i", str(md)], capture_output=True).returncode == 0:  # (root on ext4)
        try:
            assert main(["audit", *TINY, "--methods", "bp", "fa", "dfa", "--out", str(a)]) == 2
            assert report_set() == before
        finally:
            subprocess.run(["chattr", "-i", str(md)], capture_output=True)
    assert main(["audit", *TINY, "--methods", "bp", "fa", "dfa", "--out", str(a)]) == 0  # and then it is written
    assert '"method": "dfa"' in (a / "report.json").read_text() and "dfa" in md.read_text()
