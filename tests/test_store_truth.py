"""Issue 36: a store believes no record it finds, and never writes over what is not its own.

Every read checks a record against where it was found (its key, its store's identity, its seal); derived files
(report.json, intervention.json) are checked against the run records behind them; a FIFO or a device as a target
is refused; two trainings into one folder: one trains, the other is refused before training.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from _util import without_wallclock

from depthaudit.cli import main
from depthaudit.errors import UsageError
from depthaudit.io import write_json
from depthaudit.stores import SEAL, seal

ROOT = Path(__file__).resolve().parents[1]
LADDER = ["ladder", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "1", "--methods", "fa",
          "--k-values", "0", "1", "--seeds", "1", "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "64"]
FILE, RUNS = "ladder_d16_L1_mnist1d.json", "ladder_d16_L1_mnist1d.runs"
K0, K1 = "fa%2Fk0%2Fs1.json", "fa%2Fk1%2Fs1.json"
AUDIT = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "1", "--methods", "bp", "--seeds", "1",
         "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "64"]


@pytest.fixture(scope="module")
def ladders(tmp_path_factory):
    """The same tiny ladder at lr 0.001 (the default) and at lr 0.002."""
    root = tmp_path_factory.mktemp("ladders")
    assert main([*LADDER, "--out", str(root / "a")]) == 0
    assert main([*LADDER, "--lr", "0.002", "--out", str(root / "b")]) == 0
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _one_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("depthaudit: error")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _accs(out: Path) -> dict:
    return {k: r["final"]["test_acc"] for k, r in json.loads((out / FILE).read_text())["runs"].items()}


def _rerun_trains_again(out: Path, ladder: Path, capsys, names: list[str], words: str) -> None:
    """The ladder run again over ``out``: each record named once (with ``words``), trained again, the file as new."""
    assert main([*LADDER, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    for name in names:
        said = [ln for ln in err.splitlines() if name in ln]
        assert len(said) == 1 and words in said[0] and "is retrained" in said[0], err
    assert f"{2 - len(names)} of 2 runs already finished" in err or len(names) == 2, err
    fresh = without_wallclock(json.loads((out / FILE).read_text())["runs"])
    assert fresh == without_wallclock(json.loads((ladder / FILE).read_text())["runs"])


def test_swapped_records_are_never_rendered_under_each_others_rung(ladders, tmp_path, capsys):
    out = _copy(ladders / "a", tmp_path / "o")
    a, b = out / RUNS / K0, out / RUNS / K1
    a_text, b_text = a.read_text(), b.read_text()
    a.write_text(b_text)
    b.write_text(a_text)  # both stay sealed and intact: only their place is wrong
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert K0 in err and "was stored as run 'fa/k1/s1', not 'fa/k0/s1'" in err, err
    _rerun_trains_again(out, ladders / "a", capsys, [K0, K1], "was stored as run")


def test_swapped_records_without_their_place_are_caught_by_their_config(ladders, tmp_path, capsys):
    """Records written before they noted their place: the key and the store's identity say what they must hold."""
    out = _copy(ladders / "a", tmp_path / "o")
    for p in (out / RUNS).glob("fa*.json"):
        rec = json.loads(p.read_text())
        rec.pop("stored_in", None)  # (absent where the version predates it)
        write_json(p, seal(rec))
    (out / RUNS / K0).rename(out / "x")
    (out / RUNS / K1).rename(out / RUNS / K0)
    (out / "x").rename(out / RUNS / K1)
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert K0 in err and "another configuration than its place 'fa/k0/s1' says (differs in: train_blocks)" in err


def test_a_symlinked_record_is_refused(ladders, tmp_path, capsys):
    out = _copy(ladders / "a", tmp_path / "o")
    (out / RUNS / K0).unlink()
    (out / RUNS / K0).symlink_to(K1)  # the k=1 record, read as if it were k=0's
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert K0 in err and "is a symbolic link (to fa%2Fk1%2Fs1.json)" in err
    _rerun_trains_again(out, ladders / "a", capsys, [K0], "symbolic link")
    assert not (out / RUNS / K0).is_symlink()


