"""Damaged records are caught; faults of the machine are the user's error: one line, exit 2, nothing half-written."""

import errno
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from _util import without_wallclock

import depthaudit.io as dio
from depthaudit.cli import main
from depthaudit.stores import read_record, record_problem, seal, unsealed

ROOT = Path(__file__).resolve().parents[1]
LADDER = ["ladder", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "1", "--methods", "fa",
          "--k-values", "0", "1", "--seeds", "1", "2", "--epochs", "1", "--probe-batches", "1",
          "--probe-batch-size", "64"]
FILE = "ladder_d16_L1_mnist1d.json"
RUNS = "ladder_d16_L1_mnist1d.runs"
AUDIT = ["audit", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "1", "--methods", "bp", "--seeds", "1",
         "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "64"]


_stable = without_wallclock


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    out = tmp_path_factory.mktemp("ladder")
    assert main([*LADDER, "--out", str(out)]) == 0
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _one_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("depthaudit: error")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- records validated on read -------------------------------------------------------------------------------

def _truncate(p):
    p.write_text(p.read_text()[:200])


def _edit(field_value):
    def f(p):
        rec = json.loads(p.read_text())
        rec["final"]["test_acc"] = field_value
        p.write_text(json.dumps(rec))
    return f


def _nan(p):
    p.write_text(p.read_text().replace('"test_acc": 0.', '"test_acc": NaN, "x": 0.', 1))


DAMAGE = {"edited": (_edit(0.95), "was edited after it was written"),
          "truncated": (_truncate, "not valid JSON"), "text": (_edit("0.9"), "not a number"),
          "nan": (_nan, "not a number JSON allows"), "above_one": (_edit(1.7), "outside [0, 1]"),
          "no_final": (lambda p: p.write_text(json.dumps({"status": "ok"})), "no 'final' object")}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_ladder_record_is_named_and_retrained_never_reused(ladder, tmp_path, capsys, kind):
    out = _copy(ladder, tmp_path / "o")
    damage, words = DAMAGE[kind]
    rec = out / RUNS / "fa%2Fk1%2Fs2.json"
    damage(rec)
    assert read_record(rec)[0] is None
    assert main(["report", str(out)]) == 2  # report renders nothing from a damaged record
    err = _one_error(capsys.readouterr().err)
    assert "fa%2Fk1%2Fs2.json" in err and words in err and "rerun the ladder" in err, err
    assert main([*LADDER, "--out", str(out)]) == 0  # the sweep names it once and trains that run again
    cap = capsys.readouterr()
    assert sum("fa%2Fk1%2Fs2.json" in ln for ln in cap.err.splitlines()) == 1, cap.err
    assert "3 of 4 runs already finished" in cap.err and "| fa/k1/s2: ok" in cap.err, cap.err
    assert "nan" not in cap.out.lower()
    assert _stable(json.loads((out / FILE).read_text())["runs"]) == _stable(json.loads((ladder / FILE).read_text())
                                                                              ["runs"])


def test_a_nan_accuracy_in_the_assembled_file_is_refused_not_rendered(ladder, tmp_path, capsys):
    out = _copy(ladder, tmp_path / "o")
    shutil.rmtree(out / RUNS)  # as an older version left it: the runs live only in the JSON
    doc = (out / FILE).read_text()
    (out / FILE).write_text(doc.replace('"test_acc": 0.', '"test_acc": NaN, "y": 0.', 1))
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    assert "malformed" in err and "nan" not in capsys.readouterr().out.lower()


def test_truncated_ladder_file_advice_works_when_followed(ladder, tmp_path, capsys):
    out = _copy(ladder, tmp_path / "o")
    (out / FILE).write_text((out / FILE).read_text()[:300])
    assert main([*LADDER, "--out", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    assert "not valid JSON" in err and f"move {FILE} away and rerun" in err, err
    (out / FILE).rename(tmp_path / "moved.json")  # follow the advice
    assert main([*LADDER, "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert "4 of 4 runs already finished" in cap.err and "| k" in cap.out
    assert _stable(json.loads((out / FILE).read_text())["runs"]) == _stable(json.loads((ladder / FILE).read_text())
                                                                              ["runs"])
    (out / FILE).unlink()  # the JSON is derived: report rebuilds it from the records
    assert main(["report", str(out)]) == 0
    assert "rebuilt" in capsys.readouterr().err and (out / FILE).exists()
    shutil.rmtree(out / RUNS)  # and moving both away starts afresh
    (out / FILE).unlink()
    assert main([*LADDER, "--k-values", "0", "--seeds", "1", "--out", str(out)]) == 0
    assert "already finished" not in capsys.readouterr().err


def test_record_schema():
    ok = {"status": "ok", "config": {}, "history": [{"epoch": 1, "test_acc": 0.5}], "final": {"test_acc": 0.5}}
    assert record_problem(ok) is None
    assert record_problem({**ok, "status": "diverged", "final": {"test_acc": None}}) is None
    assert "status" in record_problem({**ok, "status": "great"})
    sealed = seal(ok)
    assert record_problem(sealed) is None and unsealed(sealed) == ok
    assert "was edited" in record_problem({**sealed, "final": {"test_acc": 0.6}})
    assert "without a final test_acc" in record_problem({**ok, "final": {"test_acc": None}})
    assert "history[0].test_acc" in record_problem({**ok, "history": [{"test_acc": float("nan")}]})
    assert "below 0" in record_problem({**ok, "final": {"test_acc": 0.5, "test_loss": -1.0}})
    assert "not a number" in record_problem({**ok, "history": [{"probe": {"stream": {"rho": "big"}}}]})
    assert record_problem([1]) is not None


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    assert main([*AUDIT, "--out", str(out)]) == 0
    return out


def test_report_notices_a_truncated_audit_run_record(audit, tmp_path, capsys):
    out = _copy(audit, tmp_path / "o")
    rec = next((out / "runs").glob("*_all_*/result.json"))
    rec.write_text(rec.read_text()[:100])
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    assert rec.parent.name in err and "not valid JSON" in err
    assert main([*AUDIT, "--out", str(out)]) == 0  # the audit names it and trains it again
    err = capsys.readouterr().err
    assert f"{rec.parent.name}/result.json is not valid JSON" in err and "1 of 2 runs already finished" in err
    assert main(["report", str(out)]) == 0


def test_report_notices_a_hand_edited_audit_run_record(audit, tmp_path, capsys):
    out = _copy(audit, tmp_path / "o")
    rec = next((out / "runs").glob("*_none_*/result.json"))
    doc = json.loads(rec.read_text())
    doc["final"]["test_acc"] = 0.99  # plausible, in range: only the seal shows it
    rec.write_text(json.dumps(doc))
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    assert rec.parent.name in err and "was edited after it was written" in err


# -- faults of the machine ---------------------------------------------------------------------------------

def _full_disk_at(monkeypatch, pattern: str):
    """Writes whose path contains ``pattern`` fail as on a full disk (ENOSPC at the flush)."""
    real = os.fsync

    def fsync(fd):
        if pattern in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(dio.os, "fsync", fsync)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="maps a descriptor to its path through /proc")
@pytest.mark.parametrize("where", ["report.json", "report.md", "scale_checks.png"])
def test_full_disk_while_writing_the_audit_report_leaves_no_report(audit, tmp_path, monkeypatch, capsys, where):
    out = _copy(audit, tmp_path / "o")
    for f in ("report.json", "report.md", "cosine_heatmap.png", "scale_checks.png", "depth_utility.png"):
        (out / f).unlink()
    before = _tree(out)
    _full_disk_at(monkeypatch, where)
    assert main([*AUDIT, "--out", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    assert "No space left on device" in err and where in err and "free space" in err, err
    assert _tree(out) == before  # no report, no markdown, no figure, no temp file: all or nothing


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="maps a descriptor to its path through /proc")
def test_full_disk_while_storing_a_run(tmp_path, monkeypatch, capsys):
    _full_disk_at(monkeypatch, "fa%2Fk1%2Fs1.json")
    assert main([*LADDER, "--seeds", "1", "--out", str(tmp_path)]) == 2
    err = _one_error(capsys.readouterr().err)
    assert "No space left on device" in err and "fa%2Fk1%2Fs1.json" in err
    assert not list(tmp_path.rglob("*.tmp"))
    assert sorted(json.loads((tmp_path / FILE).read_text())["runs"]) == ["fa/k0/s1"]  # the finished run is kept


@pytest.mark.parametrize("bad", ["afile/cache", "afile"])
def test_unusable_cache_location_is_one_line(tmp_path, monkeypatch, capsys, bad):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("DEPTHAUDIT_CACHE_DIR", str(tmp_path / bad))
    assert main(["train", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--out", str(tmp_path / "o")]) == 2
    err = _one_error(capsys.readouterr().err)
    assert "DEPTHAUDIT_CACHE_DIR" in err and "Not a directory" in err, err
    assert not (tmp_path / "o").exists()


def test_odd_output_location_is_one_line(tmp_path, capsys):
    assert main([*LADDER, "--out", "/proc/depthaudit-out"]) == 2
    _one_error(capsys.readouterr().err)
    long = tmp_path / ("x" * 300)
    assert main([*LADDER, "--out", str(long)]) == 2
    assert "File name too long" in _one_error(capsys.readouterr().err)


def test_a_terminal_that_cannot_print_unicode_gets_ascii(tmp_path, monkeypatch):
    out = tmp_path / "rep"
    shutil.copytree(ROOT / "docs/results/audit_mnist1d", out)  # (its run records with it: report checks them)
    raw_out, raw_err = io.BytesIO(), io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw_out, encoding="ascii"))
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw_err, encoding="ascii"))
    rc = main(["report", str(out)])
    sys.stdout.flush()
    text = raw_out.getvalue().decode("ascii")
    assert rc == 0 and "+/-" in text and "±" not in text, raw_err.getvalue()


def test_absurd_size_is_out_of_memory_in_one_line(tmp_path, capsys):
    assert main(["train", "--dataset", "mnist1d", "--d-hidden", "2000000", "--num-blocks", "1", "--epochs", "1",
                 "--out", str(tmp_path / "o")]) == 2
    err = _one_error(capsys.readouterr().err)
    # refused before a weight is allocated (issue 36, walk 5): its parameter count against the free memory
    assert "the model has 8e+12 parameters" in err and "GiB free on cpu" in err and "--d-hidden 2000000" in err
    assert not (tmp_path / "o").exists()


def test_runs_only_in_the_json_are_reused_and_a_damaged_copy_is_named(tmp_path, capsys):
    """A file of an earlier version (no .runs folder): intact runs reused, a damaged one named, never reused."""
    from depthaudit.config import TrainConfig
    from depthaudit.stores import FileStore, RunSpec

    cfg = TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1, device="cpu")
    rec = {"status": "ok", "config": cfg.to_dict(), "tracking": None, "history": [], "final": {"test_acc": 0.5}}
    (tmp_path / "l.json").write_text(json.dumps({"schema": "s", "identity": {"a": 1},
                                                 "runs": {"k": rec, "bad": {**rec, "final": {"test_acc": "x"}}}}))
    store = FileStore(tmp_path / "l.json", "s", {"a": 1})
    assert store.get(RunSpec("k", cfg)) == rec
    assert store.get(RunSpec("bad", cfg)) is None
    assert "(run bad) final.test_acc is 'x', not a number" in capsys.readouterr().err
    store.claim()  # the assembled file keeps only what is intact
    assert sorted(json.loads((tmp_path / "l.json").read_text())["runs"]) == ["k"]
    fresh = FileStore(tmp_path / "x.json", "s", {"a": 1})  # a sweep claims first, then asks: still named
    older = json.loads((tmp_path / "l.json").read_text())  # an earlier version's file: no seal
    older.pop("record_sha256")
    (tmp_path / "x.json").write_text(json.dumps(older).replace('"runs": {', '"runs": {"bad": 3, ', 1))
    fresh.claim()
    assert "x.json (run bad) is of type int, not a run record" in capsys.readouterr().err


# -- issue 25's re-walk --------------------------------------------------------------------------------------

SATURATION = ["saturation", "--family", "resmlp", "--method", "bp", "--dataset", "mnist1d", "--extra", "0", "1",
              "--epochs", "1", "--d-hidden", "8"]
SAT = "saturation_resmlp_bp_mnist1d"


@pytest.fixture(scope="module")
def saturation(tmp_path_factory):
    out = tmp_path_factory.mktemp("saturation")
    assert main([*SATURATION, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_report_refuses_a_damaged_saturation_record_as_it_does_a_ladder_one(saturation, tmp_path, capsys, kind):
    """A damaged record in saturation_*.runs (the assembled JSON still holding the intact copy) is named by
    `report`, not rendered from the stale copy; the sweep run again names it and retrains only it."""
    damage, words = DAMAGE[kind]
    out = _copy(saturation, tmp_path / "o")
    rec = out / f"{SAT}.runs" / "N1.json"
    damage(rec)
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = _one_error(capsys.readouterr().err)
    assert "N1.json" in err and words in err and "rerun the saturation command" in err
    assert main([*SATURATION, "--out", str(out)]) == 0
    assert "1 of 2 runs already finished" in capsys.readouterr().err
    assert main(["report", str(out)]) == 0


def test_a_folder_where_a_result_file_goes_is_named_by_its_own_path(audit, tmp_path, capsys):
    """A folder standing where report.json or identity.json goes: the line names that path, not a temp file."""
    for name in ("report.json", "identity.json"):
        out = _copy(audit, tmp_path / name)
        (out / name).unlink()
        (out / name).mkdir()
        assert main([*AUDIT, "--out", str(out)]) == 2
        err = _one_error(capsys.readouterr().err)
        assert f"{out / name}: Is a directory" in err or f"{name}: Is a directory" in err, err
        assert ".tmp" not in err and ".render-" not in err, err
