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
    p = tmp_path / "p"  # (the cells claimed the folder, probes_fa.identity.json, as an audit's cells do: walk 32 W3)
    assert not (p / "warm_start").exists() and not (p / "probes_fa.json").exists() and not (p / "probes_fa.md").exists()


def test_report_of_a_finished_probes_cell_folder_renders_it_and_exits_0(tmp_path, capsys):
    """Walk 89: every cell done, `report` wrote the probes card and then said the folder "holds no … report.json"
    (exit 2)."""
    out = str(tmp_path / "p")
    for cell in ("0", "1"):
        assert main([*PROBES, "--out", out, "--cell", cell]) == 0
    capsys.readouterr()
    assert main(["report", out]) == 0
    assert (tmp_path / "p" / "probes_fa.md").is_file() and "holds no" not in capsys.readouterr().err


def test_a_fifo_or_folder_given_as_a_file_is_named_for_what_it_is(tmp_path, capsys):
    """Walk 161–163: --warm-start/--text given a FIFO or a folder said "no such file" (it exists)."""
    import os

    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dir").mkdir()
    cases = [(["train", "--warm-start", str(tmp_path / "pipe")], "is not a regular file"),
             (["train", "--warm-start", str(tmp_path / "dir")], "is a folder"),
             (["saturation", "--family", "gpt", "--text", str(tmp_path / "pipe"), "--list-cells"], "is not a regular"),
             (["saturation", "--family", "gpt", "--text", str(tmp_path / "dir"), "--list-cells"], "is a folder")]
    for args, said in cases:
        assert main([*args, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert said in err and "no such file" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_a_model_folder_without_weights_is_refused_before_the_store_is_claimed(tmp_path, capsys):
    """Walk 133–135: a folder with config.json alone was refused only when its run started, leaving a claimed store
    (six paths) that then refused the next, correct, command as "another configuration"."""
    import json

    import pytest

    pytest.importorskip("transformers")
    m = tmp_path / "emptymodel"
    m.mkdir()
    (m / "config.json").write_text(json.dumps({
        "model_type": "gpt_neox", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
        "intermediate_size": 16, "vocab_size": 50, "max_position_embeddings": 64}))
    out = tmp_path / "o"
    assert main(["saturation", "--family", "hf", "--model", str(m), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the folder holds no weights" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() or not any(out.iterdir())
    assert main(["saturation", "--family", "hf", "--model", str(tmp_path / "nothere"), "--out", str(out)]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_a_rule_is_said_once_and_messages_hold_no_python_reprs(tmp_path, capsys):
    """Walk 64/153: "0.0 must be > 0 (float > 0)" said the rule twice; walk 2: "--k_values [5]" a Python list."""
    assert main(["train", "--method", "cb", "--cb-tau", "0", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "must be > 0" in err and "(float > 0)" not in err, err
    assert main(["train", "--method", "cb", "--cb-tau", "abc", "--out", str(tmp_path / "o")]) == 2
    assert "is not a number (float > 0)" in capsys.readouterr().err  # a type error: the rule is not yet said
    assert main(["ladder", "--num-blocks", "2", "--k-values", "5", "--list-cells", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--k-values 5: each k must be in 0..2" in err and "[" not in err, err


def test_identity_on_a_full_disk_does_not_speak_of_stored_runs(tmp_path, monkeypatch, capsys):
    """Walk 18: identity (which trains nothing) ended a full-disk line with "finished runs are stored"."""
    import errno
    import os

    from depthaudit import io as dio

    real = os.fsync

    def fsync(fd):
        if "id.json" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(dio.os, "fsync", fsync)
    assert main(["identity", "--dataset", "mnist1d", "--out", str(tmp_path / "id.json")]) == 2
    err = capsys.readouterr().err
    assert "No space left" in err and "(nothing half-written)" in err and "runs" not in err, err
    assert not (tmp_path / "id.json").exists()


def test_a_file_where_a_folder_must_be_is_said_so(tmp_path, capsys):
    """Walk 34: a file named runs/.locks gave "File exists; check that path" (it did not say what stood there)."""
    (tmp_path / "a" / "runs").mkdir(parents=True)
    (tmp_path / "a" / "runs" / ".locks").write_text("")
    assert main(["audit", *TINY, "--num-blocks", "1", "--methods", "bp", "--probe-batches", "1",
                 "--out", str(tmp_path / "a")]) == 2
    assert "something that is not a folder stands where a folder must be" in capsys.readouterr().err


def test_report_on_a_read_only_folder_says_to_copy_it(tmp_path, monkeypatch, capsys):
    """Walk 141/142: report of a folder on a read-only mount said "choose a writable location" (report has none)."""
    import errno
    import os
    import shutil

    from depthaudit import io as dio

    shutil.copytree(Path(__file__).resolve().parents[1] / "docs" / "results" / "audit_mnist1d", tmp_path / "a")
    real = os.fsync

    def fsync(fd):
        if "report" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(dio.os, "fsync", fsync)
    assert main(["report", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "copy the folder somewhere writable and report it there" in err and "runs are stored" not in err, err


def test_a_fifo_where_a_run_record_belongs_is_refused_before_training(tmp_path, capsys):
    """Walk 27: a FIFO in place of a run's result.json was announced "trains again", trained, then left as it was."""
    import os

    args = ["audit", *TINY, "--num-blocks", "1", "--methods", "bp", "--probe-batches", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    rec = sorted(tmp_path.glob("runs/*_bp_all_*/result.json"))[0]
    rec.unlink()
    os.mkfifo(rec)
    ckpt = rec.parent / "checkpoint.pt"
    before = ckpt.stat().st_mtime_ns
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{rec} is not a regular file" in err or f"{rec} is a" in err, err
    assert "it is not replaced: move it away and rerun" in err and ckpt.stat().st_mtime_ns == before, err


def test_wandb_without_a_login_is_one_line_before_the_folder_is_claimed(tmp_path, monkeypatch, capsys):
    """Walk 229–230: `--log wandb` with no API key was an "internal error" with W&B's traceback, folder claimed.

    (A Python sweep given as a dict is named too, walk 178.)"""
    import pytest

    import depthaudit as da

    pytest.importorskip("wandb")
    for k in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: no login
    out = tmp_path / "o"
    assert main(["audit", *TINY, "--num-blocks", "1", "--methods", "bp", "--log", "wandb", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--log wandb: no W&B API key found for api.wandb.ai; run `wandb login`" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists(), err
    with pytest.raises(da.ConfigError, match="sweep must be a SweepOptions"):
        da.audit(da.AuditConfig(base=da.TrainConfig(d_hidden=8, num_blocks=1, epochs=1), methods=("bp",)), out,
                 sweep={"jobs": 2})
    assert not out.exists()


def test_the_ladder_cross_check_finds_the_audits_trained_run(tmp_path, capsys):
    """Walk 192–193: k=L read "not in audit" though the audit held that run (its tracking carries the monitor)."""
    c = [*TINY, "--num-blocks", "1", "--seeds", "7"]
    assert main(["audit", *c, "--methods", "bp", "--probe-batches", "1", "--out", str(tmp_path / "a")]) == 0
    assert main(["ladder", *c, "--methods", "bp", "--output_dir", str(tmp_path / "l"),
                 "--audit-dir", str(tmp_path / "a")]) == 0
    md = next((tmp_path / "l").glob("ladder_*.md")).read_text()
    rows = [r for r in md.splitlines() if r.startswith("| bp/k")]
    assert len(rows) == 2 and all(r.endswith("| yes |") for r in rows), rows


def test_sweep_options_from_python_are_checked_where_built(tmp_path):
    """Walk 175/179/180: SweepOptions(executor='bogus') was refused only after the ladder's store was claimed (which
    then refused the next, correct, command); jobs=0 and batch_runs=0 were accepted; cell=0 was an AttributeError."""
    import pytest

    import depthaudit as da

    for kw, said in ((dict(executor="bogus"), "executor 'bogus' not known; use one of local, ray, slurm"),
                     (dict(jobs=0), "jobs must be >= 1"), (dict(batch_runs=0), "batch_runs must be >= 1"),
                     (dict(cell=0), "cell must be a string"), (dict(log=("mlflow",)), "log 'mlflow' not known")):
        with pytest.raises(da.ConfigError, match=said):
            da.SweepOptions(**kw)
    assert not any(tmp_path.iterdir())


def test_a_stray_file_in_a_runs_folder_gets_advice_that_works(tmp_path, capsys):
    """Walk 201–207: a file in a ladder's .runs/ that is no run of its grid: report said "rerun … to train that run
    again", the rerun was silent, report refused again, forever. Now the rerun names it and the fix is to move it."""
    args = ["ladder", *TINY, "--num-blocks", "1", "--methods", "bp", "--seeds", "1", "--output_dir", str(tmp_path)]
    assert main(args) == 0
    junk = next(tmp_path.glob("ladder_*.runs")) / "junk.json"
    junk.write_text("{}")
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 2
    assert f"move it out of {junk.parent}" in capsys.readouterr().err
    assert main(args) == 0
    assert f"{junk} has no 'final' object; it is not a run of this command's grid" in capsys.readouterr().err
    junk.rename(tmp_path / "junk.json")  # the advice, followed
    assert main(["report", str(tmp_path)]) == 0


def test_report_json_is_sealed_so_an_edited_provenance_shows(tmp_path, capsys):
    """Walk 255–256: report.json's provenance (git commit, device) edited by hand was rendered as the report's."""
    import json

    args = ["audit", *TINY, "--num-blocks", "1", "--methods", "bp", "--probe-batches", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    p = tmp_path / "report.json"
    doc = json.loads(p.read_text())
    assert "record_sha256" in doc
    assert main(["report", str(tmp_path)]) == 0  # re-rendered and re-sealed: still intact
    doc = json.loads(p.read_text())
    doc["provenance"]["device"] = "cuda H100"
    p.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 2
    assert "report.json was edited after it was written" in capsys.readouterr().err
    assert "cuda H100" not in (tmp_path / "report.md").read_text()
    assert main(args) == 0 and json.loads(p.read_text())["provenance"]["device"] != "cuda H100"  # the fix works


def test_the_evaluator_names_non_finite_probe_inputs_and_the_monitor_an_empty_out(tmp_path, monkeypatch):
    """Walk 221: a NaN in a probe batch was blamed on the network's blocks; walk 225: TrainingMonitor.write("")
    wrote its report into the current folder."""
    import pytest
    import torch

    import depthaudit as da

    torch.manual_seed(0)
    net = torch.nn.ModuleDict({"stem": torch.nn.Linear(8, 16), "head": torch.nn.Linear(16, 3),
                               "layers": torch.nn.ModuleList([torch.nn.Linear(16, 16)])})
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    x[0, 0] = float("nan")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.layers, self.head = net["stem"], net["layers"], net["head"]

        def forward(self, v):
            h = self.stem(v)
            for b in self.layers:
                h = h + b(torch.relu(h))
            return self.head(h)

    class Block(torch.nn.Module):
        def __init__(self, lin):
            super().__init__()
            self.lin = lin

        def forward(self, h):
            return self.lin(torch.relu(h))

    m = Net()
    m.layers = torch.nn.ModuleList([Block(net["layers"][0])])
    from depthaudit.errors import UsageError

    with pytest.raises(UsageError, match="probe batch 0's inputs hold NaN or inf"):
        da.CreditEvaluator(da.ResidualAdapter(m, embed="stem", blocks="layers", readout="head"), [(x, y)])
    x[0, 0] = 0.0
    mon = da.TrainingMonitor(da.ResidualAdapter(m, embed="stem", blocks="layers", readout="head"), [(x, y)])
    mon.step(0)
    mon.report(test_acc=0.5, frozen_acc=0.4, budget=1)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="is an empty path"):
        mon.write("")
    assert not any(tmp_path.iterdir())


def test_yes_no_flags_take_yes_or_no_and_python_lists_are_named(tmp_path):
    """Walk 259: `--fa-stream-identity yes` was "unrecognized arguments: yes" though its help says yes/no;
    walk 38: SaturationConfig(extra=1) was a raw TypeError."""
    import json

    import pytest

    import depthaudit as da

    for value, want in (([], True), (["yes"], True), (["no"], False)):
        out = tmp_path / f"o{len(value)}{value[0] if value else ''}"
        assert main(["train", "--method", "fa-stream", "--fa-stream-identity", *value, "--epochs", "0",
                     "--d-hidden", "8", "--num-blocks", "1", "--out", str(out)]) == 0
        assert json.loads((out / "result.json").read_text())["config"]["method_options"]["identity"] is want
    with pytest.raises(da.ConfigError, match="extra must be a tuple of integers, got 1"):
        da.SaturationConfig(extra=1)


def test_an_unknown_progress_setting_is_noted_once(monkeypatch, capsys):
    """Walk 105: DEPTHAUDIT_PROGRESS=banana was ignored without a word."""
    from depthaudit import progress

    monkeypatch.setenv("DEPTHAUDIT_PROGRESS", "banana")
    progress._unknown.cache_clear()
    progress.wanted(True), progress.wanted(True)
    assert capsys.readouterr().err.count("DEPTHAUDIT_PROGRESS='banana' is not 0 or 1 (nor false/true, no/yes, "
                                         "off/on); ignored") == 1


def test_identity_with_stdout_closed_says_its_card_on_stderr(tmp_path):
    """Walk 97: `identity … >&-` printed nothing anywhere and wrote nothing (its only output), exit 0."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root / "src"),
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run(f"{sys.executable} -m depthaudit identity --dataset mnist1d --d-hidden 8 --num-blocks 1 "
                       "--seeds 1 >&-", shell=True, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0 and "quantity" in p.stderr, p.stderr


def test_three_unclear_lines_now_name_the_fix(tmp_path, capsys):
    """Walk 248: a ViT width not divisible by its heads named the keyword d_hidden with no fix; walk 195:
    --penalty-form rel without a penalty was silently ignored; walk 90: a sweep.json edited to hold a `train`
    command ended in "unrecognized arguments: --stored-only"."""
    import json

    assert main(["train", "--arch", "vit", "--d-hidden", "10", "--epochs", "0", "--out", str(tmp_path / "v")]) == 2
    assert "give a multiple of 4, e.g. 8" in capsys.readouterr().err
    assert main(["train", "--penalty-form", "rel", *TINY[:-2], "--epochs", "0", "--num-blocks", "1",
                 "--out", str(tmp_path / "p")]) == 0
    assert "--penalty-form rel has no effect without a penalty" in capsys.readouterr().err
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sweep.json").write_text(json.dumps({"schema": "depthaudit.sweep.v1",
                                                           "argv": ["train", "--out", "victim"]}))
    assert main(["report", str(tmp_path / "s")]) == 2
    assert "sweep.json is damaged (it holds no sweep command)" in capsys.readouterr().err
    assert not (tmp_path / "victim").exists()
