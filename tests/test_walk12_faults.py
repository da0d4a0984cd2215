"""Walk 12's causes: plug-in models and datasets that do not hold what they say, each one line, exit 2."""

import json
import os
import textwrap
from pathlib import Path

import pytest

from depthaudit.cli import main
from depthaudit.data.base import DATASETS
from depthaudit.models import MODELS

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "2", "--epochs", "1"]

NET = '''
import json
import os

import numpy as np
import torch
from torch import nn

from depthaudit.data.base import DATASETS, ArrayData
from depthaudit.models import MODELS, ResidualAdapter


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, h):
        return h + self.lin(torch.relu(h))


class Net(nn.Module):
    def __init__(self, d_in, d, blocks, k):
        super().__init__()
        self.stem, self.head = nn.Linear(d_in, d), nn.Linear(d, k)
        self.layers = nn.ModuleList([Block(d) for _ in range(blocks)])

    def forward(self, x):
        h = self.stem(x.flatten(1))
        for b in self.layers:
            h = b(h)
        return self.head(h)


def _net(input_shape, num_classes, d_hidden, num_blocks, extra=0):
    return Net(int(np.prod(input_shape)), d_hidden, num_blocks + extra, num_classes)


@MODELS.register("w12-extra")
def extra(input_shape, num_classes, d_hidden=8, num_blocks=2, mlp_ratio=1, seed=0):
    return ResidualAdapter(_net(input_shape, num_classes, d_hidden, num_blocks, 1), embed="stem", blocks="layers",
                           readout="head", block_includes_residual=True)


@MODELS.register("w12-none")
def none(input_shape, num_classes, d_hidden=8, num_blocks=2, mlp_ratio=1, seed=0):
    return ResidualAdapter(_net(input_shape, num_classes, d_hidden, 0), embed="stem", blocks="layers",
                           readout="head", block_includes_residual=True)


@MODELS.register("w12-meta")
def meta(input_shape, num_classes, d_hidden=8, num_blocks=2, mlp_ratio=1, seed=0):
    with torch.device("meta"):
        net = _net(input_shape, num_classes, d_hidden, num_blocks)
    return ResidualAdapter(net, embed="stem", blocks="layers", readout="head", block_includes_residual=True)


@MODELS.register("w12-wired")
def wired(input_shape, num_classes, d_hidden=8, num_blocks=2, mlp_ratio=1, seed=0):
    return ResidualAdapter(_net(input_shape, num_classes, d_hidden, num_blocks), embed="stem", blocks="layers",
                           readout="stem", block_includes_residual=True)


def _arrays(k=3):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 6)).astype(np.float32)
    y = rng.integers(0, 3, 120)
    return ArrayData(x[:90], y[:90], x[90:], y[90:], k, "w12", "0" * 64)


@DATASETS.register("w12-chdir")
def chdir(data_dir=None, download=False):
    os.chdir("/")
    return _arrays()


@DATASETS.register("w12-huge")
def huge(data_dir=None, download=False):
    return _arrays(2**62)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "walk12_plug.py").write_text(textwrap.dedent(NET))
    monkeypatch.syspath_prepend(str(tmp_path))
    for reg in (MODELS, DATASETS):
        monkeypatch.setattr(reg, "_items", dict(reg._items))
        monkeypatch.setattr(reg, "_meta", dict(reg._meta))
    yield "walk12_plug"
    import sys

    sys.modules.pop("walk12_plug", None)


@pytest.mark.parametrize("arch, says", [
    ("w12-extra", "built 3 residual blocks where num_blocks=2 was asked"),  # cases 30, 31: recorded as 2
    ("w12-none", "built 0 residual blocks where num_blocks=2 was asked"),  # case 32
    ("w12-meta", "is on the meta device"),  # case 29: an internal error
    ("w12-wired", "the model's forward pass on two examples of mnist1d fails: RuntimeError")])  # case 28
def test_a_plugin_model_that_is_not_what_was_asked_is_one_line(tmp_path, plugin, capsys, arch, says):
    for cmd in (["train"], ["audit", "--methods", "bp"]):
        out = tmp_path / cmd[0]
        assert main(["--plugin", plugin, cmd[0], *TINY, *cmd[1:], "--arch", arch, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert says in err and "walk12_plug.py" in err and err.count("\n") == 1, err
        assert not list(out.rglob("result.json")) and not (out / "report.json").exists()


def test_a_plugin_loader_that_changes_the_working_folder_is_set_back(tmp_path, plugin, monkeypatch, capsys):
    """Case 25, 26: a loader's os.chdir('/') put a relative --out's run folder at the filesystem root."""
    monkeypatch.chdir(tmp_path)
    assert main(["--plugin", plugin, "train", "--dataset", "w12-chdir", "--d-hidden", "8", "--num-blocks", "1",
                 "--epochs", "1", "--out", "rel"]) == 0
    assert os.getcwd() == str(tmp_path) and (tmp_path / "rel" / "result.json").is_file()
    assert not os.path.exists("/rel")
    assert "changed the working folder; it is set back to" in capsys.readouterr().err


def test_a_dataset_with_an_absurd_class_count_is_one_line(tmp_path, plugin, capsys):
    """Case 23: num_classes=2**62 was an internal error (the readout's storage overflowed)."""
    assert main(["--plugin", plugin, "train", "--dataset", "w12-huge", "--d-hidden", "8", "--num-blocks", "1",
                 "--epochs", "1", "--out", str(tmp_path / "t")]) == 2
    assert "num_classes is 4611686018427387904, more than any readout" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_a_data_flag_a_text_family_does_not_read_is_noted(tmp_path, capsys):
    """Cases 70, 71: saturation --family gpt --dataset mnist1d trained on text with no word about --dataset."""
    assert main(["saturation", "--family", "gpt", "--dataset", "mnist1d", "--extra", "0", "--epochs", "1",
                 "--list-cells", "--out", str(tmp_path / "s")]) == 0
    assert "--dataset has no effect with --family gpt: it reads text" in capsys.readouterr().err


def test_an_out_spelled_through_its_own_runs_folder_is_the_folder(tmp_path, capsys):
    """Cases 85, 86: --out A0/runs/.. (that is A0) was refused as lying in A0/runs."""
    a = tmp_path / "a"
    argv = ["audit", *TINY, "--methods", "bp", "--probe-batches", "1"]
    assert main([*argv, "--out", str(a)]) == 0
    capsys.readouterr()
    assert main([*argv, "--out", str(a / "runs" / "..")]) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    assert main([*argv, "--out", str(a / "runs" / "x")]) == 2  # inside it, still refused
    assert "it lies in" in capsys.readouterr().err


def test_a_sweep_interrupted_before_its_first_run_is_not_rendered_empty_nor_said_to_hold_runs(tmp_path, capsys):
    """Cases 95-97: a ladder (grow) stopped before one run finished: report rendered an empty table (exit 0) and the
    next command of another configuration was told the folder "holds runs of a different configuration"."""
    import json

    lad = tmp_path / "l"
    argv = ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--k-values", "1", "--output_dir", str(lad)]
    assert main(argv) == 0
    for rec in (lad / "ladder_d8_L2_mnist1d.runs").glob("*.json"):  # as a sweep stopped before its first run
        if rec.name != "identity.json":
            rec.unlink()
    doc = json.loads((lad / "ladder_d8_L2_mnist1d.json").read_text())
    (lad / "ladder_d8_L2_mnist1d.json").write_text(json.dumps({**doc, "runs": {}}))
    for f in ("ladder_d8_L2_mnist1d.md", "ladder_d8_L2_mnist1d.png"):
        (lad / f).unlink()
    capsys.readouterr()
    assert main(["report", str(lad)]) == 2
    err = capsys.readouterr().err
    assert "holds no finished run yet" in err and not (lad / "ladder_d8_L2_mnist1d.md").exists(), err
    assert "its sweep (ladder_d8_L2_mnist1d.json) has no finished run yet: rerun the command" in err  # walk 15 153
    assert "pass a folder depthaudit wrote" not in err
    assert main(["report", str(lad / "ladder_d8_L2_mnist1d.runs")]) == 2  # walk 16 cases 160, 161: its run store
    assert "it is the run store of" in capsys.readouterr().err
    assert main([*argv[:-2], "--lr", "0.002", "--output_dir", str(lad)]) == 2
    err = capsys.readouterr().err
    assert "is claimed by a sweep of a different configuration that has no finished run yet" in err, err
    assert "holds runs" not in err


def test_an_api_yes_no_argument_takes_a_bool(tmp_path):
    """Case 112: da.audit(..., replace_report="yes") was taken as True."""
    import depthaudit as da
    from depthaudit.errors import ConfigError

    cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), methods=("bp",))
    for kw in ({"replace_report": "yes"}, {"progress": 1}):
        with pytest.raises(ConfigError, match="must be True or False"):
            da.audit(cfg, tmp_path / "a", **kw)
    assert not (tmp_path / "a").exists()


def test_walk13_a_dataset_of_scalar_or_object_inputs_is_one_line_naming_the_dataset(tmp_path, monkeypatch, capsys):
    """Walk 13 cases 54, 58: inputs of shape (N,) blamed the built-in model; an object array was a traceback."""
    import numpy as np

    from depthaudit.data.base import ArrayData

    monkeypatch.setattr(DATASETS, "_items", dict(DATASETS._items))
    monkeypatch.setattr(DATASETS, "_meta", dict(DATASETS._meta))
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 60)

    @DATASETS.register("w13-flat")
    def flat(data_dir=None, download=False):
        x = rng.normal(size=60).astype(np.float32)
        return ArrayData(x[:40], y[:40], x[40:], y[40:], 3, "w13", "0" * 64)

    @DATASETS.register("w13-object")
    def obj(data_dir=None, download=False):
        x = rng.normal(size=(60, 4)).astype(object)
        return ArrayData(x[:40], y[:40], x[40:], y[40:], 3, "w13", "0" * 64)

    for name, says in (("w13-flat", "its train inputs have shape (40,)"), ("w13-object", "of dtype object")):
        out = tmp_path / name
        assert main(["train", "--dataset", name, "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                     "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert says in err and "resmlp" not in err and err.count("\n") == 1, err
        assert not out.exists()


def test_walk13_a_diagnostic_of_the_wrong_shape_is_named(tmp_path, monkeypatch, capsys):
    """Walk 13 cases 39-41: order = "x", summarise() returning None, section() returning 42 were tracebacks."""
    from depthaudit.diagnostics import Diagnostic, register
    from depthaudit.diagnostics.base import DIAGNOSTICS
    from depthaudit.errors import UsageError

    monkeypatch.setattr(DIAGNOSTICS, "_items", dict(DIAGNOSTICS._items))
    monkeypatch.setattr(DIAGNOSTICS, "_meta", dict(DIAGNOSTICS._meta))
    with pytest.raises(UsageError, match="its order is 'x'; give a number"):
        @register
        class Bad(Diagnostic):
            name, order = "w13_bad_order", "x"

    argv = ["audit", *TINY, "--methods", "bp", "--probe-batches", "1"]
    for i, (body, says) in enumerate((
            ("    @classmethod\n    def summarise(cls, finals, num_blocks):\n        return None\n",
             "has a summarise() that returned NoneType"),
            ("    @classmethod\n    def section(cls, report, table):\n        return 42\n",
             "its section() returned int 42"))):
        ns = {}
        exec("from depthaudit.diagnostics import Diagnostic, register\n\n@register\nclass W13(Diagnostic):\n"
             f"    name, order = 'w13_{i}', 50\n\n    def compute(self, snap):\n        return {{'v': 1.0}}\n\n{body}",
             ns)
        assert main([*argv, "--out", str(tmp_path / f"a{i}")]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and "internal error" not in err, err
        DIAGNOSTICS._items.pop(f"w13_{i}"), DIAGNOSTICS._meta.pop(f"w13_{i}", None)


def test_walk14_a_plugin_that_closes_stdout_is_one_line(tmp_path):
    """Walk 14 case 56: a plug-in method that closed sys.stdout: an internal error with two tracebacks."""
    import subprocess
    import sys

    (tmp_path / "w14_close.py").write_text(
        "import sys\nfrom depthaudit.methods import METHODS\nfrom depthaudit.methods.dfa import DFA\n\n"
        "@METHODS.register('w14-close')\nclass Close(DFA):\n    def credits(self, model, tr, e):\n"
        "        sys.stdout.close()\n        return super().credits(model, tr, e)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "w14_close", "train", *TINY, "--method",
                        "w14-close", "--out", str(tmp_path / "t")], env=env, capture_output=True, text=True,
                       timeout=300)
    print(p.returncode, p.stderr[-600:])
    assert p.returncode == 2, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert "cannot write the standard output (it was closed during the command" in last
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr


@pytest.mark.parametrize("kind, says", [
    ("torch", "its train inputs are a Tensor, not a numpy array; ArrayData holds numpy arrays: give v.numpy()"),
    ("list", "its train inputs are a list, not a numpy array; ArrayData holds numpy arrays: give np.asarray(v)"),
    ("labels-list", "its train labels are a list, not a numpy array"),
    ("zerofeat", "its train inputs have shape (40, 0): 0 features per example"),
    ("ncfloat", "num_classes is 3.0 (a float); give an int ≥ 2"),
    ("ncbool", "num_classes is True (a bool); give an int ≥ 2")])
def test_walk14_a_dataset_of_tensors_lists_no_features_or_a_float_class_count_is_one_line(
        tmp_path, monkeypatch, capsys, kind, says):
    """Walk 14 cases 64, 65, 67, 68, 71: tensors, lists, (N, 0) inputs were tracebacks; num_classes=4.0 was told
    it needs at least 2 classes."""
    import numpy as np
    import torch

    from depthaudit.data.base import ArrayData

    monkeypatch.setattr(DATASETS, "_items", dict(DATASETS._items))
    monkeypatch.setattr(DATASETS, "_meta", dict(DATASETS._meta))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 4)).astype(np.float32), rng.integers(0, 3, 60)
    xtr, ytr, k = x[:40], y[:40], 3
    if kind == "torch":
        xtr = torch.from_numpy(xtr)
    elif kind == "list":
        xtr = xtr.tolist()
    elif kind == "labels-list":
        ytr = ytr.tolist()
    elif kind == "zerofeat":
        x = x[:, :0]
        xtr = x[:40]
    else:
        k = {"ncfloat": 3.0, "ncbool": True}[kind]

    @DATASETS.register("w14-ds")
    def ds(data_dir=None, download=False):
        return ArrayData(xtr, ytr, x[40:], y[40:], k, "w14", "0" * 64)

    out = tmp_path / kind
    assert main(["train", "--dataset", "w14-ds", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert says in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()


def test_walk14_a_force_retrain_whose_checkpoint_cannot_be_replaced_keeps_the_old_pair(tmp_path, monkeypatch,
                                                                                      capsys):
    """Walk 14 case 100: an unreplaceable checkpoint.pt (chattr +i) stayed beside the new run's result.json, and a
    warm start from it read the other run's weights with no word."""
    import depthaudit.io as dio

    a = tmp_path / "a"
    assert main(["train", *TINY, "--out", str(a)]) == 0
    old_rec, old_ck = (a / "result.json").read_bytes(), (a / "checkpoint.pt").read_bytes()
    assert "checkpoint_sha256" in json.loads(old_rec)  # the record seals its checkpoint
    real_replace, real_unlink = os.replace, Path.unlink

    def no_ck(src, dst, *args, **kw):  # the checkpoint's destination refuses to be replaced (an immutable file)
        if str(dst).endswith("checkpoint.pt"):
            raise PermissionError(1, "Operation not permitted", str(dst))
        return real_replace(src, dst, *args, **kw)

    def no_unlink(self, *args, **kw):
        if self.name == "checkpoint.pt":
            raise PermissionError(1, "Operation not permitted", str(self))
        return real_unlink(self, *args, **kw)

    monkeypatch.setattr(os, "replace", no_ck)
    monkeypatch.setattr(dio.os, "replace", no_ck)
    monkeypatch.setattr(Path, "unlink", no_unlink)
    capsys.readouterr()
    assert main(["train", *TINY, "--lr", "0.01", "--out", str(a), "--force"]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "checkpoint.pt is the previous run's and cannot be replaced or removed" in err.splitlines()[-1]
    assert "Traceback" not in err
    monkeypatch.undo()
    assert (a / "result.json").read_bytes() == old_rec and (a / "checkpoint.pt").read_bytes() == old_ck

    # a folder whose checkpoint is another run's (copied in by hand): a warm start from it is refused
    b = tmp_path / "b"
    assert main(["train", *TINY, "--lr", "0.01", "--out", str(b)]) == 0
    (b / "checkpoint.pt").write_bytes(old_ck)
    capsys.readouterr()
    assert main(["train", *TINY, "--method", "fa", "--warm-start", str(b / "checkpoint.pt"),
                 "--out", str(tmp_path / "w")]) == 2
    assert "is not the checkpoint of the run recorded beside it" in capsys.readouterr().err
    assert main(["train", *TINY, "--method", "fa", "--warm-start", str(a / "checkpoint.pt"),
                 "--out", str(tmp_path / "w")]) == 0  # its own pair: read


def test_walk14_the_python_refusal_of_another_audits_folder_names_the_keyword(tmp_path):
    """Walk 14 case 119: da.audit's refusal named only --replace-report, a flag Python has no way to pass."""
    import depthaudit as da

    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    out = tmp_path / "a"
    da.audit(da.AuditConfig(base=base, methods=("bp", "fa"), probe_batches=1), out, progress=False)
    with pytest.raises(da.UsageError, match=r"replace_report=True"):
        da.audit(da.AuditConfig(base=base, methods=("bp",), probe_batches=1), out, progress=False)


def test_walk14_a_plugin_raising_keyboardinterrupt_on_import_is_named_but_a_real_signal_is_an_interrupt(tmp_path):
    """Walk 14 (unclear): a module whose import raised KeyboardInterrupt ended as an interrupt (130), unlike the
    same raise in its credits() (named, exit 2); a SIGTERM while a slow plug-in imports is still an interrupt."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "w14_kbd.py").write_text("raise KeyboardInterrupt\n")
    mark = tmp_path / "importing"
    (tmp_path / "w14_slow.py").write_text(f"import pathlib, time\npathlib.Path({str(mark)!r}).touch()\n"
                                          "time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "depthaudit", "--plugin"]
    p = subprocess.run([*argv, "w14_kbd", "train", *TINY, "--out", str(tmp_path / "a")], env=env,
                       capture_output=True, text=True, timeout=120)
    print(p.returncode, p.stderr)
    assert p.returncode == 2 and "--plugin w14_kbd: importing it raised KeyboardInterrupt at" in p.stderr
    assert "w14_kbd.py:1" in p.stderr and not (tmp_path / "a").exists()
    q = subprocess.Popen([*argv, "w14_slow", "train", *TINY, "--out", str(tmp_path / "b")], env=env,
                         stderr=subprocess.PIPE, text=True)
    for _ in range(600):  # the command's signal handlers are in place before plug-ins import
        if mark.exists():
            break
        time.sleep(0.1)
    q.send_signal(signal.SIGTERM)
    err = q.communicate(timeout=60)[1]
    print(q.returncode, err)
    assert q.returncode == 130 and "interrupted" in err and "w14_slow" not in err


def test_walk15_a_numpy_integer_class_count_trains_and_is_recorded(tmp_path, monkeypatch):
    """Walk 15 case 17: num_classes=np.int64(3) trained, then the record failed to serialise (internal error) and
    left checkpoint.pt without result.json."""
    import numpy as np

    from depthaudit.data.base import ArrayData

    monkeypatch.setattr(DATASETS, "_items", dict(DATASETS._items))
    monkeypatch.setattr(DATASETS, "_meta", dict(DATASETS._meta))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 4)).astype(np.float32), rng.integers(0, 3, 60)

    @DATASETS.register("w15-npk")
    def ds(data_dir=None, download=False):
        return ArrayData(x[:40], y[:40], x[40:], y[40:], np.int64(y.max() + 1), "w15", "0" * 64)

    out = tmp_path / "t"
    assert main(["train", "--dataset", "w15-npk", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--out", str(out)]) == 0
    rec = json.loads((out / "result.json").read_text())
    assert rec["provenance"]["data"]["num_classes"] == 3 and (out / "checkpoint.pt").is_file()


def test_walk15_a_flag_hint_names_this_commands_flag_or_where_a_global_flag_goes(tmp_path, capsys, monkeypatch):
    """Walk 15 cases 40-42: `audit --method` was told "did you mean --method?", probes' `--methods` likewise, report
    was offered audit's --methods, and `train … --plugin X` was told to use --plugin."""
    monkeypatch.delenv("DEPTHAUDIT_PLUGINS", raising=False)  # (--plugin json is imported, and set there)
    for argv, says in ((["audit", *TINY, "--method", "fa"], "did you mean --methods?"),
                       (["probes", *TINY, "--methods", "fa"], "did you mean --method?"),
                       (["train", *TINY, "--seeds", "3"], "did you mean --seed?"),
                       (["train", *TINY, "--plugin", "json"], "--plugin goes before the command: depthaudit --plugin "
                                                             "json train …"),
                       (["audit", "--version"], "--version is depthaudit's own flag: depthaudit --version")):
        assert main([*argv, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        print(err)
        assert says in err and err.count("\n") == 1, err
    assert main(["report", str(tmp_path), "--method", "x"]) == 2
    assert "did you mean" not in capsys.readouterr().err  # report has no --method nor --methods


def test_walk15_report_of_an_unfinished_cell_audit_advises_what_works(tmp_path, capsys):
    """Walk 15 cases 64, 65: report's "remove sweep.json" alternative rendered nothing for an audit, and the next
    line said "nothing retrains" where 3 of 4 runs were not stored."""
    out = tmp_path / "lc"
    argv = ["audit", *TINY, "--methods", "bp", "fa", "--probe-batches", "1"]
    assert main([*argv, "--out", str(out), "--cell", "0"]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    print(err)
    assert "3 of 4 cells are not finished" in err and "remove" not in err
    assert "or rerun the command without --cell: depthaudit audit --dataset mnist1d" in err
    assert f"--out {out} trains what is missing and writes the report" in err
    (out / "sweep.json").unlink()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "nothing retrains" not in err and "only runs not yet stored train" in err
    assert main([*argv, "--out", str(out)]) == 0  # the advice works
    assert (out / "report.json").is_file()
    capsys.readouterr()
    assert main(["report", str(out / "runs")]) == 2  # walk 15 case 46: its run store points to it
    assert f"it is the run store of the sweep in {out.resolve()}: depthaudit report" in capsys.readouterr().err


@pytest.mark.parametrize("kind, says", [
    ("func", "building it gave a NoneType, not a CreditMethod"),
    ("plainclass", "building it gave a PC, not a CreditMethod; register a subclass"),
    ("opt-seed", "its option 'seed' has the name of the argument every method is built with"),
    ("opt-model", "its option 'model' has the name of the argument every method is built with")])
def test_walk15_a_plugin_method_that_builds_no_creditmethod_or_whose_option_clashes_is_one_line(
        tmp_path, monkeypatch, capsys, kind, says):
    """Walk 15 cases 98-100: a function returning None, a class not derived from CreditMethod, an option named
    "seed" or "model" were internal errors."""
    from depthaudit.methods import METHODS, Option
    from depthaudit.methods.dfa import DFA

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))
    if kind == "func":
        METHODS.register("w15-m")(lambda model, seed: None)
    elif kind == "plainclass":
        class PC:
            def __init__(self, model, seed):
                pass

        METHODS.register("w15-m")(PC)
    else:
        opt = kind.split("-")[1]

        class ON(DFA):
            options = {opt: Option(1.0, "clashes")}

            def __init__(self, model, seed, **kw):
                super().__init__(model, seed)

        METHODS.register("w15-m")(ON)
    out = tmp_path / kind
    assert main(["train", *TINY, "--method", "w15-m", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    last = err.strip().splitlines()[-1]
    assert last.startswith("depthaudit: error: method w15-m (") and "test_walk12_faults.py:" in last
    assert says in last and "Traceback" not in err and "internal error" not in err
    assert not (out / "result.json").exists()


def test_walk15_report_of_a_plugin_methods_audit_without_the_plugin_names_the_plugin(tmp_path, monkeypatch, capsys):
    """Walk 15 cases 134, 135: report without --plugin said the record "holds a config this version cannot read" and
    advised retraining; the fix is the --plugin that registers the method."""
    from depthaudit.methods import METHODS
    from depthaudit.methods.bp import BP

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))
    METHODS.register("w15-nbp")(type("NB", (BP,), {}))
    out = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "w15-nbp", "--probe-batches", "1", "--out", str(out)]) == 0
    assert main(["report", str(out)]) == 0  # registered: renders
    METHODS._items.pop("w15-nbp")
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "names method 'w15-nbp', which no module loaded here registers" in err and "--plugin MODULE" in err
    assert "cannot read" not in err and "trains that run again" not in err


def test_walk15_a_damaged_ladder_json_counts_its_run_records_without_the_stores_identity(tmp_path, capsys):
    """Walk 15 cases 187, 189: "rebuilt from the 13 run record(s)" for 12 runs (identity.json counted)."""
    lad = tmp_path / "l"
    argv = ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--k-values", "1", "--output_dir", str(lad)]
    assert main(argv) == 0
    runs = lad / "ladder_d8_L2_mnist1d.runs"
    n = sum(p.name != "identity.json" for p in runs.glob("*.json"))
    assert (runs / "identity.json").is_file() and n >= 1
    (lad / "ladder_d8_L2_mnist1d.json").write_text("{not json")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    print(err)
    assert f"it is rebuilt from the {n} run record(s) in" in err


def test_walk15_trains_default_folder_names_the_whole_config_and_a_refusal_says_whose_run_it_holds(
        tmp_path, monkeypatch, capsys):
    """Walk 15 case 211: the default runs/<config> dropped the method's options and the recipe (fa and
    fa:head=exact shared it), and the refusal advised --force over another configuration's run."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY, "--method", "fa"]) == 0
    assert main(["train", *TINY, "--method", "fa:head=exact"]) == 0
    assert main(["train", *TINY, "--method", "fa", "--lr", "0.002"]) == 0
    assert len(list((tmp_path / "runs").glob("*/result.json"))) == 3  # three configurations, three folders
    capsys.readouterr()
    assert main(["train", *TINY, "--method", "fa"]) == 2
    assert "already exists (this configuration's); pass --force" in capsys.readouterr().err
    one = next((tmp_path / "runs").glob("*/result.json")).parent
    assert main(["train", *TINY, "--method", "fa", "--lr", "0.05", "--out", str(one)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "(a run of another configuration: differs in" in err


def test_walk15_a_force_retrain_whose_record_cannot_be_replaced_keeps_the_old_pair(tmp_path, monkeypatch, capsys):
    """Walk 15 case 243 (walk 14 W5's mirror): an unreplaceable result.json left the new run's checkpoint beside
    the old record, while the line said nothing was half-written."""
    import depthaudit.io as dio

    a = tmp_path / "a"
    assert main(["train", *TINY, "--out", str(a)]) == 0
    old = {f: (a / f).read_bytes() for f in ("result.json", "checkpoint.pt", "identity.json")}
    real_replace = os.replace

    def no_rec(src, dst, *args, **kw):  # the record's destination refuses to be replaced (an immutable file)
        if str(dst).endswith("result.json"):
            raise PermissionError(1, "Operation not permitted", str(dst))
        return real_replace(src, dst, *args, **kw)

    monkeypatch.setattr(dio.os, "replace", no_rec)
    capsys.readouterr()
    assert main(["train", *TINY, "--lr", "0.01", "--out", str(a), "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    print(err)
    assert "result.json: Operation not permitted" in err and "nothing half-written" in err
    monkeypatch.undo()
    for f, b in old.items():
        assert (a / f).read_bytes() == b, f  # the previous run's pair (and claim) as they were
    assert sorted(p.name for p in a.iterdir() if not p.name.startswith(".")) == sorted(old)  # no temp file left


def test_walk15_a_sweeps_base_seed_is_never_dropped_and_reordered_seeds_are_the_same_audit(tmp_path, capsys):
    """Walk 15 cases 259, 260: AuditConfig/LadderConfig replaced a base seed of 5 by 42 without a word; cases
    288-292: the same seeds in another order were refused as another audit/intervention (differs in base.seed)."""
    import depthaudit as da

    b = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1, seed=5)
    for cls in (da.AuditConfig, da.LadderConfig):
        with pytest.raises(da.ConfigError, match=r"base config's seed 5 is not what this sweep trains.*seeds=\(5,\)"):
            cls(base=b, methods=("bp",))
    assert da.AuditConfig(base=b, methods=("bp",), seeds=(7, 5)).base.seed == 7  # 5 is trained: kept among them
    assert da.AuditConfig(base=da.TrainConfig(seed=42), methods=("bp",), seeds=(1,)).base.seed == 1  # the default
    argv = [*TINY, "--methods", "bp", "--probe-batches", "1"]
    for cmd, extra in (("audit", []), ("intervene", ["--penalty", "0.1"])):
        out = tmp_path / cmd
        assert main([cmd, *argv, *extra, "--seeds", "1", "2", "--out", str(out)]) == 0
        capsys.readouterr()
        assert main([cmd, *argv, *extra, "--seeds", "2", "1", "--out", str(out)]) == 0, capsys.readouterr().err
        assert "4 of 4 runs already finished" in capsys.readouterr().err or cmd == "intervene"  # nothing retrains


def test_walk16_report_of_a_plugin_archs_audit_without_the_plugin_names_the_plugin(tmp_path, monkeypatch, capsys):
    """Walk 16 case 11: the same for a plug-in --arch (its refusal reads "arch … not known", which was missed)."""
    from depthaudit.models import MODELS, build_model

    monkeypatch.setattr(MODELS, "_items", dict(MODELS._items))
    monkeypatch.setattr(MODELS, "_meta", dict(MODELS._meta))

    @MODELS.register("w16-arch")
    def arch(input_shape, num_classes, d_hidden=8, num_blocks=2, mlp_ratio=1, seed=0):
        return build_model("resmlp", input_shape, num_classes, d_hidden, num_blocks, None, seed)

    out = tmp_path / "a"
    assert main(["audit", *TINY, "--arch", "w16-arch", "--methods", "bp", "--probe-batches", "1",
                 "--out", str(out)]) == 0
    MODELS._items.pop("w16-arch")
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "names arch 'w16-arch', which no module loaded here registers" in err and "cannot read" not in err


def test_walk16_a_results_record_is_the_json_it_wrote(tmp_path):
    """Walk 16 cases 22-30: Result.record lacked the checkpoint digest (train) and the seal (audit) its file has."""
    import depthaudit as da

    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    t = da.train(base, tmp_path / "t", progress=False)
    assert t.record == json.loads(t.path.read_text()) and "checkpoint_sha256" in t.record
    a = da.audit(da.AuditConfig(base=base, methods=("bp",), probe_batches=1), tmp_path / "a", progress=False)
    assert a.record == json.loads(Path(a.path).read_text()) and "record_sha256" in a.record


def test_walk16_intervene_trains_the_penalty_form_and_reduction_it_is_given(tmp_path):
    """Walk 16 cases 128-134: intervene's --penalty-form rel and --penalty-reduction element were dropped (the base,
    without a penalty, keeps neither); every penalized run trained abs/example."""
    out = tmp_path / "i"
    assert main(["intervene", *TINY, "--methods", "bp", "--penalty", "0.1", "--penalty-form", "rel",
                 "--penalty-reduction", "element", "--probe-batches", "1", "--out", str(out)]) == 0
    seen = {(c["scale_penalty"], c["penalty_form"], c["penalty_reduction"])
            for c in (json.loads(p.read_text())["config"] for p in (out / "runs").glob("*/result.json"))}
    assert seen == {(0.0, "abs", "example"), (0.1, "rel", "element")}, seen
    doc = json.loads((out / "intervention.json").read_text())
    assert doc["penalty_form"] == "rel" and doc["penalty_reduction"] == "element"


def test_walk16_an_unknown_method_or_dataset_from_python_is_a_config_error_naming_its_field(tmp_path):
    """Walk 16 case 83: TrainConfig(method="nope") and da.train(TrainConfig(dataset="nope")) raised a plain
    UsageError with no .field, unlike an unknown arch."""
    import depthaudit as da

    with pytest.raises(da.ConfigError, match="method 'nope' not known; use one of") as e:
        da.TrainConfig(method="nope")
    assert e.value.field == "method"
    with pytest.raises(da.ConfigError, match="dataset 'nope' not known; use one of") as e:
        da.train(da.TrainConfig(dataset="nope", epochs=1), tmp_path / "t", progress=False)
    assert e.value.field == "dataset" and not (tmp_path / "t").exists()
