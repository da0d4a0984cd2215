"""What the sixth independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import os
import subprocess
import sys

from depthaudit.cli import main

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def _audit(tmp_path):
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    return a


def test_the_report_scripts_check_their_options_and_their_output(tmp_path, capsys):
    """83, 84, 86: a negative budget, an unknown dataset accepted; a user's own PNG replaced by the claim figure."""
    from PIL import Image

    from depthaudit.report import claim, field

    a = _audit(tmp_path)
    capsys.readouterr()
    for opts, words in ((["--epochs", "-1"], "--epochs '-1': give the budget, an integer >= 1"),
                        (["--epochs", "x"], "--epochs 'x'"), (["--dataset", "nosuch"], "--dataset 'nosuch' not known"),
                        (["--epochs"], "--epochs needs a value")):
        assert field.main([str(tmp_path / "f.md"), str(a), *opts]) == 2, opts
        assert words in capsys.readouterr().err
    assert not (tmp_path / "f.md").exists()
    photo = tmp_path / "photo.png"
    Image.new("RGB", (10, 10)).save(photo)
    before = photo.read_bytes()
    assert claim.main([str(photo), str(a)]) == 2
    assert "give a new or depthaudit-written .png path" in capsys.readouterr().err and photo.read_bytes() == before
    assert claim.main([str(tmp_path / "c.png"), str(a)]) == 0
    assert claim.main([str(tmp_path / "c.png"), str(a)]) == 0  # its own figure: replaced


def test_the_report_scripts_end_quietly_when_stdout_fails(tmp_path):
    """91–94: the field/claim scripts into /dev/full or a closed pipe were tracebacks."""
    a = _audit(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for mod, first in (("depthaudit.report.field", str(tmp_path / "f.md")),
                       ("depthaudit.report.claim", str(tmp_path / "c.png"))):
        cmd = [sys.executable, "-m", mod, first, str(a)] + (["--dataset", "mnist1d", "--epochs", "1"]
                                                              if mod.endswith("field") else [])
        with open("/dev/full", "w") as full:
            p = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
        assert p.returncode == 2 and "cannot write the standard output" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        p.stdout.close()  # the reader is gone before a line is printed
        _, err = p.communicate(timeout=300)
        assert p.returncode == 141 and b"Traceback" not in err, err
