"""Bad input, as a newcomer types it: exit 2, one line naming the problem, no traceback, nothing written."""

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from depthaudit.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY_RUN = ["--epochs", "1", "--d-hidden", "8", "--num-blocks", "1", "--out", "tiny"]


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def _setup(tmp):
    """Files the cases point at (created before the 'nothing written' snapshot)."""
    (tmp / "afile").write_text("x")
    (tmp / "empty.txt").write_text("")
    np.save(tmp / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp / "garbage.pt").write_bytes(b"not a checkpoint")
    (tmp / "plugin_raises.py").write_text("raise RuntimeError('boom')\n")
    (tmp / "plugin_syntax.py").write_text("def f(:\n")
    (tmp / "plugin_rereg.py").write_text("from depthaudit.methods import METHODS, BP\nMETHODS.register('bp')(BP)\n")
    for name, doc in {"trunc": '{"schema": "depthaudit.ladder.v1", "runs": {', "list": "[1, 2]",
                      "badruns": json.dumps({"identity": {"dataset": "c", "arch": "r", "d_hidden": 1, "num_blocks": 1,
                                                          "epochs": 1}, "runs": {"bp/k0/s1": {"final": 3}}})}.items():
        (tmp / f"rep_{name}").mkdir()
        (tmp / f"rep_{name}" / "ladder_x.json").write_text(doc)
    (tmp / "rep_report").mkdir()
    (tmp / "rep_report" / "report.json").write_text(json.dumps({"schema": "depthaudit.audit.v2", "methods": 3}))
    (tmp / "rep_garbage").mkdir()
    (tmp / "rep_garbage" / "report.json").write_text("{{{")
    (tmp / "auditrunsfile").mkdir()
    (tmp / "auditrunsfile" / "runs").write_text("x")
    (tmp / "rep_sweep").mkdir()
    (tmp / "rep_sweep" / "sweep.json").write_text(json.dumps({"schema": "depthaudit.sweep.v1",
                                                               "argv": "ladder --epochs 1"}))
    # found by a second walk (issue 13's re-walk)
    np.save(tmp / "big.npy", np.array([0, 1, 2**50], dtype=np.int64))
    np.save(tmp / "two.npy", np.zeros((4, 50), dtype=np.int64))
    (tmp / "plugin_exits.py").write_text("import sys\nsys.exit(3)\n")
    audit = json.loads((ROOT / "docs/results/audit_mnist1d/report.json").read_text())
    for name in ("rep_other", "rep_hist"):  # (with its run records: a report.json without them is refused)
        shutil.copytree(ROOT / "docs/results/audit_mnist1d/runs", tmp / name / "runs")
    (tmp / "rep_other" / "report.json").write_text(json.dumps(audit))
    audit["methods"][0]["history"]["epochs"] = audit["methods"][0]["history"]["epochs"][:1]
    (tmp / "rep_hist" / "report.json").write_text(json.dumps(audit))
    # plug-ins whose code fails at run time, a dataset that breaks its own promise, mismatched image sizes
    (tmp / "plugin_badcredits.py").write_text(
        "from depthaudit.methods import METHODS, FA\n\n@METHODS.register('badfa')\nclass BadFA(FA):\n"
        "    name = 'badfa'\n\n    def credits(self, model, tr, e):\n        raise RuntimeError('no credit')\n")
    (tmp / "plugin_fewcredits.py").write_text(
        "from depthaudit.methods import METHODS, FA\n\n@METHODS.register('fewfa')\nclass FewFA(FA):\n"
        "    name = 'fewfa'\n\n    def credits(self, model, tr, e):\n"
        "        return super().credits(model, tr, e)[:1]\n")
    (tmp / "plugin_badlabels.py").write_text(
        "import numpy as np\nfrom depthaudit.data.base import DATASETS, ArrayData\n\n@DATASETS.register('badlabels')\n"
        "def load(data_dir=None, download=False):\n    x = np.zeros((8, 4), np.float32)\n"
        "    return ArrayData(x, np.arange(8), x, np.zeros(8, np.int64), 2, 'test', '0' * 64)\n")
    from PIL import Image

    for split, size in (("train", 8), ("test", 10)):
        for cls in ("a", "b"):
            (tmp / "imgs" / split / cls).mkdir(parents=True)
            Image.new("RGB", (size, size)).save(tmp / "imgs" / split / cls / "0.png")
    # issue 25's re-walk: plug-ins whose objects break their contract (loader, model factory), data with NaN
    (tmp / "plugin_nonedata.py").write_text(
        "from depthaudit.data.base import DATASETS\n\n@DATASETS.register('nonedata')\n"
        "def load(data_dir=None, download=False):\n    return None\n")
    (tmp / "plugin_nandata.py").write_text(
        "import numpy as np\nfrom depthaudit.data.base import DATASETS, ArrayData\n\n@DATASETS.register('nandata')\n"
        "def load(data_dir=None, download=False):\n    x = np.full((8, 4), np.nan, np.float32)\n"
        "    return ArrayData(x, np.arange(8) % 2, x, np.arange(8) % 2, 2, 'nan', '1' * 64)\n")
    (tmp / "plugin_linear.py").write_text(
        "from torch import nn\nfrom depthaudit.models import MODELS\n\n@MODELS.register('plainlinear')\n"
        "def make(input_shape, num_classes, d_hidden=8, num_blocks=1, mlp_ratio=None, seed=0):\n"
        "    return nn.Linear(4, 2)\n")
    (tmp / "plugin_narrow.py").write_text(
        "from depthaudit.models import MODELS\n\n@MODELS.register('narrow')\ndef make(input_shape, num_classes):\n"
        "    raise AssertionError('never called')\n")
    sat = {"schema": "depthaudit.saturation.v1", "identity": {"family": "resnet"},
           "runs": {"N0": {"blocks": 3, "params": 1, "config": {"extra": 0}, "final": {"test_acc": 0.5, "test_loss": 1},
                           "signal": {"AGmax": "x", "AG": [1], "V": [1], "low_signal": False}}}}
    (tmp / "rep_sat").mkdir()
    (tmp / "rep_sat" / "saturation_resnet_x.json").write_text(json.dumps(sat))