def test_a_record_copied_from_a_ladder_of_another_lr_is_refused(ladders, tmp_path, capsys):
    out = _copy(ladders / "a", tmp_path / "o")
    shutil.copy(ladders / "b" / RUNS / K1, out / RUNS / K1)  # sealed, intact, the right key: lr 0.002
    assert _accs(ladders / "a")["fa/k1/s1"] != _accs(ladders / "b")["fa/k1/s1"]
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert K1 in err and "another configuration (differs in: lr)" in err
    _rerun_trains_again(out, ladders / "a", capsys, [K1], "differs in: lr")


def test_a_record_whose_seal_was_removed_is_never_reused(ladders, tmp_path, capsys):
    out = _copy(ladders / "a", tmp_path / "o")
    p = out / RUNS / K1
    rec = json.loads(p.read_text())
    rec["final"]["test_acc"] = 0.97
    del rec[SEAL]  # looks like a record older than seals, in a store whose records are sealed
    p.write_text(json.dumps(rec))
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert K1 in err and f"has no {SEAL} seal though this store's records are sealed" in err
    _rerun_trains_again(out, ladders / "a", capsys, [K1], "no record_sha256 seal")
    assert _accs(out)["fa/k1/s1"] != 0.97


def test_a_store_older_than_seals_still_loads_and_is_resealed(ladders, tmp_path, capsys):
    """No record sealed (as a version before seals wrote them): read, reused, rendered, and sealed by the rerun."""
    out = _copy(ladders / "a", tmp_path / "o")
    for p in (out / RUNS).glob("fa*.json"):
        rec = json.loads(p.read_text())
        p.write_text(json.dumps({k: v for k, v in rec.items() if k not in (SEAL, "stored_in")}))
    assert main(["report", str(out)]) == 0
    assert main([*LADDER, "--out", str(out)]) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    for p in (out / RUNS).glob("fa*.json"):  # re-sealed with their place: a later edit or move shows
        rec = json.loads(p.read_text())
        assert SEAL in rec and rec["stored_in"]["key"] == p.stem.replace("%2F", "/")


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit") / "a"
    assert main(["audit", *AUDIT, "--out", str(out)]) == 0
    return out


