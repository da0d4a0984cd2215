"""Walk 34's wrong cases, each reproduced as the walker did it (docs/walks/walk34_*.txt)."""

import json

import numpy as np
import pytest
from test_diagnostics_registry import PLUGIN

import depthaudit as da
from depthaudit.cli import main
from depthaudit.diagnostics import DIAGNOSTICS, Diagnostic, register

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(DIAGNOSTICS, "_items", dict(DIAGNOSTICS._items))
    monkeypatch.setattr(DIAGNOSTICS, "_meta", dict(DIAGNOSTICS._meta))


@pytest.mark.parametrize("order", [35, 1000])
def test_a_clash_with_the_audits_history_names_the_plugin_not_the_package(tmp_path, capsys, registry, order):
    """W1 (cases 5, 6): a plug-in diagnostic ordered before the stream norms (35 < 40) whose trajectory() returned
    "rho" was merged first, and the refusal then blamed depthaudit's own 'stream' diagnostic for the clash."""

    @register
    class CN34(Diagnostic):
        name = "cn34"

        def compute(self, snap):
            return {"v": 1.0}

        @classmethod
        def trajectory(cls, points, num_blocks):
            return {"rho": [0.0 for _ in points]}

    CN34.order = order
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(tmp_path / "A")]) == 2
    err = capsys.readouterr().err.strip()
    assert "diagnostic 'cn34' (" in err and "trajectory() returned 'rho'" in err and "'stream'" not in err, err


@pytest.mark.parametrize("seeds", [(np.int64(1), 2), tuple(np.arange(1, 3)), list(np.arange(1, 3)),
                                   np.arange(1, 3)])
def test_identity_takes_numpy_integer_seeds_as_the_configs_do(seeds):
    """W2 (cases 51, 52): da.identity refused numpy integer seeds with "must be one or more seeds >= 0", a false
    reason (they are >= 0), where AuditConfig takes the same values. They are seeds: the same check as (1, 2)."""
    cfg = da.TrainConfig(dataset="mnist1d", d_hidden=16, num_blocks=2)
    kw = dict(probe_batches=1, probe_batch_size=16, progress=False)
    got = da.identity(cfg, seeds, **kw).record
    want = da.identity(cfg, (1, 2), **kw).record
    assert got["seeds"] == [1, 2] and json.dumps(got["per_seed"]) == json.dumps(want["per_seed"])
    for bad, says in (([], "got none"), (["42"], "got str '42'"), ([1.5], "got float 1.5"), ([-1], "0..2**63-1")):
        with pytest.raises(da.ConfigError, match="seeds must be") as e:
            da.identity(cfg, bad, **kw)
        assert says in str(e.value), str(e.value)


def test_a_factory_that_ignores_its_seed_still_builds_the_seeds_weights(monkeypatch):
    """Case 95: a plug-in factory that draws nn.Linear defaults from torch's global stream without seeding it built
    other weights for a seed's trained and frozen runs (D3 measured between two different inits) and other numbers
    on a rerun under the same recorded seed. The factory is called with the stream seeded by the run's seed."""
    import torch

    from depthaudit.models import MODELS, ResidualAdapter, build_model

    class Net(torch.nn.Module):
        def __init__(self, d, n, c):
            super().__init__()
            self.stem, self.head = torch.nn.Linear(8, d), torch.nn.Linear(d, c)
            self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(n))

    monkeypatch.setattr(MODELS, "_items", dict(MODELS._items))
    monkeypatch.setattr(MODELS, "_meta", dict(MODELS._meta))

    @MODELS.register("noseed34")
    def noseed(input_shape, num_classes, d_hidden=16, num_blocks=2, mlp_ratio=1, seed=0):
        return ResidualAdapter(Net(d_hidden, num_blocks, num_classes), embed="stem", blocks="layers", readout="head")

    def weights(seed, noise):
        torch.manual_seed(noise)  # whatever the stream held before
        m = build_model("noseed34", (8,), 3, 16, 2, None, seed)
        return torch.cat([p.detach().flatten() for p in m.parameters()])

    a, b, c = weights(1, 100), weights(1, 200), weights(2, 100)
    print("max |seed 1 - seed 1|", (a - b).abs().max().item(), "max |seed 1 - seed 2|", (a - c).abs().max().item())
    assert torch.equal(a, b) and not torch.equal(a, c)