CASES = [
    (["train", "--lr", "nan"], "finite"),
    (["train", "--weight-decay", "nan"], "finite"),
    (["saturation", "--lr", "nan"], "finite"),
    (["saturation", "--batch-size", "0"], ">= 1"),
    (["saturation", "--family", "gpt", "--context", "0"], ">= 1"),
    (["saturation", "--family", "gpt", "--d-hidden", "7"], "multiple of 4"),
    (["--plugin", "plugin_raises", "train"], "RuntimeError: boom at"),
    (["--plugin", "plugin_syntax", "train"], "syntax error at"),
    (["--plugin", "plugin_rereg", "train"], "method 'bp' is taken: it is depthaudit's own (depthaudit.methods.bp)"),
    (["--plugin", "no_such_plugin_xyz", "train"], "no such module"),
    (["train", "--out", "afile"], "not a folder"),
    (["audit", "--out", "auditrunsfile"], "not a folder"),
    (["ladder", "--output_dir", "afile/sub"], "is a file"),
    (["saturation", "--family", "gpt", "--text", "empty.txt"], "holds 0 tokens"),
    (["saturation", "--family", "gpt", "--text", "objects.npy"], "not a numeric .npy"),
    (["report", "rep_trunc"], "not valid JSON"),
    (["report", "rep_list"], "holds a list"),
    (["report", "rep_badruns"], "malformed"),
    (["report", "rep_report"], "not an audit report"),
    (["report", "rep_garbage"], "not valid JSON"),
    (["train", "--warm-start", "garbage.pt", "--epochs", "1"], "not a readable checkpoint"),
    (["audit", "--eps", "nan"], "finite"),
    (["ladder", "--probe-batches", "0"], ">= 1"),
    (["identity", "--probe-batch-size", "1"], ">= 2"),
    (["audit", "--num-blocks", "0"], "at least 1"),
    (["audit", "--methods", "fa:head=sideways"], "not one of feedback, exact"),
    (["probes", "--alphas", "1.5"], "<= 1"),
    (["train", "--seed", "-3"], ">= 0"),
    (["intervene", "--lambdas", "-1"], ">= 0"),
    (["grow", "--extra", "0"], "--extra"),
    # sweeps and cells (the cluster issue's flags)
    (["ladder", "--dataset", "mnist1d", "--k-values", "0", "--seeds", "1", "--cell", "99"], "no such cell"),
    (["audit", "--cell", "fa/trained/s1"], "no such cell"),
    (["audit", "--cell", "0", "--list-cells"], "exclude each other"),
    (["ladder", "--dataset", "mnist1d", "--jobs", "2", "--executor", "ray"], "--jobs is for the local executor"),
    (["audit", "--cpus-per-run", "0"], "> 0"),
    (["ladder", "--batch-runs", "0"], ">= 1"),
    (["ladder", "--executor", "dask"], "invalid choice"),
    (["report", "rep_sweep"], "sweep.json is damaged"),
    (["train", "--seed", str(2**64)], "<="),
    (["probes", "--method", "nosuchmethod"], "nosuchmethod"),
    # a second walk: 49 more cases found, these are their table entries
    (["saturation", "--family", "gpt", "--text", "big.npy"], "would make a"),
    (["saturation", "--family", "gpt", "--text", "two.npy"], "1-D"),
    (["audit", "--methods", "cb:sigma=inf"], "sigma: inf is not finite"),
    (["audit", "--methods", "cb:sigma=-1"], "must be >= 0"),
    (["--plugin", "plugin_exits", "train"], "sys.exit(3)"),
    (["--plugin", "./foo/bar.py", "train"], "not a path"),
    (["ladder", "--gpu", "0", "--device", "cpu"], "disagree"),
    (["ladder", "--dataset", "mnist1d", "--audit-dir", "nope"], "no such folder"),
    (["report", "rep_other", "--audit-dir", "afile"], "not a folder"),
    (["train", "--warm-start", "rep_other"], "is a folder"),
    (["intervene", "--lambdas", "0", "0.1", "--penalty", "0.01"], "give one of them"),
    (["intervene", "--scale-penalty", "0.5"], "drop --scale-penalty"),
    (["probes", "--method", "bp"], "already BP's"),
    (["identity", "--num-blocks", "0"], "at least 1"),
    (["audit", "--epochs", "0"], "trains nothing"),
    (["train", "--augment", "crop+flip", "--epochs", "1", "--d-hidden", "8", "--num-blocks", "1"],
     "not an image dataset"),
    (["audit", "--probe-batch-size", "5000", "--epochs", "1"], "exceeds the 2000 held-out"),
    (["intervene", "--lambdas", "0", "--methods", "bp", "--seeds", "1", "--cell", "5", "--out", "o"], "no such cell"),
    (["saturation", "--method", "fa"], "--family resmlp"),
    (["grow", "--family", "resmlp", "--method", "cb", "--dataset", "mnist1d"], "cannot grow"),
    (["saturation", "--text", "afile"], "--text is for --family gpt/hf"),
    (["report", "rep_sat"], "signal.AGmax is 'x', not a number"),
    (["report", "rep_hist"], "is not what its run records give"),  # (a hand-truncated history)
    (["audit", "--out", "rep_other", "--lr", "0.01"], "report of another audit"),
    (["saturation", "--model", "x"], "--family hf"),
    # issue 25: misrecords
    (["audit", "--methods", "fa:head=exact,head=feedback"], "'head' is given twice"),
    (["--plugin", "plugin_badlabels", "train", "--dataset", "badlabels", *TINY_RUN], "labels span 0..7"),
    (["train", "--dataset", "imagefolder", "--data-dir", "imgs", *TINY_RUN], "train images are 8×8 but test"),
    # issue 25's re-walk: an empty path is refused, not read as the default; a NUL byte; an empty --plugin
    (["train", *TINY_RUN[:-2], "--out", ""], "--out: an empty path"),
    (["ladder", "--output_dir", " "], "an empty path"),
    (["report", ""], "DIR: an empty path"),
    (["train", "--data-dir", "a\x00b", *TINY_RUN], "holds a NUL byte"),
    (["--plugin", "", "train", *TINY_RUN], "--plugin '': an empty module name"),
    # --stored-only (report of cells) with a cell missing: refused before the folder or store is claimed
    *[([cmd, *extra, "--dataset", "mnist1d", "--seeds", "1", *TINY_RUN[:6], "--probe-batches", "1",
        "--probe-batch-size", "16", "--stored-only", "--out", "so"], "cells are not finished")
      for cmd, extra in (("audit", ["--methods", "bp"]), ("ladder", ["--methods", "bp", "--k-values", "0"]),
                         ("probes", ["--method", "fa", "--alphas", "0"]),
                         ("intervene", ["--methods", "fa", "--lambdas", "0"]))],
    # a plug-in's loader or model factory that breaks its contract: named with its file and line
    (["--plugin", "plugin_nonedata", "train", "--dataset", "nonedata", *TINY_RUN], "plugin_nonedata.py:3) returned"),
    (["--plugin", "plugin_nandata", "train", "--dataset", "nandata", *TINY_RUN], "hold 32 NaN or infinite values"),
    (["--plugin", "plugin_linear", "train", "--arch", "plainlinear", "--dataset", "mnist1d", *TINY_RUN],
     "returned a Linear, not a ResidualModel"),
    (["--plugin", "plugin_narrow", "train", "--arch", "narrow", "--dataset", "mnist1d", *TINY_RUN],
     "plugin_narrow.py:3) cannot be called as factory(input_shape, num_classes, d_hidden="),
]


