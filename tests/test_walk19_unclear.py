"""Walk 19's unclear cases that were made clear: each reproduced as the walker did it."""

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_a_batch_size_above_the_training_split_is_said(tmp_path, capsys):
    """Case 52: --batch-size 100000 on mnist1d's 8000 training examples trained one batch an epoch, unsaid."""
    assert main(["train", *C, "--batch-size", "100000", "--out", str(tmp_path / "t")]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "batch size 100000 exceeds the 8000 training examples" in err
    assert main(["train", *C, "--batch-size", "8000", "--out", str(tmp_path / "u")]) == 0
    assert "exceeds" not in capsys.readouterr().err  # exactly the split: one full batch, nothing to say


AUDIT = ('import depthaudit as da\n'
         'cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), '
         'methods=METHODS)\n')


def _python(args, tmp_path, stdin=None):
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, *args], input=stdin, capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=300)
    print(p.stdout, p.stderr)
    return p


def test_a_sweep_with_jobs_from_a_script_that_workers_cannot_import_is_refused_before_any_claim(tmp_path):
    """Case 135's kin: from ``python -`` every spawned worker died importing '<stdin>' and the sweep said "killed,
    or out of memory?"; now SweepOptions refuses it (field jobs) and nothing is claimed. jobs=1 still runs."""
    script = AUDIT.replace("METHODS", '("bp",)') + (
        'try:\n    da.audit(cfg, "A", sweep=da.SweepOptions(jobs=2))\n'
        'except da.ConfigError as e:\n    print("REFUSED", e.field, e)\n'
        'print(da.audit(cfg, "B", sweep=da.SweepOptions(jobs=1)).path)\n')
    p = _python(["-"], tmp_path, stdin=script)
    assert p.returncode == 0
    assert "REFUSED jobs jobs > 1 starts worker processes that import the main script, and <stdin> is not a file" \
        in p.stdout
    assert not (tmp_path / "A").exists() and (tmp_path / "B" / "report.json").is_file()


def test_a_method_registered_in_an_interactive_main_is_refused_for_spawned_workers(tmp_path):
    """A method registered in ``python -c`` (as in a notebook cell: a ``__main__`` with no file) is unknown to a
    spawned worker: refused in one line naming the method and the fix; the built-ins alone still run with jobs=2."""
    script = ('from depthaudit.methods import METHODS as M\n'
              '@M.register("mybp")\nclass MyBP(M.get("bp")):\n    pass\n'
              + AUDIT.replace("METHODS", '("bp", "mybp")') +
              'try:\n    da.audit(cfg, "A", sweep=da.SweepOptions(jobs=2))\n'
              'except da.UsageError as e:\n    print("REFUSED", e)\n'
              'cfg = da.AuditConfig(base=cfg.base, methods=("bp",))\n'
              'print(da.audit(cfg, "B", sweep=da.SweepOptions(jobs=2)).path)\n')
    p = _python(["-c", script], tmp_path)
    assert p.returncode == 0
    assert ("REFUSED method 'mybp' is registered in this interactive session (__main__), which worker processes "
            "cannot import") in p.stdout
    assert not list((tmp_path / "A" / "runs").glob("*/result.json")) and (tmp_path / "B" / "report.json").is_file()


def test_a_card_of_runs_under_sgd_says_so(tmp_path, capsys):
    """Case 113: the SGD sweeps' cards read as the recipe's AdamW ones ("…, 1 epochs" and nothing more)."""
    assert main(["saturation", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1", "--family", "resmlp",
                 "--extra", "0", "1", "--optimizer", "sgd",
                 "--out", str(tmp_path / "s")]) == 0
    card = next((tmp_path / "s").glob("saturation_*.md")).read_text()
    print(card.splitlines()[0])
    assert "1 epochs, optimizer sgd" in card
    assert main(["audit", *C, "--methods", "bp", "--optimizer", "sgd", "--out", str(tmp_path / "a")]) == 0
    assert "1 epochs, optimizer sgd" in (tmp_path / "a" / "report.md").read_text()
    assert main(["audit", *C, "--methods", "bp", "--out", str(tmp_path / "b")]) == 0
    assert "optimizer" not in (tmp_path / "b" / "report.md").read_text().split("\n\n")[0]  # the recipe's: unsaid


