"""Diagnostics register themselves: the audit measures, summarises and shows every registered one, so a new
quantity is one file (here a plug-in written by the test) and nothing else names it."""

import json
import textwrap

import pytest

from depthaudit.cli import main
from depthaudit.diagnostics import (
    DIAGNOSTICS,
    CreditCosine,
    FreshBNull,
    Nudging,
    PerSampleCosine,
    PerturbationCorrelation,
    ReferenceNorm,
    RobustCosine,
    StreamNorms,
    UpdateCosine,
    WeightAlignment,
    audit_tracker,
    registered,
)


def _lineup(tracker):
    return [(type(d), vars(d)) for d in tracker.diagnostics]


def test_the_audit_tracker_is_the_registry_in_order():
    assert registered()[:8] == [CreditCosine, RobustCosine, UpdateCosine, StreamNorms, ReferenceNorm,
                                PerturbationCorrelation, Nudging, FreshBNull]
    # the standard set, every `every` epochs, D1 in the plan's statistic
    assert _lineup(audit_tracker([], 3, d1_stat="mean")) == [
        (CreditCosine, {"every": 3}), (RobustCosine, {"every": 3}), (UpdateCosine, {"every": 3}),
        (StreamNorms, {"every": 3, "stat": "mean"}), (ReferenceNorm, {"every": 3}),
        (PerSampleCosine, {"every": 3}), (WeightAlignment, {"every": 3})]  # CKA only with a reference model
    f = {"every": 0, "directions": 5, "step": 1e-2, "eta": 0.5, "fresh_b_draws": 4, "seed": 7}
    got = _lineup(audit_tracker([], 1, functional=f))
    assert got[5:] == [(PerturbationCorrelation, {"every": 0, "directions": 5, "step": 1e-2, "seed": 7}),
                       (Nudging, {"every": 0, "eta": 0.5}), (FreshBNull, {"every": 0, "draws": 4, "seed": 7}),
                       (PerSampleCosine, {"every": 1}), (WeightAlignment, {"every": 1})]
    assert [t for t, _ in _lineup(audit_tracker([], 1, functional={**f, "fresh_b_draws": 0}))][5:] == \
        [PerturbationCorrelation, Nudging, PerSampleCosine, WeightAlignment]


