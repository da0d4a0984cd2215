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
