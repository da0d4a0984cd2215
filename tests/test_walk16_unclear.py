"""Walk 16's unclear cases, settled: each outcome the walker could not call right is made plain."""

import json

import pytest

import depthaudit as da
from depthaudit.cli import main
from depthaudit.errors import UsageError
from depthaudit.stores import claim_folder

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "2"]


def test_train_with_no_epoch_says_nothing_was_evaluated_not_none(tmp_path, capsys):
    """Walk 16 case 86: ``--epochs 0`` printed ``final test_acc None``."""
    assert main(["train", *TINY, "--epochs", "0", "--out", str(tmp_path / "e0")]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "None" not in out and "no epoch trained" in out
    rec = json.loads((tmp_path / "e0" / "result.json").read_text())
    assert rec["final"]["epochs_completed"] == 0 and rec["final"]["test_acc"] is None


def test_identity_without_out_has_no_path(tmp_path):
    """Walk 16 case 27: ``da.identity`` without ``out=`` returned ``Path('.')`` though nothing was written."""
    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1)
    res = da.identity(base, [1], progress=False)
    assert res.path is None and res.record and "<code>" not in res._repr_html_()
    res = da.identity(base, [1], out=tmp_path / "id.json", progress=False)
    assert res.path == tmp_path / "id.json" and res.path.is_file()


def test_a_claimed_sweep_folder_names_what_it_holds_once(tmp_path):
    """Walk 16 case 79: the refusal read ``(methods: methods fa dfa bp)``, the field named twice."""
    claim_folder(tmp_path, "audit", {"methods": ["fa", "dfa", "bp"], "lr": 0.001})
    with pytest.raises(UsageError) as exc:
        claim_folder(tmp_path, "audit", {"methods": ["bp"], "lr": 0.001})
    print(exc.value)
    assert "name everything it holds too (methods fa dfa bp)" in str(exc.value)
    assert "methods: methods" not in str(exc.value)


def test_depth_utility_figure_without_a_frozen_twin_says_not_measured_not_diverged(tmp_path, monkeypatch):
    """Walk 16 case 121: ``mon.write`` draws depth_utility.png without a frozen twin; its D3 label said "diverged"."""
    import matplotlib.axes
    import torch

    from depthaudit.evaluator.monitor import TrainingMonitor
    from depthaudit.models import build_model

    labels = []
    real = matplotlib.axes.Axes.annotate
    monkeypatch.setattr(matplotlib.axes.Axes, "annotate", lambda ax, txt, *a, **k: labels.append(txt) or real(
        ax, txt, *a, **k))
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(32, 40, generator=g), torch.randint(0, 10, (32,), generator=g))]
    mon = TrainingMonitor(build_model("resmlp", (40,), 10, 16, 2, None, 0), batches, log=None, name="mine")
    mon.step(0)
    mon.report(test_acc=0.5)
    mon.write(tmp_path / "out")
    print(labels)
    assert any("not measured" in t for t in labels) and not any("diverged" in t for t in labels)
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == [
        "cosine_heatmap.png", "depth_utility.png", "per_sample_cosine.png", "scale_checks.png"]


def test_report_of_a_parent_names_the_subfolders_it_does_not_render(tmp_path, capsys):
    """Walk 16 case 41: a probes folder and an audit without its report were passed over without a word."""
    assert main(["audit", *TINY, "--epochs", "1", "--methods", "bp", "--out", str(tmp_path / "a")]) == 0
    assert main(["probes", *TINY, "--epochs", "1", "--method", "fa", "--out", str(tmp_path / "p")]) == 0
    (tmp_path / "u").mkdir()
    for f in ("identity.json",):
        (tmp_path / "u" / f).write_bytes((tmp_path / "a" / f).read_bytes())
    (tmp_path / "u" / "runs").mkdir()
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    print(err)
    assert f"(from {tmp_path / 'a'})" in out
    assert f"note: not rendered: {tmp_path / 'p'}: it holds probes results" in err
    assert f"note: not rendered: {tmp_path / 'u'}: its audit report is missing" in err
    assert err.count("note: not rendered") == 2 and "/runs" not in err  # a run store is part of its sweep: no note
