"""Walk 43's unclear cases, settled (docs/walks/walk43_*.txt)."""

import os
import sys

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]

CHDIR = '''
import os
from depthaudit.methods import METHODS, CreditMethod
from depthaudit.methods.bp import bp_credits

@METHODS.register("chdir43")
class Chd(CreditMethod):
    needs_input_grad = True
    def __init__(self, model, seed):
        super().__init__(model, seed)
        os.chdir(os.environ["CHDIR43"])
    def credits(self, model, tr, e):
        return bp_credits(tr)
'''


def test_a_method_constructor_that_moves_the_process_leaves_a_relative_out_the_users(tmp_path, monkeypatch, capsys):
    """Case 13: a plug-in method's ``__init__`` that called ``os.chdir`` made ``train --out M11`` write under the
    folder it moved to (stores.md: a plug-in's change of the working folder is undone and said). Undone after the
    constructor, with a note naming it: the run is where the command line said."""
    from depthaudit.methods import METHODS

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))
    (tmp_path / "chd43.py").write_text(CHDIR)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "here").mkdir()
    monkeypatch.setenv("CHDIR43", str(tmp_path / "elsewhere"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path / "here")
    try:
        assert main(["--plugin", "chd43", "train", *C, "--method", "chdir43", "--out", "M11"]) == 0
        err = capsys.readouterr().err
        assert "method chdir43's constructor" in err and "changed the working folder" in err
        assert (tmp_path / "here" / "M11" / "result.json").is_file()
        assert not (tmp_path / "elsewhere" / "M11").exists() and os.getcwd() == str(tmp_path / "here")
    finally:
        sys.modules.pop("chd43", None)


def test_a_scratch_folder_of_a_killed_process_is_removed_by_the_next_render(tmp_path):
    """Case 109: a script killed by SIGTERM (Python's default: no cleanup) while rendering left
    ``.render-*/…tmp`` in the folder, and no later render ever removed it. A scratch folder names its host and
    PID; the next render removes those of this host whose process is gone, never a live one's."""
    import subprocess

    from depthaudit.io import _HOST, staged

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".render-{_HOST}-{dead.pid}-abc123"
    (stale / "x").mkdir(parents=True)
    (stale / "x" / ".fig.png.tmp").write_bytes(b"partial")
    live = tmp_path / f".render-{_HOST}-{os.getppid()}-def456"  # a running process's (pytest's parent)
    live.mkdir()
    other = tmp_path / f".render-otherhost-{dead.pid}-ghi789"  # another machine's on a shared file system
    other.mkdir()
    with staged(tmp_path) as tmp:
        (tmp / "report.md").write_text("ok")
    assert not stale.exists() and live.is_dir() and other.is_dir()
    assert (tmp_path / "report.md").read_text() == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "report.md"])


def test_a_numpy_scalar_is_a_number_for_a_method_option():
    """Case 192: ``method_options={"gain": np.float32(2)}`` was refused as "not a number" (numpy ints and floats
    are taken elsewhere, e.g. seeds). Taken, and stored as the plain Python number it is; a numpy bool is not."""
    import numpy as np
    import pytest

    import depthaudit as da

    cfg = da.TrainConfig(method="fa-stream", method_options={"scale": np.float32(0.5)})
    assert cfg.method_options["scale"] == 0.5 and type(cfg.method_options["scale"]) is float
    cfg = da.TrainConfig(method="ep", method_options={"steps": np.int64(20)})
    assert cfg.method_options["steps"] == 20 and type(cfg.method_options["steps"]) is int
    with pytest.raises(da.ConfigError, match="is not a number"):
        da.TrainConfig(method="ep", method_options={"steps": np.bool_(True)})
    cfg = da.TrainConfig(method="fa-stream", method_options={"identity": np.bool_(True)})  # (walk 45 case 52)
    assert cfg.method_options["identity"] is True
