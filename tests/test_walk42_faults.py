"""Walk 42's wrong cases, reproduced as the walker did them (docs/walks/walk42_*.txt)."""

import json

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1", "--probe-batches", "1",
     "--probe-batch-size", "32"]


def test_report_renders_an_intervention_finished_after_another_grids_cell_sweep_began(tmp_path, capsys):
    """W1 (cases 222–236): ``intervene --lambdas 0 0.01 --cell 0`` then ``intervene --lambdas 0 0.1`` (a finished
    report: a λ grid may replace another's in one folder) — ``report`` refused the folder ("2 of 4 cells are not
    finished") and advised rerunning the stale grid, which then replaced the finished report. The report the
    folder holds is rendered, the unfinished --cell sweep named in a note; the files are not touched."""
    iv = ["intervene", *C, "--methods", "fa", "--seeds", "1"]
    for order in ("cell first", "report first"):
        out = tmp_path / order.replace(" ", "_")
        steps = [["--lambdas", "0", "0.01", "--cell", "0"], ["--lambdas", "0", "0.1"]]
        for step in steps if order == "cell first" else steps[::-1]:
            assert main([*iv, *step, "--out", str(out)]) == 0
        before = (out / "intervention.json").read_bytes()
        assert json.loads(before)["lambdas"] == [0.0, 0.1]
        capsys.readouterr()
        assert main(["report", str(out)]) == 0
        o, err = capsys.readouterr()
        print(err)
        assert "| fa | 0.1 |" in o and "| fa | 0.01 |" not in o
        assert f"the --cell sweep kept in {out / 'sweep.json'} is not finished" in err
        assert json.loads((out / "intervention.json").read_bytes())["lambdas"] == [0.0, 0.1]
        parent = tmp_path / f"P_{out.name}"  # from a parent: rendered, not skipped
        (parent).mkdir()
        (out).rename(parent / "m1")
        assert main(["report", str(parent)]) == 0
        assert f"(from {parent / 'm1'})" in capsys.readouterr().out