def test_an_audit_record_with_its_seal_removed_is_retrained_and_its_verdict_stands(audit_dir, tmp_path, capsys):
    out = _copy(audit_dir, tmp_path / "o")
    frozen = next(p for p in (out / "runs").glob("*_none_*/result.json"))
    rec = json.loads(frozen.read_text())
    rec["final"]["test_acc"] = 0.0  # a frozen baseline at 0: the D3 gap becomes large, its verdict would flip
    del rec[SEAL]
    frozen.write_text(json.dumps(rec))
    assert main(["report", str(out)]) == 2
    assert "no record_sha256 seal" in _one_error(capsys.readouterr().err)
    assert main(["audit", *AUDIT, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert sum(frozen.parent.name in ln and "no record_sha256 seal" in ln for ln in err.splitlines()) == 1, err
    old, new = (json.loads((d / "report.json").read_text())["methods"][0] for d in (audit_dir, out))
    print("D3 before", old["checks"]["D3"], "after", new["checks"]["D3"])
    assert new["checks"] == old["checks"] and new["frozen_test_acc"] == old["frozen_test_acc"]


def test_a_hand_edited_report_json_is_refused(audit_dir, tmp_path, capsys):
    out = _copy(audit_dir, tmp_path / "o")
    assert main(["report", str(out)]) == 0  # intact: rendered
    capsys.readouterr()
    doc = json.loads((out / "report.json").read_text())
    doc["methods"][0]["checks"]["D3"]["status"] = "PASS" if doc["methods"][0]["checks"]["D3"]["status"] == "FLAG" \
        else "FLAG"
    (out / "report.json").write_text(json.dumps(doc))
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert "report.json: method bp's 'checks' is not what its run records give" in err


def _edited_intervention_report(out, capsys) -> tuple[str, dict]:
    """Edit one λ cell of ``out/intervention.json`` by hand, then `report` it: its one error line, the edited doc."""
    doc = json.loads((out / "intervention.json").read_text())
    doc["rows"][0]["by_lambda"][1]["test_acc"]["mean"] = 0.99
    (out / "intervention.json").write_text(json.dumps(doc))
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    return err, doc


def test_a_hand_edited_intervention_json_is_refused(tmp_path, capsys):
    out = tmp_path / "iv"
    assert main(["intervene", *AUDIT, "--lambdas", "0", "0.01", "--out", str(out)]) == 0
    assert main(["report", str(out)]) == 0
    capsys.readouterr()
    err, doc = _edited_intervention_report(out, capsys)
    assert "its row for bp at λ=0.01 is not what its audit says" in err
    doc["rows"][0]["by_lambda"][1]["test_acc"]["mean"] = 0.99
    doc["audits"]["0.01"]["methods"][0]["trained_test_acc"]["mean"] = 0.99  # the audit edited to agree
    (out / "intervention.json").write_text(json.dumps(doc))
    assert main(["report", str(out)]) == 2
    assert "is not what its run records give" in _one_error(capsys.readouterr().err)


# -- only regular files of its own are replaced --------------------------------------------------------------

def test_a_fifo_or_a_device_as_a_target_is_refused_and_left_as_it_is(audit_dir, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, Path(os.devnull)):
        assert main(["identity", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--seeds", "1",
                     "--out", str(target)]) == 2
        err = _one_error(capsys.readouterr().err)
        print(err)
        assert str(target) in err and ("a FIFO" in err or "a character device" in err)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    with pytest.raises(UsageError, match="is a FIFO"):  # the last gate, whoever writes: the atomic replace
        write_json(fifo, {"x": 1})
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and not list(tmp_path.glob(".pipe.*"))
    out = _copy(audit_dir, tmp_path / "o")  # a report whose markdown is a FIFO: nothing of it is replaced
    (out / "report.md").unlink()
    os.mkfifo(out / "report.md")
    before = (out / "report.json").read_bytes()
    assert main(["audit", *AUDIT, "--out", str(out)]) == 2
    assert "report.md is a FIFO" in _one_error(capsys.readouterr().err)
    assert stat.S_ISFIFO(os.stat(out / "report.md").st_mode) and (out / "report.json").read_bytes() == before


def _env(tmp_path):
    given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *given]), "OMP_NUM_THREADS": "1",
            "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}