MONITORED = PLUGIN.replace("credit_norm", "cn34m").replace("CreditNorm", "CN34m").replace(
    "Per-layer mean credit norm (a plug-in's quantity)", "Per-layer credit norm (walk 34)")


def test_report_of_a_monitor_folder_names_the_plugin_quantity_it_cannot_render(tmp_path, capsys, registry,
                                                                                monkeypatch):
    """W3 (cases 111, 112): `depthaudit report` of a TrainingMonitor's folder whose plug-in diagnostic is not
    loaded rewrote report.md without that quantity's section and said nothing (an audit's folder gets a note
    naming the plug-in): the monitor's report now names what it measured and the plug-in that registered it."""
    import sys

    import torch

    from depthaudit.evaluator import TrainingMonitor
    from depthaudit.models import build_model

    (tmp_path / "p34m.py").write_text(MONITORED)
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("p34m")
    try:
        g = torch.Generator().manual_seed(0)
        batches = [(torch.randn(16, 20, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(2)]
        mon = TrainingMonitor(build_model("resmlp", (20,), 10, 8, 2, None, 0), batches, log=None)
        mon.step(0)
        mon.step(1)
        mon.report(test_acc=0.5, frozen_acc=0.4, budget=1)
        mon.write(tmp_path / "MON")
    finally:
        sys.modules.pop("p34m", None)
    assert "Per-layer credit norm (walk 34)" in (tmp_path / "MON" / "report.md").read_text()
    DIAGNOSTICS._items.pop("cn34m")
    DIAGNOSTICS._meta.pop("cn34m", None)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "MON")]) == 0
    err = capsys.readouterr().err
    assert "the runs measured cn34m, which no loaded diagnostic renders" in err, err
    assert "rerun with --plugin p34m" in err, err  # (report.json holds its summary: report renders it)
    assert main(["--plugin", "p34m", "report", str(tmp_path / "MON")]) == 0
    assert "which no loaded" not in capsys.readouterr().err
    assert "Per-layer credit norm (walk 34)" in (tmp_path / "MON" / "report.md").read_text()


def test_a_refused_method_entry_is_quoted_as_typed(monkeypatch):
    """Case 30: "--methods entry 'opt34:gain=0': … 0.0 must be > 0" quoted the parsed spec where the user typed
    gain=1e-400 (it underflows to 0): the entry is quoted as given."""
    from depthaudit.methods import METHODS, Option
    from depthaudit.methods.dfa import DFA

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))

    @METHODS.register("opt34")
    class Opt34(DFA):
        options = {"gain": Option(1.0, "credit gain", lo=0, lo_open=True)}

        def __init__(self, model, seed, gain=1.0):
            super().__init__(model, seed)
            self.gain = gain

    base = da.TrainConfig(dataset="mnist1d")
    for typed in ("opt34:gain=1e-400", "opt34:gain=-0.0"):
        with pytest.raises(da.ConfigError) as e:
            da.AuditConfig(base=base, methods=("bp", typed))
        assert f"methods entry {typed!r}" in str(e.value), str(e.value)


