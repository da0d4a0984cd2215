"""Walk 40's wrong cases, reproduced as the walker did them (docs/walks/walk40_*.txt)."""

import json
import shutil

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]
SMALL = ["--probe-batches", "1", "--probe-batch-size", "32"]


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else None


def test_a_users_json_under_a_store_name_leaves_the_rest_of_its_folder_rendered(tmp_path, capsys):
    """W1 (cases 187–193): a finished ladder whose folder also held a user's ``ladder_foo.json`` was dropped by
    ``report PARENT`` without a word (rc 0), or the parent was said to hold no finished run. The user's file is
    left alone with a note and the ladder beside it is rendered, from the parent and from the folder itself."""
    par = tmp_path / "PF"
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--k-values", "0", *SMALL,
                 "--output_dir", str(par / "f")]) == 0
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", str(par / "a")]) == 0
    theirs = par / "f" / "ladder_foo.json"
    theirs.write_text(json.dumps({"a": 1}))
    other = par / "f" / "ladder_x.json"
    other.write_text(json.dumps({"schema": "other.tool.v1"}))
    before = (theirs.read_bytes(), other.read_bytes())
    capsys.readouterr()
    assert main(["report", str(par)]) == 0
    out, err = capsys.readouterr()
    print(err)
    assert f"(from {par / 'f'})" in out and "ladder_d16_L2_mnist1d.json" in out and f"(from {par / 'a'})" in out
    assert f"{theirs} is not depthaudit's" in err and f"{other} is not depthaudit's" in err
    assert main(["report", str(par / "f")]) == 0  # the folder itself: rendered, the user's file noted (was rc 2)
    assert "ladder_d16_L2_mnist1d.json" in capsys.readouterr().out
    assert (theirs.read_bytes(), other.read_bytes()) == before
    only = tmp_path / "PG"  # the parent holding only that folder: rendered, not "holds no … finished run"
    shutil.copytree(par / "f", only / "f")
    assert main(["report", str(only)]) == 0
    assert f"(from {only / 'f'})" in capsys.readouterr().out


def test_a_folder_with_one_damaged_store_renders_the_others_and_says_so(tmp_path, capsys):
    """Unclear cases 186, 194–196: a folder with one finished and one truncated ladder file printed the table and
    then said the parent held no finished run; the closing line ended "… result(s) were"."""
    par = tmp_path / "PM"
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--k-values", "0", *SMALL,
                 "--output_dir", str(par / "f")]) == 0
    (par / "f" / "ladder_d32_L2_mnist1d.json").write_text('{"schema": "depthaudit.ladder.v1", "runs": {')
    capsys.readouterr()
    assert main(["report", str(par)]) == 2
    out, err = capsys.readouterr()
    print(err)
    assert "ladder_d16_L2_mnist1d.json" in out and f"(from {par / 'f'})" in out
    assert f"not rendered in {par / 'f'}: " in err and "ladder_d32_L2_mnist1d.json" in err
    last = err.strip().splitlines()[-1]
    assert "holds no" not in err and last.endswith("1 result(s) were rendered"), last


def test_a_cell_not_in_the_probes_grid_writes_nothing(tmp_path, capsys):
    """W2 (cases 203, 204, 218): ``probes --cell 5`` (no such cell) exited 2 but left the new folder with a .lock."""
    for cell, extra in (("5", []), ("a9/s1", []), ("5", ["--pre-epochs", "1"])):
        out = tmp_path / f"V6_{cell.replace('/', '_')}_{len(extra)}"
        assert main(["probes", *C, "--method", "fa", "--alphas", "0", "1", "--seeds", "1", *extra, "--cell", cell,
                     "--out", str(out)]) == 2
        assert "no such cell" in capsys.readouterr().err
        assert not out.exists(), _files(out)


def test_a_refused_stored_only_cell_writes_no_sweep_json(tmp_path, capsys):
    """W3 (cases 221–224, 251, 252): ``--stored-only --cell ID`` of a cell not stored exited 2 but wrote (or
    replaced) the folder's sweep.json, after which ``report`` assembled the refused command's grid: a finished
    --cell sweep read "3 of 6 cells are not finished", and another command's results there stopped rendering."""
    grids = {"audit": ["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL],
             "ladder": ["ladder", *C, "--methods", "bp", "--seeds", "1", "--k-values", "0", *SMALL],
             "intervene": ["intervene", *C, "--methods", "bp", "--seeds", "1", "--lambdas", "0", *SMALL],
             "saturation": ["saturation", "--family", "resmlp", "--method", "fa", "--dataset", "mnist1d",
                            "--d-hidden", "16", "--extra", "0", "1", "--epochs", "1"],
             "probes": ["probes", *C, "--method", "fa", "--alphas", "0", "1", "--seeds", "1"]}
    for name, cmd in grids.items():
        out = tmp_path / f"W9_{name}"
        flag = "--output_dir" if name == "ladder" else "--out"
        assert main([*cmd, "--stored-only", "--cell", "0", flag, str(out)]) == 2
        assert "cells are not finished" in capsys.readouterr().err
        assert not out.exists(), (name, _files(out))
    st = tmp_path / "ST6"  # a finished --cell ladder, then a refused --stored-only cell of a larger grid
    lad = ["ladder", *C, "--seeds", "1", "--k-values", "0", *SMALL]
    assert main([*lad, "--methods", "bp", "--cell", "0", "--output_dir", str(st)]) == 0
    kept = (st / "sweep.json").read_bytes()
    assert main([*lad, "--methods", "bp", "fa", "--stored-only", "--cell", "1", "--output_dir", str(st)]) == 2
    assert (st / "sweep.json").read_bytes() == kept
    capsys.readouterr()
    assert main(["report", str(st)]) == 0
    assert "ladder_d16_L2_mnist1d.json" in capsys.readouterr().out


def test_two_identity_checks_of_different_configurations_into_one_file_lose_no_result_unsaid(tmp_path):
    """Unclear case 165: ``identity --seeds 1 2`` and ``--seeds 1 2 3`` into one --out at once both exited 0 and
    one result was gone without a word. Under the folder's lock the file is read again before it is written: a
    check finding it written meanwhile by another configuration is refused (exit 2) and the first result kept."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "depthaudit", "identity", *C, "--probe-batches", "1", "--probe-batch-size", "32"]
    for trial in range(2):
        out = tmp_path / f"CC{trial}.json"
        ps = [subprocess.Popen([*cmd, "--seeds", *seeds, "--out", str(out)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env) for seeds in (["1", "2"], ["1", "2", "3"])]
        res = [(p.wait(timeout=600), p.stderr.read()) for p in ps]
        print(res)
        kept = json.loads(out.read_text())["seeds"]
        for (rc, err), seeds in zip(res, ([1, 2], [1, 2, 3]), strict=True):
            if kept == seeds:  # this one's result is in the file
                assert rc == 0
            else:  # the other's is, and this one said why its own is not (or said that it replaced the other)
                assert (rc == 2 and "was written by another identity check while this one ran" in err) or \
                    (rc == 0 and "note: replaced" in err), (rc, err)
