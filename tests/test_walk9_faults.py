"""What the ninth independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from depthaudit.cli import main

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


@pytest.mark.parametrize("cmd,files", [
    (["intervene", *TINY, "--methods", "bp", "--lambdas", "0", "0.1"], ["intervention.md", "intervention.png"]),
    (["probes", *TINY, "--method", "fa", "--alphas", "0.5"], ["probes_fa.md", "credit_mix_fa.png"]),
    (["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1", "--extra", "0"],
     ["saturation_resmlp_bp_mnist1d.md", "saturation_resmlp_bp_mnist1d.png"]),
    (["grow", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "2", "--extra", "1"],
     ["grow_resmlp1+1_bp_mnist1d.md"])])
def test_a_users_own_file_among_a_commands_results_is_never_written_over(tmp_path, capsys, cmd, files):
    """Cases 2-6: intervene, probes, saturation, grow replaced a user's .md or (text) .png of their names."""
    for name in files:
        out = tmp_path / name.replace(".", "_")
        out.mkdir()
        (out / name).write_text("mine\n")
        assert main([*cmd, "--out", str(out)]) == 2
        assert f"{name} exists and is not depthaudit's" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == [name] and (out / name).read_text() == "mine\n"


@pytest.mark.parametrize("cmd,name", [
    (["intervene", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "3", "--stop-after",
      "1", "--methods", "bp", "--lambdas", "0", "0.1"], "intervention.md"),
    (["probes", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "3", "--stop-after", "1",
      "--method", "fa", "--alphas", "0.5", "--pre-epochs", "1"], "probes_fa.md")])
def test_intervene_and_probes_cards_say_the_runs_stopped_early(tmp_path, cmd, name):
    """Cases 11, 12: with --stop-after, the cards titled the runs with the whole budget."""
    assert main([*cmd, "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / name).read_text()
    print(md.splitlines()[0])
    assert "first 1 of 3 epochs" in md.splitlines()[0]
    if name.startswith("probes"):
        assert "then the first 1 of 3 more (--stop-after)" in md


def _audit_and_edit(tmp_path, seal: bool):
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(a)]) == 0
    e = tmp_path / ("sealed" if seal else "unsealed")
    shutil.copytree(a, e)
    doc = json.loads((e / "report.json").read_text())
    doc["methods"][0]["standard_pair"]["test_acc"]["mean"] = 0.928
    doc["methods"][0]["trained_test_acc"]["mean"] = 0.928
    if not seal:
        doc.pop("record_sha256")
    (e / "report.json").write_text(json.dumps(doc))
    return e


@pytest.mark.parametrize("seal", [True, False])
def test_the_field_table_and_the_claim_figure_never_render_an_edited_report(tmp_path, capsys, seal):
    """Cases 40-43: report.field and report.claim rendered a hand-edited report.json (seal kept or removed)."""
    from depthaudit.report import claim, field

    e = _audit_and_edit(tmp_path, seal)
    assert field.main([str(tmp_path / "f.md"), str(e), "--epochs", "1", "--dataset", "mnist1d"]) == 2
    err = capsys.readouterr().err
    assert "report.json" in err and not (tmp_path / "f.md").exists()
    assert claim.main([str(tmp_path / "c.png"), str(e)]) == 2
    assert "report.json" in capsys.readouterr().err and not (tmp_path / "c.png").exists()
    assert field.main([str(tmp_path / "g.md"), str(tmp_path / "a"), "--epochs", "1", "--dataset", "mnist1d"]) == 0
    assert claim.main([str(tmp_path / "d.png"), str(tmp_path / "a")]) == 0


def test_an_edited_intervention_is_not_plotted(tmp_path, capsys):
    """Case 43: the claim figure plotted an intervention.json whose accuracy was edited."""
    from depthaudit.report import claim

    i = tmp_path / "i"
    assert main(["intervene", *TINY, "--methods", "bp", "--lambdas", "0", "0.1", "--out", str(i)]) == 0
    doc = json.loads((i / "intervention.json").read_text())
    doc["rows"][0]["by_lambda"][1]["test_acc"]["mean"] = 0.777
    (i / "intervention.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert claim.main([str(tmp_path / "c.png"), str(i)]) == 2
    assert "intervention.json" in capsys.readouterr().err


def test_the_warm_start_of_a_moved_probes_folder_is_reused_not_retrained(tmp_path, capsys):
    """Cases 61, 62: the warm-start arms named their checkpoint by its path: another spelling or a moved folder
    retrained them (and left a second pair of run folders)."""
    argv = ["probes", *TINY, "--method", "dfa", "--alphas", "0", "--pre-epochs", "1"]
    assert main([*argv, "--out", str(tmp_path / "p")]) == 0
    shutil.move(tmp_path / "p", tmp_path / "q")
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "q")]) == 0
    assert "3 of 3 runs already finished" in capsys.readouterr().err
    assert len(list((tmp_path / "q" / "warm_start" / "runs").glob("*/result.json"))) == 4
    recs = [json.loads(p.read_text()) for p in (tmp_path / "q" / "warm_start" / "runs").glob("*/result.json")]
    assert all(len(r["config"]["warm_start_sha256"]) == 64 for r in recs if r["config"]["warm_start"])