@pytest.mark.parametrize("argv, words", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, monkeypatch, capsys, argv, words):
    _setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "")  # a plug-in a case imports must not reach later tests' workers
    before = _files(tmp_path)
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own refusals exit with 2 after one line
        rc = e.code
    err = capsys.readouterr().err.strip()
    print(f"{argv} → rc {rc}: {err}")
    assert rc == 2
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert words in err
    assert _files(tmp_path) == before


# found only once training runs: the command's header line comes first, then the one error line, last
RUNTIME_CASES = [
    (["--plugin", "plugin_badcredits", "train", "--method", "badfa", "--dataset", "mnist1d", *TINY_RUN],
     "plug-in plugin_badcredits raised RuntimeError: no credit at", "plugin_badcredits.py:8 (in credits)"),
    (["--plugin", "plugin_fewcredits", "train", "--method", "fewfa", "--dataset", "mnist1d", *TINY_RUN],
     "plug-in plugin_fewcredits: its FewFA (", "plugin_fewcredits.py:3)"),
]


@pytest.mark.parametrize("argv, words, where", RUNTIME_CASES, ids=[c[0][1] for c in RUNTIME_CASES])
def test_a_failing_plugin_is_named_with_its_file_and_line(tmp_path, monkeypatch, capsys, argv, words, where):
    _setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "")
    before = _files(tmp_path)
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    print(err)
    assert rc == 2 and not any("Traceback" in ln for ln in err)
    assert [ln for ln in err if "error" in ln] == err[-1:] and words in err[-1] and where in err[-1]
    assert _files(tmp_path) == before