def _ctrl_c_delivered():
    """In the child: SIGINT at its default (a shell starting the tests in the background ignores it, and the child
    would inherit that), so the signal this test sends is the Ctrl-C a user types."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_two_trainings_into_one_folder_one_trains_the_other_is_refused_before_training(tmp_path):
    train = [sys.executable, "-m", "depthaudit", "train", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks",
             "1", "--out", "o"]
    first = subprocess.Popen([*train, "--epochs", "200"], cwd=tmp_path, env=_env(tmp_path), stderr=subprocess.PIPE,
                             text=True, preexec_fn=_ctrl_c_delivered)
    try:
        line = first.stderr.readline()
        while line and not line.startswith("epoch 1/"):  # it holds the folder and is training now
            line = first.stderr.readline()
        assert line, "the first training never started"
        second = subprocess.run([*train, "--epochs", "1", "--lr", "0.002"], cwd=tmp_path, env=_env(tmp_path),
                                capture_output=True, text=True, timeout=300)
        print(second.returncode, second.stderr)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert "being written by another depthaudit train" in second.stderr
        assert "epoch 1/" not in second.stderr  # refused before it trained
        assert first.poll() is None and not (tmp_path / "o" / "result.json").exists()
    finally:
        first.send_signal(2)
        first.communicate(timeout=60)
    assert first.returncode == 130
    assert not (tmp_path / "o").exists()  # interrupted: its claim went with it, the folder it made too
    rc = subprocess.run([*train, "--epochs", "1", "--lr", "0.002"], cwd=tmp_path, env=_env(tmp_path),
                        capture_output=True, text=True, timeout=300)
    assert rc.returncode == 0 and (tmp_path / "o" / "result.json").is_file(), rc.stderr
    claim = json.loads((tmp_path / "o" / "identity.json").read_text())
    assert claim["kind"] == "train" and claim["identity"]["lr"] == 0.002


def test_runs_swapped_in_a_ladder_file_without_records_are_refused(ladders, tmp_path, capsys):
    """As an older version left it (the runs only in the JSON): the key still says what each run must be."""
    out = _copy(ladders / "a", tmp_path / "o")
    shutil.rmtree(out / RUNS)
    doc = json.loads((out / FILE).read_text())
    doc["runs"]["fa/k0/s1"], doc["runs"]["fa/k1/s1"] = doc["runs"]["fa/k1/s1"], doc["runs"]["fa/k0/s1"]
    (out / FILE).write_text(json.dumps(doc))
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert "run 'fa/k0/s1'" in err and "differs in: train_blocks" in err


def test_a_fifo_in_place_of_a_record_or_a_ladder_file_is_refused_never_read(ladders, tmp_path):
    """A FIFO is never opened (a read would block for ever): named in one line, in a real process."""
    out = _copy(ladders / "a", tmp_path / "o")
    (out / RUNS / K1).unlink()
    os.mkfifo(out / RUNS / K1)
    report = [sys.executable, "-m", "depthaudit", "report", "o"]
    p = subprocess.run(report, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    print(p.returncode, p.stderr)
    assert p.returncode == 2 and "is not a regular file" in _one_error(p.stderr)
    (out / FILE).unlink()
    os.mkfifo(out / FILE)
    p = subprocess.run(report, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    print(p.returncode, p.stderr)
    assert p.returncode == 2 and "is a FIFO (named pipe), not a results file" in _one_error(p.stderr)
    assert stat.S_ISFIFO(os.stat(out / FILE).st_mode) and stat.S_ISFIFO(os.stat(out / RUNS / K1).st_mode)


# -- a derived file whose run records are missing is refused, not rendered -------------------------------------

def test_a_report_json_whose_run_records_are_missing_is_refused(audit_dir, tmp_path, capsys):
    """Records deleted (and the report edited to say anything): nothing to check it against, so it is refused."""
    out = _copy(audit_dir, tmp_path / "o")
    trained = next(p.parent for p in (out / "runs").glob("*/result.json") if "_none_" not in p.parent.name)
    shutil.rmtree(trained)
    doc = json.loads((out / "report.json").read_text())
    doc["methods"][0]["trained_test_acc"]["mean"] = 0.99
    (out / "report.json").write_text(json.dumps(doc))
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert f"its run {trained.name} has no record" in err and "finished runs are reused" in err, err
    shutil.rmtree(out / "runs")  # the whole runs/ folder gone: the same line
    assert main(["report", str(out)]) == 2
    assert "has no record" in _one_error(capsys.readouterr().err)
    assert main(["audit", *AUDIT, "--out", str(out)]) == 0  # the fix the line names: the report is written again
    assert main(["report", str(out)]) == 0


def test_an_intervention_json_whose_run_records_are_missing_is_refused(tmp_path, capsys):
    out = tmp_path / "iv"
    assert main(["intervene", *AUDIT, "--lambdas", "0", "0.01", "--out", str(out)]) == 0
    capsys.readouterr()
    shutil.rmtree(out / "runs")
    err, doc = _edited_intervention_report(out, capsys)
    assert "intervention.json: its run" in err and "has no record" in err, err


def test_report_renders_the_report_json_audit_wrote_when_a_run_diverged(tmp_path, capsys):
    """A diverged method's flags are ['diverged'] (audit writes that): the schema accepts it, report renders it."""
    out = tmp_path / "dv"
    tiny = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--methods", "bp", "--seeds", "1",
            "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "16"]
    assert main(["audit", *tiny, "--optimizer", "sgd", "--lr", "1e3", "--out", str(out)]) == 0
    m = json.loads((out / "report.json").read_text())["methods"][0]
    print("flags", m["flags"], "status", m["status"])
    assert m["flags"] == ["diverged"] and "diverged" in m["status"]
    capsys.readouterr()
    assert main(["report", str(out)]) == 0, capsys.readouterr().err


