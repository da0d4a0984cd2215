"""One meaning of --epochs (the budget, the dataset's by default) and --stop-after in the depth commands too, and a
sweep that returns its status (a cell listing, one cell) instead of ending the program by raising."""

import json

import pytest

import depthaudit as da
from depthaudit.cli import main
from depthaudit.sweep import SweepOptions

SAT = ["saturation", "--family", "resmlp", "--method", "fa", "--dataset", "mnist1d", "--extra", "0",
       "--d-hidden", "8", "--analysis-batches", "1", "--device", "cpu"]
GROW = ["grow", "--family", "resmlp", "--method", "dfa", "--dataset", "mnist1d", "--extra", "2", "--d-hidden", "8",
        "--device", "cpu"]


def _history(path):
    rec = json.loads(path.read_text())
    return [{k: v for k, v in h.items() if k != "seconds"} for h in rec["history"]], rec["config"]


def test_depth_budget_is_the_datasets_and_stop_after_is_its_first_epochs(tmp_path):
    # no --epochs: MNIST-1D's budget (20), of which --stop-after 1 trains the first epoch
    assert main([*SAT, "--stop-after", "1", "--out", str(tmp_path / "d")]) == 0
    store = json.loads((tmp_path / "d" / "saturation_resmlp_fa_mnist1d.json").read_text())
    hist, cfg = _history(tmp_path / "d" / "saturation_resmlp_fa_mnist1d.runs" / "N0.json")
    assert store["identity"]["epochs"] == 20 and store["identity"]["stop_after"] == 1
    assert cfg["epochs"] == 20 and len(hist) == 1 and hist[0]["lr_end"] > 0.9e-3  # a 20-epoch cosine, barely begun
    # --stop-after N is the first N epochs of the same run, bit for bit
    assert main([*SAT, "--epochs", "3", "--out", str(tmp_path / "full")]) == 0
    assert main([*SAT, "--epochs", "3", "--stop-after", "2", "--out", str(tmp_path / "first2")]) == 0
    full, _ = _history(tmp_path / "full" / "saturation_resmlp_fa_mnist1d.runs" / "N0.json")
    first, _ = _history(tmp_path / "first2" / "saturation_resmlp_fa_mnist1d.runs" / "N0.json")
    assert len(full) == 3 and first == full[:2]
    # a store written without --stop-after keeps its identity (no stop_after key): earlier files stay the same file
    assert "stop_after" not in json.loads((tmp_path / "full" / "saturation_resmlp_fa_mnist1d.json").read_text())[
        "identity"]


def test_grow_stop_after_keeps_the_budgets_schedule(tmp_path, capsys):
    assert main([*GROW, "--epochs", "4", "--out", str(tmp_path / "full")]) == 0
    assert main([*GROW, "--epochs", "4", "--stop-after", "3", "--out", str(tmp_path / "first3")]) == 0
    for arm in ("grown", "scratch"):
        full, _ = _history(tmp_path / "full" / "grow_resmlp1+2_dfa_mnist1d.runs" / f"{arm}.json")
        first, cfg = _history(tmp_path / "first3" / "grow_resmlp1+2_dfa_mnist1d.runs" / f"{arm}.json")
        assert first == full[:3] and cfg["stop_after"] == 3 and cfg["insert_at"] == [1, 2]
    capsys.readouterr()
    # the default schedule (evenly over the budget's first half: epochs 1, 3 of 10) reaches past --stop-after 2
    assert main([*GROW, "--epochs", "10", "--stop-after", "2", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "reaches past --stop-after" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").rglob("*.json"))
    assert main([*GROW, "--epochs", "4", "--stop-after", "5", "--out", str(tmp_path / "bad2")]) == 2
    assert "--stop-after must be in 1..--epochs (4)" in capsys.readouterr().err


def test_a_sweep_returns_its_status_instead_of_raising(tmp_path, capsys):
    base = da.TrainConfig(d_hidden=8, num_blocks=1, epochs=1, device="cpu")
    cfg = da.AuditConfig(base=base, methods=("fa",), seeds=(42,), probe_batches=1, probe_batch_size=16)
    out = tmp_path / "a"
    res = da.audit(cfg, out, sweep=SweepOptions(list_cells=True), progress=False)
    assert res.stopped is not None and res.card == res.stopped
    assert [line.split("\t")[1:3] for line in res.stopped.splitlines()] == [["fa/trained/s42", "pending"],
                                                                            ["fa/frozen/s42", "pending"]]
    assert not (out / "report.json").exists() and not list((out / "runs").glob("*/result.json"))
    res = da.audit(cfg, out, sweep=SweepOptions(cell="1"), progress=False)  # one cell: trained and stored
    assert res.stopped.startswith("cell fa/frozen/s42: ok") and not (out / "report.json").exists()
    assert list(res.record["records"]) == ["fa/frozen/s42"]
    res = da.audit(cfg, out, sweep=SweepOptions(cell="1"), progress=False)
    assert "already finished" in res.stopped
    res = da.audit(cfg, out, progress=False)  # the whole grid: the report, nothing stopped
    assert res.stopped is None and (out / "report.json").exists()
    # the command prints the status and exits 0
    capsys.readouterr()
    argv = ["audit", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1", "--methods", "fa", "--probe-batches",
            "1", "--probe-batch-size", "16", "--device", "cpu", "--out", str(out)]
    assert main([*argv, "--list-cells"]) == 0
    assert [line.split("\t")[2] for line in capsys.readouterr().out.splitlines()] == ["done", "done"]


@pytest.mark.parametrize("argv", [["saturation", *SAT[1:]], GROW])
def test_depth_commands_list_their_cells_and_exit_zero(argv, tmp_path, capsys):
    assert main([*argv, "--epochs", "2", "--out", str(tmp_path), "--list-cells"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines and all(line.split("\t")[2] == "pending" for line in lines)