PLUGIN = '''
"""A new quantity in one file: the mean per-example norm of the method's credit at each layer."""

from depthaudit.diagnostics import Diagnostic, register
from depthaudit.diagnostics.base import layer_headers, per_layer_rows
from depthaudit.verdicts import mean_std


@register
class CreditNorm(Diagnostic):
    name = "credit_norm"
    order = 35

    def compute(self, snap):
        return {"per_layer": [c.flatten(1).norm(dim=1).mean().item() for c in snap.credits]}

    @classmethod
    def summarise(cls, finals, num_blocks):
        vals = [cls.read(p)["per_layer"] for p in finals]
        return {"credit_norm": [mean_std([v[i] for v in vals]) for i in range(num_blocks + 1)]}

    @classmethod
    def section(cls, report, table):
        return ("Per-layer mean credit norm (a plug-in's quantity)",
                table(layer_headers(report), per_layer_rows(report, "credit_norm")))
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "credit_norm_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    # the registry as it was, after the test (the plug-in registers at import)
    monkeypatch.setattr(DIAGNOSTICS, "_items", dict(DIAGNOSTICS._items))
    monkeypatch.setattr(DIAGNOSTICS, "_meta", dict(DIAGNOSTICS._meta))
    yield "credit_norm_plugin"
    import sys

    sys.modules.pop("credit_norm_plugin", None)


def test_a_new_quantity_is_one_file(tmp_path, plugin, capsys):
    out = tmp_path / "audit"
    argv = ["--plugin", plugin, "audit", "--d-hidden", "8", "--num-blocks", "2", "--epochs", "2", "--methods", "fa",
            "--probe-batches", "1", "--probe-batch-size", "16", "--device", "cpu", "--out", str(out)]
    assert main(argv) == 0
    card = capsys.readouterr().out
    assert "Per-layer mean credit norm (a plug-in's quantity)" in card
    # measured at every epoch of the tracked run, beside the built-in quantities; the frozen baseline is untracked
    runs = {json.loads(p.read_text())["config"]["train_blocks"]: json.loads(p.read_text())
            for p in (out / "runs").glob("*/result.json")}
    trained = runs["all"]
    assert [len(h["probe"]["credit_norm"]["per_layer"]) for h in trained["history"]] == [3, 3]
    assert all(v > 0 for v in trained["history"][-1]["probe"]["credit_norm"]["per_layer"])
    # its own summary in report.json (one seed: the mean is that run's final value), and its own section in the
    # Markdown report, where its order puts it: after the update cosines, before the functional/monitor sections
    report = json.loads((out / "report.json").read_text())
    summary = report["methods"][0]["credit_norm"]
    assert [s["mean"] for s in summary] == trained["history"][-1]["probe"]["credit_norm"]["per_layer"]
    md = (out / "report.md").read_text()
    assert md.index("Per-block update cosine") < md.index("Per-layer mean credit norm") < md.index("Training monitor")
    # `depthaudit report` renders it again from the JSON, the same way
    capsys.readouterr()
    assert main(["--plugin", plugin, "report", str(out)]) == 0
    assert "Per-layer mean credit norm (a plug-in's quantity)" in capsys.readouterr().out


@pytest.fixture
def toy_diagnostic(monkeypatch):
    """A toy quantity registered in-process (the registry restored afterwards): the mean credit norm at h_L."""
    from depthaudit.diagnostics import Diagnostic, register

    monkeypatch.setattr(DIAGNOSTICS, "_items", dict(DIAGNOSTICS._items))
    monkeypatch.setattr(DIAGNOSTICS, "_meta", dict(DIAGNOSTICS._meta))

    @register
    class ToyNorm(Diagnostic):
        name = "toy_norm"
        order = 45
        checks = {"toy": "value"}

        def compute(self, snap):
            return {"value": snap.credits[-1].flatten(1).norm(dim=1).mean().item()}

        @classmethod
        def scalars(cls, values):
            return {"toy/value": values.get("value")}

    return ToyNorm


def test_a_registered_diagnostic_flows_through_the_evaluator_monitor_and_live_log(toy_diagnostic):
    """The evaluator (captured credit and a depthaudit method), the user-loop monitor and the TensorBoard/W&B
    scalars read every registered diagnostic: a new one appears in each without editing them."""
    import torch

    from depthaudit.diagnostics.monitor import check_values
    from depthaudit.evaluator import CreditEvaluator, TrainingMonitor
    from depthaudit.methods import build_method
    from depthaudit.models import build_model
    from depthaudit.runlog import epoch_scalars

    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(16, 20, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(2)]
    model = build_model("resmlp", (20,), 10, 8, 2, None, 0)
    for credit in ("capture", build_method("fa", model, 0)):
        ev = CreditEvaluator(model, batches, credit=credit)
        out = ev()
        want = ev.last_snapshot.credits[-1].flatten(1).norm(dim=1).mean().item()
        assert out["toy_norm"] == {"value": want} and want > 0, credit
        # its place among the others is its order (between the stream norms and the reference norm)
        names = [k for k in out if k != "evaluator"]
        assert names.index("stream") < names.index("toy_norm") < names.index("reference")
    mon = TrainingMonitor(model, batches, log=None)
    mon.step(0)
    assert mon.history[-1]["probe"]["toy_norm"]["value"] > 0
    assert check_values(mon.history[-1]["probe"])["toy"] == mon.history[-1]["probe"]["toy_norm"]["value"]
    tags = epoch_scalars({"epoch": 1, "test_acc": 0.5, **mon.history[-1]})
    assert tags["toy/value"] == pytest.approx(mon.history[-1]["probe"]["toy_norm"]["value"])
    assert {"audit/rho", "audit/g_L", "cosine/l0", "stream/norm_l2", "test/acc"} <= set(tags)


def _plugin_audit(plugin: str, out) -> list[str]:
    """A 2-epoch bp audit of a tiny model with the plug-in loaded."""
    return ["--plugin", plugin, "audit", "--d-hidden", "8", "--num-blocks", "2", "--epochs", "2", "--methods", "bp",
            "--probe-batches", "1", "--probe-batch-size", "16", "--device", "cpu", "--out", str(out)]


def test_a_diagnostic_returning_tensors_is_named_not_a_crash(tmp_path, plugin, capsys):
    """Walk 11 case 38: a plug-in diagnostic that returned tensors per layer crashed when the record was written
    ("internal error", a JSON TypeError), leaving a run folder with a checkpoint and no record."""
    src = tmp_path / f"{plugin}.py"
    src.write_text(src.read_text().replace("c.flatten(1).norm(dim=1).mean().item()", "c.flatten(1).norm(dim=1).mean()"))
    out = tmp_path / "audit"
    argv = _plugin_audit(plugin, out)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "diagnostic 'credit_norm'" in err and "torch.Tensor at ['per_layer'][0]" in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert not [p for p in (out / "runs").rglob("*") if p.is_file() and not p.name.endswith(".lock")]


def test_every_built_in_diagnostic_returns_what_a_record_stores(tmp_path):
    """The check above refuses nothing a built-in returns (int keys, numpy scalars, tensors would all be refused)."""
    from depthaudit.diagnostics.base import unstorable

    assert unstorable({"a": [1.0, None, {"b": "x"}]}) is None
    assert unstorable({"a": [1.0, {"b": __import__("torch").zeros(1)}]}) == "a torch.Tensor at ['a'][1]['b']"
    assert unstorable({1: 2.0}) == "a int key 1 at the top level"
    out = tmp_path / "a"
    argv = ["audit", "--d-hidden", "8", "--num-blocks", "2", "--epochs", "1", "--methods", "fa", "wm", "--functional",
            "--probe-batches", "1", "--probe-batch-size", "16", "--device", "cpu", "--out", str(out)]
    assert main(argv) == 0


def test_a_diagnostic_whose_values_its_summary_cannot_read_stores_no_run(tmp_path, plugin, capsys):
    """Walk 12 cases 12-18: a plug-in diagnostic returning one value where its summarise() reads one per layer
    stored every run with those values, then failed at the report; fixed, the rerun reused the bad runs and
    failed again. Now its first measurement is read back by its own summarise(): nothing stored, and the same
    command works once the plug-in is fixed."""
    src = tmp_path / f"{plugin}.py"
    good = src.read_text()
    src.write_text(good.replace("for c in snap.credits]", "for c in snap.credits][:1]"))
    out = tmp_path / "audit"
    argv = _plugin_audit(plugin, out)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "diagnostic 'credit_norm'" in err and "has a summarise() that raised IndexError" in err, err
    assert f" at {src}:" in err and "reading its first measurement (what compute() returned)" in err  # (walk 24)
    assert "the run it was measuring is not stored, and trains again" in err  # (walk 24 W7: as it is)
    assert not list((out / "runs").rglob("result.json"))
    src.write_text(good)  # the plug-in fixed: the same command, in a fresh process's registry
    import sys

    sys.modules.pop(plugin, None)
    DIAGNOSTICS._items.pop("credit_norm", None), DIAGNOSTICS._meta.pop("credit_norm", None)
    assert main(argv) == 0