def test_a_diagnostic_may_not_feed_a_check_another_feeds(tmp_path, capsys, registry, monkeypatch):
    """Case 10: a plug-in diagnostic declaring checks = {"D1": "value"} was taken without a word; ordered after
    the stream norms it would fire the monitor's D1 (and --stop-on-flag) on its own number while the report's D1
    judged ρ. A check reads one quantity: the declaration is refused when the plug-in loads, naming both."""
    (tmp_path / "p34c.py").write_text(
        "from depthaudit.diagnostics import Diagnostic, register\n\n\n@register\nclass CN34c(Diagnostic):\n"
        "    name = 'cn34c'\n    order = 99\n    checks = {'D1': 'value'}\n\n"
        "    def compute(self, snap):\n        return {'value': 1e9}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "A"
    try:
        assert main(["--plugin", "p34c", "audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]) == 2
    finally:
        __import__("sys").modules.pop("p34c", None)
    err = capsys.readouterr().err.strip()
    assert "its checks name D1, which 'stream' (depthaudit.diagnostics.stream.StreamNorms) already feeds" in err, err
    assert "cn34c" not in DIAGNOSTICS and not out.exists()

    @register
    class Own(Diagnostic):  # a check of its own is the documented use
        name = "own34"
        checks = {"own34": "value"}

        def compute(self, snap):
            return {"value": 1.0}

    assert "own34" in DIAGNOSTICS
    with pytest.raises(da.UsageError, match="its checks is"):
        register(type("Bad34", (Diagnostic,), {"name": "bad34", "checks": ["D1"]}))


SCRIPT = '''
import depthaudit as da
from depthaudit.methods import METHODS
from depthaudit.methods.bp import BP


@METHODS.register("fa", overwrite=True)
class FaClone(BP):  # a script's "fa" that is backprop
    pass


base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
da.audit(da.AuditConfig(base=base, methods=("fa",), seeds=(1,), probe_batches=1, probe_batch_size=32), "OVR",
         progress=False)
'''


def test_runs_a_script_trained_under_a_replaced_name_are_named_when_reused(tmp_path):
    """W4 (cases 121, 122): a script registered its own "fa" (overwrite=True, a BP clone) and audited into OVR;
    `depthaudit audit --methods fa --out OVR` (depthaudit's fa) then reused its runs without a word: the records
    name module __main__, and the CLI's own __main__ passed for it. A module of the recorded name loaded from
    another file is not the code that trained them: the reuse is said, with the fix."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "reg2.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "reg2.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    rec = json.loads(next((tmp_path / "OVR" / "runs").glob("*_fa_all_*/result.json")).read_text())
    assert [q["module"] for q in rec["provenance"]["plugins"]] == ["__main__"]
    p = subprocess.run([sys.executable, "-m", "depthaudit", "audit", "--dataset", "mnist1d", "--d-hidden", "8",
                        "--num-blocks", "1", "--epochs", "1", "--methods", "fa", "--seeds", "1", "--probe-batches",
                        "1", "--probe-batch-size", "32", "--out", "OVR"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    print(p.returncode, p.stderr.strip().splitlines()[-3:])
    assert p.returncode == 0 and "2 of 2 runs already finished" in p.stderr
    assert f"{tmp_path / 'reg2.py'} (module __main__, not loaded now)" in p.stderr
    assert "plug-in code that is not what is loaded now" in p.stderr


@pytest.mark.parametrize("name", ["flags", "status", "trained_test_acc", "history", "runs", "method", "n_seeds",
                                  "checks", "evaluator"])
def test_a_diagnostic_named_as_a_key_of_the_summary_is_refused_when_it_registers(registry, name):
    """W5 (cases 141, 142, 146): a diagnostic named "flags" (its summary keyed by its name, as extending.md says)
    trained both runs, then was refused with "key its part by its own name ('flags')" — what it did. The name is
    the clash: refused at registration (before anything trains), with a name that works."""
    cls = type("DN34", (Diagnostic,), {"name": name, "compute": lambda self, snap: {"v": 1.0}})
    with pytest.raises(da.UsageError) as e:
        register(cls)
    msg = str(e.value)
    assert f"{name!r} is a key of each method's summary in report.json" in msg and f"'my_{name}'" in msg, msg
    assert name not in DIAGNOSTICS
    register(type("DN34", (Diagnostic,), {"name": f"my_{name}", "compute": lambda self, snap: {"v": 1.0}}))
    assert f"my_{name}" in DIAGNOSTICS


def test_a_saturation_config_counts_each_extra_once_as_the_cli_does():
    """Case 136: SaturationConfig(extra=(1, 0, 1)) kept the repeat where the CLI's --extra 1 0 1 counts each value
    once (python-api.md: the same inputs give the same resolved config)."""
    assert da.SaturationConfig(extra=(1, 0, 1)).extra == (1, 0) == da.SaturationConfig(extra=[1, 0]).extra
    with pytest.raises(da.ConfigError, match="extra must be a tuple of integers"):
        da.SaturationConfig(extra=[[1], 2])


def test_the_depth_utility_figure_says_which_seeds_it_left_out(tmp_path, monkeypatch):
    """Case 147: depth_utility.png drew bars over the seeds that finished with no mark that one of three diverged
    and was excluded (the card and report.md say it). The D3 label on the bars says it too."""
    from matplotlib.axes import Axes

    from depthaudit.report.figures import depth_utility

    said = []
    real = Axes.annotate
    monkeypatch.setattr(Axes, "annotate", lambda self, text, *a, **k: said.append(text) or real(self, text, *a, **k))
    ms = lambda acc, n_out: {"method": "m", "trained_test_acc": {"mean": acc, "std": 0.01},  # noqa: E731
                             "frozen_test_acc": {"mean": 0.5, "std": 0.01},
                             "checks": {"D3": {"status": "FLAG", "value": 1.3}},
                             "diverged": {"trained": n_out, "frozen": 0, "excluded_seeds": n_out, "n_seeds": 3}}
    report = {"methods": [ms(0.513, 1), ms(0.52, 0)], "thresholds": {"gap_min_pp": 2.0}, "config": {}}
    depth_utility(report, tmp_path / "d.png")
    assert said == ["+1.3 pp\nFLAG\n1 of 3 seeds\ndiverged, excluded", "+1.3 pp\nFLAG"], said
    assert (tmp_path / "d.png").stat().st_size > 0


@pytest.mark.parametrize("fn", ["train", "audit", "ladder"])
def test_a_loaders_arrays_passed_as_data_are_refused_naming_data(tmp_path, fn):
    """W6 (cases 158, 159): a user's arrays wrapped in ArrayData (what a loader returns) passed as data= went on
    as a bundle: a raw AttributeError from the training loop (or a probe-size refusal first). Refused in one
    line naming data and the way to pass them, nothing written."""
    from depthaudit.data import ArrayData

    r = np.random.default_rng(0)
    arrays = ArrayData(r.normal(size=(64, 8)).astype(np.float32), r.integers(0, 2, 64),
                       r.normal(size=(300, 8)).astype(np.float32), r.integers(0, 2, 300), 2, "rng", "0" * 64)
    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    cfg = {"train": base, "audit": da.AuditConfig(base=base, methods=("bp",), seeds=(1,)),
           "ladder": da.LadderConfig(base=base, methods=("bp",), seeds=(1,))}[fn]
    with pytest.raises(da.ConfigError, match="data is an ArrayData .* pass da.load_data"):
        getattr(da, fn)(cfg, tmp_path / "o", data=arrays, progress=False)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("key", ["weight_alignment", "stream_norms", "cka_to_bp", "standard_pair"])
def test_a_plugin_part_under_another_quantitys_key_names_the_plugin(tmp_path, capsys, registry, key):
    """Cases 163–166: a plug-in's summarise() that also returned 'weight_alignment' (a built-in's part) blamed
    depthaudit's WeightAlignment; one returning 'cka_to_bp' (set after the diagnostics' parts) was dropped without
    a word. Each names the plug-in."""

    @register
    class CN34k(Diagnostic):
        name = "cn34k"
        order = 35

        def compute(self, snap):
            return {"v": 1.0}

        @classmethod
        def summarise(cls, finals, num_blocks):
            return {"cn34k": 1.0, key: {"x": 1.0}}

    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(tmp_path / "A")]) == 2
    err = capsys.readouterr().err.strip()
    assert "diagnostic 'cn34k' (" in err and f"summarise() returned '{key}" in err, err


def test_markdown_cells_keep_their_columns_and_a_monitor_name_is_one_cell():
    """W7 (cases 168–172): a '|' or a line break in a row label (a TrainingMonitor's name, a plug-in's free-text
    option value) shifted every number of the row under another header in report.md."""
    import torch

    from depthaudit.evaluator import TrainingMonitor
    from depthaudit.models import build_model
    from depthaudit.report.card import _table_md

    assert _table_md(["method", "acc"], [["a|b", "0.5"], ["x\ny", "0.4"]]).splitlines()[2:] == \
        ["| a\\|b | 0.5 |", "| x y | 0.4 |"]
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 20, generator=g), torch.randint(0, 10, (8,), generator=g))]
    model = build_model("resmlp", (20,), 10, 8, 1, None, 0)
    for bad in ("FA | biotorch", "x\ny", "n" * 65):
        with pytest.raises(da.UsageError, match="one table cell"):
            TrainingMonitor(model, batches, log=None, name=bad)
    assert TrainingMonitor(model, batches, log=None, name="FA (biotorch)").name == "FA (biotorch)"


@pytest.mark.parametrize("value", ["a/b", "../../ESC", "a|b", "t" * 300, "", ".."])
def test_a_free_text_option_value_that_cannot_name_files_is_refused(tmp_path, capsys, monkeypatch, value):
    """W8–W10 (cases 173–186): a plug-in method's str option is part of the row label, its file names and the
    store's keys: "a/b" crashed the ladder's aggregation after training, wrote a grow store outside --out (over a
    user's file), split a probes folder into subfolders; 300 characters made "File name too long" refusals whose
    advice (a shorter path) could not help. Refused in one line before anything is written."""
    from depthaudit.methods import METHODS, Option
    from depthaudit.methods.dfa import DFA

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))

    @METHODS.register("tag34")
    class Tag34(DFA):
        options = {"tag": Option("x", "free text label")}

        def __init__(self, model, seed, tag="x"):
            super().__init__(model, seed)
            self.tag = tag

    for argv in (["ladder", *C, "--methods", f"tag34:tag={value}", "--seeds", "1"],
                 ["grow", "--family", "resmlp", "--method", f"tag34:tag={value}", "--dataset", "mnist1d",
                  "--d-hidden", "16", "--extra", "1", "--epochs", "1"],
                 ["probes", *C, "--method", f"tag34:tag={value}", "--alphas", "0", "--seeds", "1"]):
        out = tmp_path / argv[0]
        assert main([*argv, "--out", str(out)]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "is not a usable value: use 1 to 32 letters" in err or "needs a value" in err, err
        assert not out.exists() and not list(tmp_path.parent.glob("ESC*")), argv
    assert main(["train", *C, "--method", "tag34:tag=v1.2_b-c+d", "--out", str(tmp_path / "ok")]) == 0


EDITED = '''
import torch
from depthaudit.methods import METHODS
from depthaudit.methods.bp import BP

SIGN = 1.0


@METHODS.register("e34")
class E34(BP):
    def credits(self, model, tr, e):
        return [SIGN * g for g in super().credits(model, tr, e)]
'''


def test_a_record_names_the_plugin_code_that_ran_not_the_file_edited_since(tmp_path, monkeypatch):
    """W11 (cases 187, 188): in a notebook, a plug-in file edited on disk without a reload trained the old code but
    its records gave the new file's sha256 (the digest was read as the record was written), so two different
    codes' runs carried one digest. The digest is the file's as its code registered."""
    import hashlib
    import sys

    from depthaudit.methods import METHODS

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))
    src = tmp_path / "p34e.py"
    src.write_text(EDITED)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        __import__("p34e")
        base = dict(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1, method="e34")
        first = da.train(da.TrainConfig(**base), tmp_path / "ED_1", progress=False).record
        src.write_text(EDITED.replace("SIGN = 1.0", "SIGN = -1.0"))  # edited, not reloaded
        second = da.train(da.TrainConfig(**base), tmp_path / "ED_2", progress=False).record
    finally:
        sys.modules.pop("p34e", None)
    ran = hashlib.sha256(EDITED.encode()).hexdigest()
    digests = [r["provenance"]["plugins"][0]["sha256"] for r in (first, second)]
    print("digests", digests, "code that ran", ran)
    assert digests == [ran, ran] and first["final"]["test_acc"] == second["final"]["test_acc"]


@pytest.mark.parametrize("device,says", [("cuda", "CUDA is not available here"), ("cuda:0", "CUDA is not available"),
                                         ("meta", "data is placed on cpu or cuda"), ("xyz", "not understood")])
def test_load_data_refuses_a_device_this_machine_lacks_in_one_line(device, says):
    """W12 (cases 214, 215): da.load_data("mnist1d", None, False, torch.device("cuda")) — python-api.md's call —
    on a machine without CUDA was torch's AssertionError; "meta" a NotImplementedError after reading the data."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(da.ConfigError, match=says) as e:
        da.load_data("mnist1d", None, False, torch.device(device) if device != "xyz" else device)
    assert e.value.field == "device" and str(e.value).startswith("device "), str(e.value)
    assert da.load_data("mnist1d", None, False, "cpu").x_train.device.type == "cpu"