def test_duplicate_seeds_count_once_with_a_note(tmp_path, capsys):
    assert main(["audit", "--methods", "bp", "--seeds", "1", "1", "--epochs", "1", "--d-hidden", "8",
                 "--num-blocks", "1", "--probe-batches", "1", "--probe-batch-size", "16",
                 "--out", str(tmp_path / "a")]) == 0
    assert "--seeds repeats 1; each value counts once" in capsys.readouterr().err
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    assert rep["config"]["seeds"] == [1] and rep["methods"][0]["n_seeds"] == 1


def test_diverged_runs_are_marked_not_averaged(tmp_path, capsys):
    assert main(["audit", "--methods", "bp", "--lr", "1e4", "--epochs", "2", "--d-hidden", "8", "--num-blocks", "1",
                 "--probe-batches", "1", "--probe-batch-size", "16", "--out", str(tmp_path / "a")]) == 0
    card = capsys.readouterr().out
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    m = rep["methods"][0]
    print(card)
    assert m["status"] == ["diverged"] and m["diverged"]["excluded_seeds"] == 1
    assert "DIVERGED (1 of 1 seeds)" in card and "DIVERGED" in (tmp_path / "a" / "report.md").read_text()


def test_probe_batches_beyond_the_split_are_recorded_as_measured(tmp_path, capsys):
    """--probe-batches 100000 × 16 on 2000 held-out examples measures 125 batches: recorded and shown as 125."""
    assert main(["audit", "--dataset", "mnist1d", "--methods", "bp", "--seeds", "1", "--epochs", "1", "--d-hidden", "8",
                 "--num-blocks", "1", "--probe-batches", "100000", "--probe-batch-size", "16",
                 "--out", str(tmp_path / "a")]) == 0
    cap = capsys.readouterr()
    assert "measuring (and recording) 125 batches of 16" in cap.err
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    assert rep["config"]["probe_batches"] == 125
    runs = [json.loads(p.read_text()) for p in (tmp_path / "a" / "runs").glob("*/result.json")]
    assert {r["tracking"]["probe_batches"] for r in runs} == {125}
    assert "probe 125×16" in cap.out and "100000" not in cap.out


