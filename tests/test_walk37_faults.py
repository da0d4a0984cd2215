"""Walk 37's wrong cases, reproduced as the walker did them (docs/walks/walk37_*.txt)."""

import shlex

import pytest

import depthaudit as da
from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]


def test_report_advice_quotes_a_folder_with_a_space(tmp_path, capsys, monkeypatch):
    """W3 (cases 97, 98): report's advice "(or rerun the command without --cell: depthaudit audit … --out My
    Drive/run 2 …)" pasted as written split the folder in two ("unrecognized arguments: Drive/run 2"). The
    commands it prints are quoted, and pasted, the advice works."""
    monkeypatch.chdir(tmp_path)
    out = "My Drive/run 2"
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--cell", "1", "--out", out]) == 0
    capsys.readouterr()
    assert main(["report", out]) == 2
    err = capsys.readouterr().err
    assert f"--out {shlex.quote(out)}" in err, err
    advice = err.split("(or rerun the command without --cell: depthaudit ")[1].split(" trains what is missing")[0]
    assert main(shlex.split(advice)) == 0
    assert main(["report", out]) == 0


@pytest.mark.parametrize("kind", ["ladder", "probes"])
def test_a_monitor_does_not_write_into_another_commands_folder(tmp_path, kind):
    """Case 34: TrainingMonitor.write into a ladder's, probes', saturation's or grow's folder wrote report.json,
    report.md and figures beside their files (it refused only an audit's or a train's)."""
    import torch

    from depthaudit.evaluator import TrainingMonitor
    from depthaudit.models import build_model

    out = tmp_path / kind
    argv = {"ladder": ["ladder", *C, "--methods", "bp", "--seeds", "1"],
            "probes": ["probes", *C, "--method", "fa", "--alphas", "0", "--seeds", "1"]}[kind]
    assert main([*argv, "--out", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(16, 40, generator=g), torch.randint(0, 10, (16,), generator=g))]
    mon = TrainingMonitor(build_model("resmlp", (40,), 10, 8, 1, None, 0), batches, log=None)
    mon.step(0)
    mon.report(test_acc=0.5, budget=1)
    with pytest.raises(da.UsageError, match=f"it holds another command's results \\({kind}: "):
        mon.write(out)
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_run_folder_that_is_a_link_to_another_run_is_retrained_not_written_through(tmp_path, capsys):
    """W2 (cases 74, 75): a run folder replaced by a symbolic link to another run's folder; the audit (as the
    report's refusal advised) retrained it *through* the link, replacing the other seed's finished run, then
    refused its checkpoint. The link is not a run folder written here: named, replaced, its target untouched."""
    import hashlib
    import json

    out = tmp_path / "D7"
    argv = ["audit", *C, "--methods", "bp", "--seeds", "1", "2", "--probe-batches", "1", "--probe-batch-size", "32",
            "--out", str(out)]
    assert main(argv) == 0
    s1 = next((out / "runs").glob("*_bp_all_*_s1_*"))
    s2 = next((out / "runs").glob("*_bp_all_*_s2_*"))
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in s2.iterdir()}
    for p in s1.iterdir():
        p.unlink()
    s1.rmdir()
    s1.symlink_to(s2.name)
    capsys.readouterr()
    assert main(["report", str(out)]) == 2  # the report refuses the folder (its record names s2's folder)
    assert main(argv) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert f"{s1} is a symbolic link (to {s2.name}), not a run folder written here" in err, err
    assert not s1.is_symlink() and s1.is_dir()
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in s2.iterdir()} == digest
    assert json.loads((s1 / "result.json").read_text())["config"]["seed"] == 1
    assert main(["report", str(out)]) == 0


@pytest.mark.parametrize("cmd", ["audit", "intervene"])
def test_runs_stopped_at_init_report_again(tmp_path, capsys, cmd):
    """W4 (cases 110–112, 132, 143): every trained run stopped at init by --stop-on-flag (D1 fired: ρ 1.001 >
    --rho-max 1.0) gives a NaN D3 gap, stored as null; `report` then computed NaN again, compared it with null and
    called the report edited ("'checks' is not what its run records give"), even right after the audit wrote it."""
    out = tmp_path / cmd
    argv = [cmd, *C, "--epochs", "2", "--methods", "bp", "--seeds", "1", "--stop-on-flag", "--rho-max", "1.0",
            "--out", str(out)] + (["--lambdas", "0", "0.1"] if cmd == "intervene" else [])
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert "stopped before training" in cap.err
    assert main(["report", str(out)]) == 0, capsys.readouterr().err
    if cmd == "audit":  # walk 38 W1: no accuracy, so no gap: D3 not measured, never "+nan FLAG" / "at chance"
        import json
        from importlib.resources import files

        import jsonschema

        rep = json.loads((out / "report.json").read_text())
        jsonschema.validate(rep, json.loads(files("depthaudit.report").joinpath("audit.schema.json").read_text()))
        d3 = rep["methods"][0]["checks"]["D3"]
        assert d3["status"] == "NOT MEASURED" and d3["value"] is None and rep["methods"][0]["flags"] == ["D1"]
        assert rep["decision"]["rows"][0]["standard_pair_why"] == ["no accuracy: stopped before training"]
        assert "+nan" not in (out / "report.md").read_text() and "+nan" not in cap.out


def test_with_method_of_an_unknown_method_names_the_field():
    """W5 (case 189): cfg.with_method("nope") raised a bare UsageError (no .field), where TrainConfig(method="nope")
    gives a ConfigError naming method, as python-api.md promises."""
    with pytest.raises(da.ConfigError) as e:
        da.TrainConfig().with_method("nope")
    assert e.value.field == "method" and "unknown method 'nope'" in str(e.value)
