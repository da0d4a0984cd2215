"""Walk 46's unclear cases, settled (docs/walks/walk46_*.txt)."""

import json

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--probe-batches", "1",
     "--probe-batch-size", "32"]


def test_a_check_firing_at_the_last_epoch_stops_nothing(tmp_path, capsys):
    """Case 158: ``--stop-on-flag`` with D1 firing at the budget's last epoch recorded the run "stopped_flagged"
    (stopped_at_epoch 1 of 1) and the card said "Stopped early", though the whole budget trained. Nothing is left
    to stop there: the run is "ok", the check's firing still recorded; one that fires before the end still stops."""
    out = tmp_path / "AU8"
    assert main(["audit", *C, "--epochs", "1", "--methods", "bp", "--seeds", "1", "--stop-on-flag", "--rho-max",
                 "1.01", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "D1 fired at epoch 1" in err and "stopped at epoch" not in err
    recs = [json.loads(p.read_text()) for p in (out / "runs").glob("*_all_*/result.json")]
    assert recs and all(r["status"] == "ok" and r["final"]["stopped_at_epoch"] is None for r in recs)
    assert "Stopped early" not in (out / "report.md").read_text()
    early = tmp_path / "AU9"  # a 2-epoch budget: D1 fires at epoch 1 and the run stops there, as before
    assert main(["audit", *C, "--epochs", "2", "--methods", "bp", "--seeds", "1", "--stop-on-flag", "--rho-max",
                 "1.01", "--out", str(early)]) == 0
    assert "stopped at epoch 1 of 2" in capsys.readouterr().err
    recs = [json.loads(p.read_text()) for p in (early / "runs").glob("*_all_*/result.json")]
    assert recs and all(r["status"] == "stopped_flagged" and r["final"]["stopped_at_epoch"] == 1 for r in recs)