def test_an_empty_option_list_is_the_same_row(capsys):
    from depthaudit.commands import build_parser
    from depthaudit.commands.audit import _audit_config

    argv = ["audit", "--methods", "fa", "fa:", "fa:head=exact,", "--out", "unused"]
    acfg = _audit_config(build_parser(argv).parse_args(argv))
    assert acfg.methods == ("fa", "fa:head=exact")
    assert "--methods repeats fa" in capsys.readouterr().err


BADMODEL = '''import torch
from torch import nn
from depthaudit.models import MODELS, ResidualAdapter


class Stem(nn.Linear):
    def forward(self, x):
        raise ValueError('stem broke')


class Net(nn.Module):
    def __init__(self, d_in, d, n, c):
        super().__init__()
        self.stem, self.head = Stem(d_in, d), nn.Linear(d, c)
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n))


@MODELS.register('badnet')
def badnet(input_shape, num_classes, d_hidden=8, num_blocks=1, seed=0, **kw):
    torch.manual_seed(seed)
    return ResidualAdapter(Net(int(torch.tensor(input_shape).prod()), d_hidden, num_blocks, num_classes),
                           embed="stem", blocks="layers", readout="head")
'''
AUDIT_TINY = ["--dataset", "mnist1d", "--seeds", "1", "--epochs", "1", "--d-hidden", "8", "--num-blocks", "1",
              "--probe-batches", "1", "--probe-batch-size", "16", "--out", "o"]


@pytest.mark.parametrize("plugin, args, where", [
    ("plugin_badcredits", ["--methods", "badfa", "fa"], "plugin_badcredits.py:8 (in credits)"),
    ("plugin_fewcredits", ["--methods", "fewfa", "fa"], "plugin_fewcredits.py:3)"),
    ("plugin_badmodel", ["--arch", "badnet", "--methods", "bp"], "plugin_badmodel.py:8 (in forward)")],
    ids=["method raises", "method returns too few", "model raises"])
def test_a_plugin_failing_in_a_worker_is_named_as_with_one_job(tmp_path, monkeypatch, capsys, plugin, args, where):
    """--jobs 2: the worker names the plug-in, its file and line (the driver's copy of the error has no traceback)."""
    _setup(tmp_path)
    (tmp_path / "plugin_badmodel.py").write_text(BADMODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "")
    lines = {}
    for jobs in ("1", "2"):
        rc = main(["--plugin", plugin, "audit", *args, "--jobs", jobs, *AUDIT_TINY])
        err = capsys.readouterr().err.strip().splitlines()
        print(jobs, err)
        assert rc == 2 and not any("Traceback" in ln for ln in err)
        assert [ln for ln in err if "error" in ln] == err[-1:] and f"plug-in {plugin}" in err[-1] and where in err[-1]
        lines[jobs] = re.sub(r"/\S*/(plugin_\w+\.py)", r"\1", err[-1])  # (an earlier test's copy may be imported)
        stored = [p.parent.name for p in (tmp_path / "o" / "runs").glob("*/result.json")]
        assert all("_resmlp_" in n and "_fa_" in n for n in stored), stored  # only the healthy method's runs
    assert lines["1"] == lines["2"]


def test_a_data_dir_a_generated_dataset_ignores_is_noted(tmp_path, capsys):
    assert main(["train", "--dataset", "mnist1d", "--data-dir", str(tmp_path), "--epochs", "0", "--d-hidden", "8",
                 "--num-blocks", "1", "--no-checkpoint", "--out", str(tmp_path / "o")]) == 0
    assert "--data-dir has no effect with --dataset mnist1d" in capsys.readouterr().err


def test_probes_take_a_method_spec(tmp_path, capsys):
    """`probes --method fa:head=exact` as every command takes a spec (it was 'unknown method'); its own files."""
    assert main(["probes", "--method", "fa:head=exact", "--dataset", "mnist1d", "--alphas", "0", "--seeds", "1",
                 "--epochs", "1", "--d-hidden", "8", "--num-blocks", "1", "--probe-batches", "1",
                 "--probe-batch-size", "16", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "probes_fa_head-exact.json").read_text())
    runs = json.loads(Path(res["credit_mix"]["file"]).read_text())["runs"]
    assert {r["config"]["method_options"]["head"] for r in runs.values()} == {"exact"}
