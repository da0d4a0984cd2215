"""Walk 39's wrong cases, reproduced as the walker did them (docs/walks/walk39_*.txt)."""

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]


def test_report_of_a_parent_renders_past_an_unfinished_cell_sweep(tmp_path, capsys):
    """W1 (cases 143–145): `report PARENT` whose subfolder holds an unfinished --cell sweep stopped there (rc 2):
    the folders after it were neither rendered nor named. It is skipped and named, as a damaged folder is, the
    others rendered, and the run ends non-zero naming it."""
    par = tmp_path / "PAR1"
    audit = ["audit", *C, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32"]
    assert main([*audit, "--out", str(par / "a_audit")]) == 0
    assert main(["probes", *C, "--method", "fa", "--alphas", "0", "0.5", "--seeds", "1", "--cell", "1",
                 "--out", str(par / "m_probes")]) == 0
    assert main([*audit, "--out", str(par / "z_audit")]) == 0
    capsys.readouterr()
    assert main(["report", str(par)]) == 2
    out, err = capsys.readouterr()
    assert f"(from {par / 'a_audit'})" in out and f"(from {par / 'z_audit'})" in out, out
    assert f"skipped {par / 'm_probes'}: 1 of 2 cells are not finished" in err, err
    assert err.strip().splitlines()[-1].endswith("1 folder(s) could not be rendered "
                                                 f"({par / 'm_probes'}: each named above with its fix); 2 "
                                                 "result(s) were rendered")
