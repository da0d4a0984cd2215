"""Walk 44's unclear cases, settled (docs/walks/walk44_*.txt)."""

import json

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1", "--probe-batches", "1",
     "--probe-batch-size", "32"]


def test_a_skipped_cell_of_a_larger_grid_keeps_the_larger_command(tmp_path, capsys):
    """Case 123: ``audit --seeds 5 --cell …`` (every cell done), then ``audit --seeds 5 6 --cell 0`` (finished:
    skipped) grew the folder's claim but kept the seeds-5 command in sweep.json, which ``report`` then ran and the
    grown claim refused. A skipped cell's command replaces the kept one when its grid is the larger; a narrower
    grid's skipped cell still leaves it (walk 35 case 166,
    tests/test_walk35_faults.py)."""
    out = tmp_path / "AC"
    audit = ["audit", *C, "--methods", "bp", "--out", str(out)]
    for cell in ("0", "1"):
        assert main([*audit, "--seeds", "5", "--cell", cell]) == 0
    assert main([*audit, "--seeds", "5", "6", "--cell", "0"]) == 0  # finished: skipped
    assert "already finished" in capsys.readouterr().out
    kept = json.loads((out / "sweep.json").read_text())
    assert kept["argv"][kept["argv"].index("--seeds") + 1:][:2] == ["5", "6"] and kept["cells"] == 4
    for cell in ("2", "3"):
        assert main([*audit, "--seeds", "5", "6", "--cell", cell]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["config"]["seeds"] == [5, 6]