def test_an_edited_or_truncated_train_record_is_named_as_such(tmp_path, capsys):
    """Cases 118, 119: an edited result.json was "this configuration's"; a truncated one "not depthaudit's"; a
    --warm-start beside an unreadable record trained without a word."""
    import json
    import shutil

    te, tt = tmp_path / "te", tmp_path / "tt"
    assert main(["train", *C, "--out", str(te)]) == 0
    shutil.copytree(te, tt)
    capsys.readouterr()
    assert main(["train", *C, "--out", str(te)]) == 2
    assert "already exists (this configuration's)" in capsys.readouterr().err  # intact: as before
    doc = json.loads((te / "result.json").read_text())
    doc["config"]["lr"] = 0.5
    (te / "result.json").write_text(json.dumps(doc))
    assert main(["train", *C, "--out", str(te)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "its config differs from the folder's claim (identity.json) in lr: edited after it was written?" in err
    (tt / "result.json").write_bytes((tt / "result.json").read_bytes()[:50])
    assert main(["train", *C, "--out", str(tt)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "cannot be read as JSON (a damaged or truncated record" in err and "not depthaudit's" not in err
    assert main(["train", *C, "--warm-start", str(tt / "checkpoint.pt"), "--out", str(tmp_path / "tw")]) == 0
    err = capsys.readouterr().err
    assert err.count("the result.json beside it cannot be read (damaged or truncated?)") == 1


def test_report_of_the_file_system_root_is_refused_without_walking_it(capsys):
    """Case 102: `report /` walked the whole file system and blamed /proc/1/cwd."""
    for d in ("/", "/proc", "/sys/kernel"):
        assert main(["report", d]) == 2
        err = capsys.readouterr().err
        print(err)
        assert len(err.strip().splitlines()) == 1 and "not a results folder" in err and "Permission" not in err


def test_an_idle_warm_up_is_no_warm_up_so_no_other_configuration(tmp_path, capsys):
    """The idle-flag class of walk 19's W5/W6: --warmup X noted "has no effect" with --warmup-fraction 0, or as
    the method itself, still made "a run of another configuration". The runs are bit-identical (checked here), so
    the config stores no warm-up; from Python a fraction of 0 is a UserWarning."""
    import json

    import pytest

    import depthaudit as da

    t = tmp_path / "T"
    assert main(["train", *C, "--epochs", "2", "--method", "fa", "--out", str(t)]) == 0
    for extra in (["--warmup", "dfa", "--warmup-fraction", "0"], ["--warmup", "fa"]):
        capsys.readouterr()
        assert main(["train", *C, "--epochs", "2", "--method", "fa", *extra, "--out", str(t)]) == 2
        err = capsys.readouterr().err
        print(err)
        assert "has no effect" in err or "is the method itself" in err
        assert "already exists (this configuration's)" in err
        u = tmp_path / ("U" + extra[1])
        assert main(["train", *C, "--epochs", "2", "--method", "fa", *extra, "--out", str(u)]) == 0
        a, b = (json.loads((p / "result.json").read_text()) for p in (t, u))
        drop = ("seconds",)  # (wall time: the one field that differs between two equal runs)
        assert a["final"] == b["final"] and [{k: v for k, v in e.items() if k not in drop} for e in a["history"]] \
            == [{k: v for k, v in e.items() if k not in drop} for e in b["history"]]  # the same run, bit for bit
        assert b["config"]["warmup"] is None
    with pytest.warns(UserWarning, match="warmup='dfa' has no effect with warmup_fraction=0"):
        cfg = da.TrainConfig(warmup="dfa", warmup_fraction=0)
    assert cfg.warmup is None and cfg == da.TrainConfig()
    assert da.TrainConfig(method="fa", warmup="fa") == da.TrainConfig(method="fa")
    assert da.TrainConfig(method="fa", warmup="fa:head=exact").warmup == "fa:head=exact"  # another spec: kept


def test_an_idle_context_length_names_no_other_depth_run(tmp_path, capsys):
    """saturation --family resmlp --context 32: noted "has no effect", yet every stored depth "differs in context
    (its files changed?)" and was trained again; the config now holds it at its default, as base_width."""
    import depthaudit as da

    assert da.SaturationConfig(family="resmlp", context=32) == da.SaturationConfig(family="resmlp")
    assert da.SaturationConfig(family="gpt", context=32).context == 32
    S = ["saturation", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1", "--family", "resmlp", "--extra",
         "0", "--out", str(tmp_path / "S")]
    assert main(S) == 0
    capsys.readouterr()
    assert main([*S, "--context", "32"]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "--context has no effect" in err and "1 of 1 runs already finished" in err and "differs" not in err


def test_stop_after_at_the_whole_budget_is_no_stop(tmp_path, capsys):
    """--stop-after N with --epochs N trains every epoch (bit for bit the plain run) but made "another
    configuration" (train) and "another audit" (report.json); now it is no stop, said once."""
    import depthaudit as da

    assert da.TrainConfig(epochs=3, stop_after=3) == da.TrainConfig(epochs=3)
    assert da.TrainConfig(epochs=3, stop_after=2).stop_after == 2
    assert da.SaturationConfig(family="resmlp", epochs=3, stop_after=3).stop_after is None
    A = ["audit", *C, "--methods", "bp", "--out", str(tmp_path / "A")]
    assert main(A) == 0
    capsys.readouterr()
    assert main([*A, "--stop-after", "1"]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "--stop-after 1 is the whole budget (--epochs 1)" in err and "2 of 2 runs already finished" in err
