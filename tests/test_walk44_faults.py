"""Walk 44's wrong cases, reproduced as the walker did them (docs/walks/walk44_*.txt)."""

import os
import subprocess
import sys

import pytest

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1", "--probe-batches", "1",
     "--probe-batch-size", "32"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_report_of_a_parent_into_a_full_standard_output_is_that_one_error(tmp_path, capsys):
    """W1 (cases 246–259, 282): ``report PARENT > /dev/full`` (a folder of two ladders, or of several results)
    called every file "skipped … No space left on device; free space on that disk" and closed "no result(s) were
    rendered", though each file was rewritten. Standard output that cannot be written is the command's one error
    (stores.md): "cannot write the standard output (No space left on device)", exit 2, the files kept."""
    par = tmp_path / "PF"
    lad = ["ladder", *C, "--methods", "bp", "--seeds", "1", "--k-values", "0", "--output_dir", str(par / "a")]
    assert main(lad) == 0
    assert main([*lad[:4], "8", *lad[5:]]) == 0  # a second ladder (d=8) in the same folder
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(par / "b")]) == 0
    capsys.readouterr()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for target in (par, par / "a"):
        with open("/dev/full", "w") as full:
            p = subprocess.run([sys.executable, "-m", "depthaudit", "report", str(target)], stdout=full,
                               stderr=subprocess.PIPE, text=True, env=env, timeout=600)
        print(p.stderr)
        assert p.returncode == 2
        assert p.stderr.strip().splitlines()[-1].startswith(
            "depthaudit: error: cannot write the standard output (No space left on device)")
        assert "skipped" not in p.stderr and "free space on that disk" not in p.stderr and "Exception" not in p.stderr