def test_a_ladder_entry_whose_record_file_was_deleted_is_neither_rendered_nor_reused(ladders, tmp_path, capsys):
    """Where a .runs folder is, the JSON is derived: its copy of a deleted record (here edited too) is no record."""
    for out in (tmp_path / "r", tmp_path / "o"):  # r: report refuses it; o: a rerun trains it again
        _copy(ladders / "a", out)
        (out / RUNS / K1).unlink()
        doc = json.loads((out / FILE).read_text())
        doc["runs"]["fa/k1/s1"]["final"]["test_acc"] = 0.777
        (out / FILE).write_text(json.dumps(doc))
    assert main(["report", str(tmp_path / "r")]) == 2
    err = _one_error(capsys.readouterr().err)
    print(err)
    assert "(run fa/k1/s1) has no record file in" in err and "rerun the ladder command" in err, err
    _rerun_trains_again(out, ladders / "a", capsys, ["(run fa/k1/s1)"], "has no record file")
    assert _accs(out)["fa/k1/s1"] != 0.777 and (out / RUNS / K1).is_file()


def test_a_ladder_older_than_record_folders_is_reused_and_gets_its_records(ladders, tmp_path, capsys):
    """No .runs folder (an earlier version's file): the JSON alone is loaded, reused, and written out as records."""
    out = _copy(ladders / "a", tmp_path / "o")
    shutil.rmtree(out / RUNS)
    assert main(["report", str(out)]) == 0
    assert main([*LADDER, "--out", str(out)]) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    for p in (out / RUNS / K0, out / RUNS / K1):  # from now on the records are the truth
        rec = json.loads(p.read_text())
        assert SEAL in rec and rec["stored_in"]["key"] == p.stem.replace("%2F", "/")
    assert _accs(out) == _accs(ladders / "a")


def test_a_report_of_the_users_own_training_loop_needs_no_run_records(tmp_path, capsys):
    """A monitor's report.json (runs 'your training loop'): no records are kept for it, so none are asked for."""
    out = _copy(ROOT / "docs" / "results" / "biotorch_fa", tmp_path / "m")
    assert json.loads((out / "report.json").read_text())["methods"][0]["runs"]["trained"] == ["your training loop"]
    assert main(["report", str(out)]) == 0, capsys.readouterr().err


def test_a_finished_run_under_its_own_name_is_never_written_over_by_another_configuration(tmp_path, monkeypatch,
                                                                                           capsys):
    """Walk 11 cases 95-97: a plug-in method whose option default changed between two audits into one folder: the
    second audit retrained the finished runs of the first in place (their records overwritten, the runs lost)."""
    (tmp_path / "walk11_popt.py").write_text(
        "import os\nfrom depthaudit.methods import METHODS, Option\nfrom depthaudit.methods.dfa import DFA\n"
        "G = float(os.environ.get('WALK11_GAIN', '1.0'))\n\n@METHODS.register('walk11-gdfa')\nclass GDFA(DFA):\n"
        "    options = {'gain': Option(G, 'gain', lo=0)}\n\n    def __init__(self, model, seed, gain=G):\n"
        "        super().__init__(model, seed)\n        self.gain = gain\n\n    def credits(self, model, tr, e):\n"
        "        return [c * self.gain for c in super().credits(model, tr, e)]\n")
    argv = [sys.executable, "-m", "depthaudit", "--plugin", "walk11_popt", "audit", "--dataset", "mnist1d",
            "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1", "--methods", "walk11-gdfa", "--probe-batches",
            "1", "--device", "cpu", "--out", str(tmp_path / "a")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    assert subprocess.run(argv, env=env, capture_output=True, timeout=300).returncode == 0
    recs = sorted((tmp_path / "a" / "runs").glob("*/result.json"))
    before = [p.read_bytes() for p in recs]
    p = subprocess.run(argv, env={**env, "WALK11_GAIN": "2.0"}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "holds a finished run of another configuration under this run's name (it differs in method_options" \
        in p.stderr and "Traceback" not in p.stderr
    assert [q.read_bytes() for q in recs] == before  # the finished runs kept, byte for byte
