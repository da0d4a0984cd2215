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