def test_an_unknown_mplbackend_does_not_stop_a_command(tmp_path):
    """Case 67: MPLBACKEND=nosuch made every command that draws an internal-error traceback."""
    env = {**os.environ, "MPLBACKEND": "nosuch", "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "audit", *TINY, "--methods", "bp", "--probe-batches", "1",
                        "--out", str(tmp_path / "a")], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    for mod, out in (("claim", "c.png"), ("field", "f.md")):
        extra = ["--epochs", "1", "--dataset", "mnist1d"] if mod == "field" else []
        p = subprocess.run([sys.executable, "-m", f"depthaudit.report.{mod}", str(tmp_path / out), str(tmp_path / "a"),
                            *extra], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr


def test_a_fifo_where_the_data_file_goes_is_one_line_not_a_hang(tmp_path, capsys):
    """Case 85: a FIFO named cifar-10-python.tar.gz (or the one .zip) blocked the command forever."""
    for name in ("cifar-10-python.tar.gz", "cifar10-jpeg.zip"):
        d = tmp_path / name.split(".")[0]
        d.mkdir()
        os.mkfifo(d / name)
        assert main(["train", "--dataset", "cifar10", "--data-dir", str(d), "--epochs", "1",
                     "--out", str(tmp_path / "o")]) == 2
        assert f"{d / name} is not a regular file (a FIFO, device or socket)" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_report_never_rewrites_a_users_file_under_a_tables_name(tmp_path, capsys):
    """Case 104: report re-rendered a ladder (or saturation) over a user's own .md / text .png of its name."""
    lad = tmp_path / "l"
    assert main(["ladder", *TINY, "--methods", "bp", "--k-values", "1", "--seeds", "1", "--output_dir", str(lad)]) == 0
    (lad / "ladder_d8_L1_mnist1d.md").write_text("my notes\n")
    assert main(["report", str(lad)]) == 2
    assert "ladder_d8_L1_mnist1d.md exists and is not depthaudit's" in capsys.readouterr().err
    assert (lad / "ladder_d8_L1_mnist1d.md").read_text() == "my notes\n"
    (lad / "ladder_d8_L1_mnist1d.md").unlink()
    (lad / "ladder_d8_L1_mnist1d.png").write_text("a text file")
    assert main(["report", str(lad)]) == 2 and (lad / "ladder_d8_L1_mnist1d.png").read_text() == "a text file"


def test_cells_run_from_python_say_how_to_finish_from_python(tmp_path):
    """Case 112: from Python the message said `depthaudit report OUT`, which cannot work (no command is kept)."""
    import depthaudit as da

    cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), methods=("bp",))
    r = da.audit(cfg, tmp_path / "a", sweep=da.SweepOptions(cell="0"), progress=False)
    assert "the same call without cell= writes" in r.stopped and "depthaudit report" not in r.stopped
    da.audit(cfg, tmp_path / "a", sweep=da.SweepOptions(cell="1"), progress=False)
    assert da.audit(cfg, tmp_path / "a", progress=False).record["methods"][0]["method"] == "bp"


def test_cells_run_with_a_plugin_are_assembled_by_report(tmp_path, monkeypatch, capsys):
    """Cases 114, 115: sweep.json kept `--plugin M` before the command, and report called it damaged."""
    (tmp_path / "walk9pc.py").write_text(
        "from depthaudit.methods import METHODS\nfrom depthaudit.methods.bp import BP\n\n\n"
        "@METHODS.register('walk9a')\nclass A(BP):\n    name = 'walk9a'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from depthaudit.methods import METHODS

    out = tmp_path / "c"
    try:
        for cell in ("0", "1"):
            assert main(["--plugin", "walk9pc", "ladder", *TINY, "--methods", "walk9a", "--seeds", "1",
                         "--k-values", "0", "1", "--cell", cell, "--output_dir", str(out)]) == 0
        assert json.loads((out / "sweep.json").read_text())["argv"][:2] == ["--plugin", "walk9pc"]
        capsys.readouterr()
        assert main(["report", str(out)]) == 0
        assert "assembling the finished cells: depthaudit --plugin walk9pc ladder" in capsys.readouterr().err
    finally:
        METHODS._items.pop("walk9a", None)


def _docs_diagnostic() -> str:
    """The diagnostic plug-in exactly as docs/extending.md shows it (the walker used the docs' own example)."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "extending.md").read_text(encoding="utf-8")
    return next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class CreditNorm" in b)


def test_the_docs_diagnostic_plugin_over_runs_stored_before_it(tmp_path, capsys):
    """Cases 119, 120: the docs' own diagnostic raised KeyError 'per_layer' over runs stored before it existed."""
    (tmp_path / "walk9diag.py").write_text(_docs_diagnostic())
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "fa", "--probe-batches", "1", "--out", str(a)]) == 0
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    run = [sys.executable, "-m", "depthaudit", "--plugin", "walk9diag"]
    p = subprocess.run([*run, "audit", *TINY, "--methods", "bp", "fa", "dfa", "--probe-batches", "1", "--out",
                        str(a)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads((a / "report.json").read_text())
    have = {m["method"]: "credit_norm" in m for m in doc["methods"]}
    assert have == {"bp": False, "fa": False, "dfa": True}  # measured where it ran, absent where it did not
    assert "Per-layer mean credit norm" in (a / "report.md").read_text()
    p = subprocess.run([*run, "report", str(a)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def test_a_users_identity_json_is_never_taken_for_a_claim(tmp_path, capsys):
    """Cases 128, 129: a user's identity.json was 'another sweep', and --replace-report / --force replaced it."""
    for cmd, take in ((["audit", *TINY, "--methods", "bp"], "--replace-report"), (["train", *TINY], "--force")):
        out = tmp_path / cmd[0]
        out.mkdir()
        (out / "identity.json").write_text('{"name": "me", "version": 3}')
        for extra in ([], [take]):
            assert main([*cmd, *extra, "--out", str(out)]) == 2
            assert "identity.json exists and is not depthaudit's" in capsys.readouterr().err
            assert sorted(p.name for p in out.iterdir()) == ["identity.json"]
            assert json.loads((out / "identity.json").read_text()) == {"name": "me", "version": 3}


def test_a_store_inside_another_results_files_records_is_refused(tmp_path, capsys):
    """Cases 26, 27: a ladder (or saturation) into another ladder's .runs folder was accepted, and broke it (walk 10
    case 22: also through a symbolic link to it)."""
    lad = tmp_path / "l"
    argv = ["ladder", *TINY, "--methods", "bp", "--k-values", "1", "--seeds", "1", "--output_dir"]
    assert main([*argv, str(lad)]) == 0
    before = sorted(p.name for p in (lad / "ladder_d8_L1_mnist1d.runs").iterdir())
    (tmp_path / "lnk").symlink_to(lad / "ladder_d8_L1_mnist1d.runs")  # walk 10 case 22: the same through a link
    for out in (lad / "ladder_d8_L1_mnist1d.runs", lad / "ladder_d8_L1_mnist1d.runs" / "sub", tmp_path / "lnk" / "x",
                tmp_path / "lnk"):
        assert main([*argv, str(out)]) == 2
        assert "the run records of" in capsys.readouterr().err
    assert sorted(p.name for p in (lad / "ladder_d8_L1_mnist1d.runs").iterdir()) == before
    assert main(["report", str(lad)]) == 0


def test_data_changed_in_place_after_load_data_is_refused_not_recorded_as_the_dataset(tmp_path):
    """Cases 36, 37: a bundle whose tensors were changed in place was recorded under the dataset's sha256, and a CLI
    audit of the real dataset then reused those runs (bp 'at chance', FLAG D3)."""
    import torch

    import depthaudit as da

    cfg = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    d = da.load_data("mnist1d", None, False, torch.device("cpu"))
    da.audit(da.AuditConfig(base=cfg, methods=("bp",)), tmp_path / "ok", progress=False, data=d)  # as loaded: fine
    for change in ("zero inputs", "shuffle labels"):
        d = da.load_data("mnist1d", None, False, torch.device("cpu"))
        if change == "zero inputs":
            d.x_train.mul_(0)
        else:
            d.y_train.copy_(d.y_train.flip(0))
        with pytest.raises(da.ConfigError, match="its tensors changed after da.load_data"):
            da.audit(da.AuditConfig(base=cfg, methods=("bp",)), tmp_path / "a", progress=False, data=d)
        with pytest.raises(da.ConfigError, match="its tensors changed after da.load_data"):
            da.ladder(da.LadderConfig(base=cfg, methods=("bp",), k_values=(1,), seeds=(1,)), tmp_path / "l",
                      progress=False, data=d)
    assert not (tmp_path / "a").exists() and not (tmp_path / "l").exists()


def test_train_inside_a_sweeps_run_store_is_refused_not_advised_to_force(tmp_path, capsys):
    """Cases 156-158: train --out into a ladder's .runs/ or an audit's run folder advised --force, which replaced
    the store's claim or a finished audit run's record."""
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(a)]) == 0
    run = next((a / "runs").glob("*bp_all*"))
    before = (run / "result.json").read_bytes()
    for extra in ([], ["--force"]):
        assert main(["train", *TINY, "--lr", "0.002", *extra, "--out", str(run)]) == 2
        err = capsys.readouterr().err
        assert "the run store of the results in" in err and "--force" not in err
    assert (run / "result.json").read_bytes() == before
    assert main(["report", str(a)]) == 0


def test_walk10_a_users_json_under_a_results_name_and_train_into_a_warm_start_store(tmp_path, capsys):
    """Walk 10 cases 3, 11, 23, 24: a user's intervention.json / probes_fa.json was replaced; train --force into a
    probes warm-start store (no claim file beside it) replaced a BP pre-run's record. train's default runs/<config>
    folders side by side stay fine."""
    for cmd, name in ((["intervene", *TINY, "--methods", "bp", "--lambdas", "0", "0.1"], "intervention.json"),
                      (["probes", *TINY, "--method", "fa", "--alphas", "0.5"], "probes_fa.json")):
        out = tmp_path / name.split(".")[0]
        out.mkdir()
        (out / name).write_text('{"mine": 1}')
        assert main([*cmd, "--out", str(out)]) == 2
        assert f"{name} exists and is not depthaudit's" in capsys.readouterr().err
        assert (out / name).read_text() == '{"mine": 1}'
    p = tmp_path / "p"
    assert main(["probes", *TINY, "--method", "dfa", "--alphas", "0", "--pre-epochs", "1", "--out", str(p)]) == 0
    run = next((p / "warm_start" / "runs").glob("*/result.json")).parent
    before = (run / "result.json").read_bytes()
    for out in (run, p / "warm_start" / "runs" / "new"):
        assert main(["train", *TINY, "--force", "--out", str(out)]) == 2
        assert "the run store of the results in" in capsys.readouterr().err
    assert (run / "result.json").read_bytes() == before and not (p / "warm_start" / "runs" / "new").exists()
    for lr in ("0.001", "0.002"):  # train's own folders side by side under runs/: not a sweep's store
        assert main(["train", *TINY, "--lr", lr, "--out", str(tmp_path / "runs" / lr)]) == 0


def test_walk10_two_probes_with_other_pre_epochs_keep_their_own_warm_start(tmp_path, capsys):
    """Walk 10 cases 80-82: probes of other --pre-epochs in one folder shared warm_start/bp_pre_s42.pt (a run was
    recorded under the other's checkpoint; each rerun retrained the other's warm start)."""
    p = tmp_path / "p"
    fa = ["probes", *TINY, "--method", "fa", "--alphas", "0", "--pre-epochs", "1", "--out", str(p)]
    assert main(fa) == 0
    assert main(["probes", *TINY, "--method", "dfa", "--alphas", "0", "--pre-epochs", "2", "--out", str(p)]) == 0
    assert len(list((p / "warm_start").glob("bp_pre_*.pt"))) == 2
    capsys.readouterr()
    assert main(fa) == 0
    assert "3 of 3 runs already finished" in capsys.readouterr().err  # nothing of fa's retrained


def test_walk10_a_users_sweep_json_checkpoint_or_result_is_never_replaced(tmp_path, capsys):
    """Walk 10 cases 153-161: --cell replaced a user's sweep.json and report called it damaged; train replaced a
    user's checkpoint.pt, and advised --force over a user's result.json."""
    a = tmp_path / "a"
    a.mkdir()
    (a / "sweep.json").write_text("my sweep notes")
    assert main(["audit", *TINY, "--methods", "bp", "--cell", "0", "--out", str(a)]) == 2
    assert "sweep.json exists and is not depthaudit's" in capsys.readouterr().err
    assert (a / "sweep.json").read_text() == "my sweep notes"
    # walk 11 cases 4-9: refused before the folder is claimed (no identity.json, lock or empty ladder left to
    # refuse the user's next, different command as "another audit")
    for i, cmd in enumerate((["audit", "--methods", "bp"], ["ladder", "--methods", "bp", "--seeds", "1"],
                             ["intervene", "--methods", "bp", "--lambdas", "0", "0.1"])):
        c = tmp_path / f"c{i}"
        c.mkdir()
        (c / "sweep.json").write_text("notes")
        assert main([cmd[0], *TINY, *cmd[1:], "--cell", "0", "--out", str(c)]) == 2
        assert "sweep.json exists and is not depthaudit's" in capsys.readouterr().err
        assert sorted(x.name for x in c.iterdir()) == ["sweep.json"], cmd
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(a)]) == 0  # the whole audit: no sweep.json needed
    assert main(["report", str(a)]) == 0
    assert "sweep.json is not depthaudit's; it is left alone" in capsys.readouterr().err
    for name, text in (("checkpoint.pt", "my weights"), ("result.json", '{"mine": 1}')):
        t = tmp_path / name.split(".")[0]
        t.mkdir()
        (t / name).write_text(text)
        for extra in ([], ["--force"]):
            assert main(["train", *TINY, *extra, "--out", str(t)]) == 2
            err = capsys.readouterr().err
            assert f"{name} exists" in err and "pass --force" not in err
        assert (t / name).read_text() == text and sorted(x.name for x in t.iterdir()) == [name]


def test_walk11_a_damaged_report_names_the_way_out_that_works(tmp_path, capsys):
    """Walk 11 cases 49-53: a truncated report.json/intervention.json: `report` advised rerunning the command, and
    the rerun refused the file as not depthaudit's. The advice is now the one the rerun takes."""
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(a)]) == 0
    rep = a / "report.json"
    rep.write_text(rep.read_text()[:500])
    capsys.readouterr()
    assert main(["report", str(a)]) == 2
    assert "damaged — move it away, then rerun the command" in capsys.readouterr().err
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(a)]) == 2  # the file is kept, as the advice says
    assert "exists and cannot be read as JSON (a damaged" in capsys.readouterr().err and len(rep.read_text()) == 500
    rep.rename(tmp_path / "moved.json")  # the advice, followed: the runs are reused, the report written again
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(a)]) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err and main(["report", str(a)]) == 0


def test_walk11_a_users_own_json_under_a_results_name_is_left_alone(tmp_path, capsys):
    """Walk 11 cases 102-104: a user's report.json in a subfolder was "not an audit report of this version … rerun
    depthaudit audit into that folder" (a rerun refuses it) and made the whole tree's report exit 2."""
    t = tmp_path / "t"
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(t / "a")]) == 0
    (t / "mine").mkdir()
    (t / "mine" / "report.json").write_text('{"my": "report"}')
    (t / "mine2").mkdir()
    (t / "mine2" / "intervention.json").write_text('{"my": "grid"}')
    capsys.readouterr()
    assert main(["report", str(t)]) == 0
    err = capsys.readouterr().err
    assert "mine/report.json is not depthaudit's" in err and "mine2/intervention.json is not depthaudit's" in err
    assert main(["report", str(t / "mine")]) == 2  # the folder itself: said, with the way that works
    err = capsys.readouterr().err
    assert "is not depthaudit's (a JSON without its schema)" in err and "rerun" not in err, err
    assert (t / "mine" / "report.json").read_text() == '{"my": "report"}'


def test_walk11_a_train_folder_claimed_by_a_training_that_never_finished_says_so(tmp_path, capsys):
    """Walk 11 cases 30, 31: a training that died (a plug-in's os._exit) left its claim; the next train of another
    config was told --force would replace "its result", which did not exist."""
    t = tmp_path / "t"
    assert main(["train", *TINY, "--out", str(t)]) == 0
    capsys.readouterr()
    for f in t.iterdir():
        if f.name in ("result.json", "checkpoint.pt"):
            f.unlink()  # as a training that ended before writing them leaves the folder
    assert main(["train", *TINY, "--lr", "0.002", "--out", str(t)]) == 2
    assert "(it holds no result: that training never finished)" in capsys.readouterr().err
    assert main(["train", *TINY, "--lr", "0.002", "--force", "--out", str(t)]) == 0
