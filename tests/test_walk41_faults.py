"""Walk 41's wrong cases, reproduced as the walker did them (docs/walks/walk41_*.txt)."""

import os
import subprocess
import sys

import pytest
from _util import plugin_in

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]

PLUGIN = '''
import os, sys
from depthaudit.methods import METHODS, CreditMethod
from depthaudit.methods.bp import bp_credits

@METHODS.register("exit41")
class Exit41(CreditMethod):
    needs_input_grad = True
    def credits(self, model, tr, e):
        sys.exit(int(os.environ.get("EXIT41", "3")))

@METHODS.register("osexit41")
class OsExit41(CreditMethod):
    needs_input_grad = True
    def credits(self, model, tr, e):
        os._exit(7)

@METHODS.register("obj41")
class Obj41:
    pass

@METHODS.register("onearg41")
class OneArg41(CreditMethod):
    needs_input_grad = True
    def __init__(self, model):
        super().__init__(model, 0)
    def credits(self, model, tr, e):
        return bp_credits(tr)
'''

SCRIPT = '''
import sys, depthaudit as da, p41m
if __name__ == "__main__":
    base = da.TrainConfig(dataset="mnist1d", d_hidden=16, num_blocks=2, epochs=1)
    if sys.argv[1] == "train":
        da.train(da.TrainConfig(dataset="mnist1d", d_hidden=16, num_blocks=2, epochs=1, method=sys.argv[2]),
                 sys.argv[3], progress=False)
    else:
        da.audit(da.AuditConfig(base=base, methods=("bp", sys.argv[2]), seeds=(1,), probe_batches=1,
                                probe_batch_size=32), sys.argv[3], sweep=da.SweepOptions(jobs=int(sys.argv[4])),
                 progress=False)
    print("after the call")
'''


@pytest.mark.parametrize("args, code, what", [
    (["train", "exit41", "T1"], "3", "sys.exit(3)"),
    (["train", "osexit41", "T2"], "3", "os._exit(7)"),
    (["train", "exit41", "T3"], "0", "sys.exit(0)"),
    (["audit", "exit41", "A1", "1"], "0", "sys.exit(0)"),
    (["audit", "exit41", "A2", "2"], "0", "sys.exit(0)"),
])
def test_a_plugins_exit_inside_a_python_call_is_named_never_a_silent_status(tmp_path, args, code, what):
    """W1 (cases 121–124): a plug-in's sys.exit(n)/os._exit(n) in credits() inside da.train/da.audit came out as a
    bare SystemExit(n): the script ended with the plug-in's code (0 for sys.exit(0): a failed job "succeeded") and
    no word. It is a UsageError naming the plug-in's file and line; the script fails (status 1), its next line
    never runs."""
    (tmp_path / "p41m.py").write_text(PLUGIN)
    (tmp_path / "s.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "EXIT41": code,
           "OMP_NUM_THREADS": "1"}
    env.pop("DEPTHAUDIT_PLUGINS", None)
    p = subprocess.run([sys.executable, "s.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    print(p.returncode, p.stderr[-600:])
    assert p.returncode == 1 and "after the call" not in p.stdout
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("depthaudit.errors.UsageError: plug-in p41m called " + what), last
    assert str(tmp_path / "p41m.py") in last and "(in credits)" in last


def test_a_method_class_that_cannot_take_model_and_seed_is_named_not_an_internal_error(tmp_path, monkeypatch,
                                                                                     capsys):
    """W2 (cases 166–168): a registered class with no (model, seed) constructor, or a CreditMethod whose __init__
    forgets ``seed``, was "internal error (a bug, not your input)" with depthaudit's traceback (rc 1), and a bare
    TypeError from Python. One line naming the class, its file and line and the constructor it needs, exit 2."""
    from depthaudit.methods import METHODS

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))  # (the plug-in's names: this test's only)
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))
    (tmp_path / "p41obj.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        for m, jobs in (("obj41", "1"), ("onearg41", "1"), ("onearg41", "2")):
            cmd = ["train", *C, "--method", m, "--out", f"O_{m}"] if jobs == "1" else \
                ["audit", *C, "--methods", "bp", m, "--seeds", "1", "--jobs", jobs, "--out", "O5"]
            assert main(["--plugin", "p41obj", *cmd]) == 2
            err = capsys.readouterr().err
            print(err)
            assert "internal error" not in err and "Traceback" not in err
            assert f"method {m} ({tmp_path / 'p41obj.py'}:" in err and "(model, seed)" in err
            assert "must take (model, seed, **options)" in err
        assert not (tmp_path / "O_obj41").exists() and not (tmp_path / "O5").exists()
        import depthaudit as da
        with pytest.raises(da.UsageError, match=r"method onearg41 .*cannot be built as OneArg41\(model, seed\)"):
            da.train(da.TrainConfig(dataset="mnist1d", d_hidden=16, num_blocks=2, epochs=1, method="onearg41"),
                     tmp_path / "P1", progress=False)
    finally:
        sys.modules.pop("p41obj", None)


def test_an_audit_never_replaces_a_training_monitors_report(tmp_path, capsys):
    """Unclear case 183: ``audit --out`` a TrainingMonitor's folder advised ``--replace-report`` "(the runs of both
    stay in runs/)"; followed, the monitor's report — which no run record stands behind — was gone for good. The
    audit is refused, with or without --replace-report, and the monitor's files are untouched."""
    import hashlib

    import torch

    from depthaudit.evaluator import TrainingMonitor
    from depthaudit.models import build_model

    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(16, 40, generator=g), torch.randint(0, 10, (16,), generator=g))]
    mon = TrainingMonitor(build_model("resmlp", (40,), 10, 8, 1, None, 0), batches, log=None)
    mon.step(0)
    mon.report(test_acc=0.5, budget=1)
    out = tmp_path / "EV_mon"
    mon.write(out)
    digest = lambda: {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}  # noqa: E731
    before = digest()
    for extra in ([], ["--replace-report"]):
        assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "is a TrainingMonitor's report" in err and "use another --out" in err and "both stay" not in err
        assert digest() == before


MODELS_PLUGIN = '''
import torch, torch.nn as nn
from depthaudit.models import MODELS, ResidualAdapter

class Blk(nn.Module):
    def __init__(self, d, residual=True):
        super().__init__(); self.ln = nn.LayerNorm(d); self.fc = nn.Linear(d, d); self.residual = residual
    def forward(self, h):
        f = self.fc(torch.relu(self.ln(h)))
        return h + f if self.residual else f

class Net(nn.Module):
    def __init__(self, din, d, L, k, residual=True, nan=False):
        super().__init__()
        self.stem = nn.Linear(din, d); self.layers = nn.ModuleList([Blk(d, residual) for _ in range(L)])
        self.head = nn.Linear(d, k); self.nan = nan
    def forward(self, x):
        h = self.stem(x.flatten(1))
        for b in self.layers: h = b(h)
        out = self.head(h)
        return out * float("nan") if self.nan else out

def _make(residual=True, nan=False):
    def factory(input_shape, num_classes, d_hidden=16, num_blocks=2, mlp_ratio=4, seed=0):
        net = Net(input_shape[-1], d_hidden, num_blocks, num_classes, residual, nan)
        return ResidualAdapter(net, embed="stem", blocks="layers", readout="head", block_includes_residual=True)
    return factory

MODELS.register("mlp41")(_make())
MODELS.register("plain41")(_make(residual=False))
MODELS.register("nanm41")(_make(nan=True))
'''


def test_a_plugin_adapter_that_does_not_describe_its_network_is_refused_before_training(tmp_path, monkeypatch,
                                                                                         capsys):
    """Unclear cases 137, 138: a plug-in arch whose blocks are plain layers declared residual, or whose readout
    leaves out a step of the network's forward, was trained and audited as the network it does not describe,
    while the evaluator refuses the same adapter. ``train``/``audit`` prove the description as the evaluator does
    (one line naming the arch and the block or the forward), before anything is written."""
    from depthaudit.models import MODELS

    plugin_in(monkeypatch, tmp_path, "p41mod", MODELS_PLUGIN, MODELS)
    try:
        for arch, why in (("plain41", "block 'layers.0': block(h) − h is not its branch"),
                          ("nanm41", "differs from Net's own forward")):
            for cmd in (["train", *C, "--arch", arch, "--out", f"T_{arch}"],
                        ["audit", *C, "--arch", arch, "--methods", "bp", "--seeds", "1", "--out", f"A_{arch}"]):
                assert main(["--plugin", "p41mod", *cmd]) == 2
                err = capsys.readouterr().err
                print(err)
                assert f"--arch {arch} ({tmp_path / 'p41mod.py'}" in err and why in err, err
                assert not (tmp_path / cmd[-1]).exists()
        assert main(["--plugin", "p41mod", "train", *C, "--arch", "mlp41", "--out", "T_ok"]) == 0
    finally:
        sys.modules.pop("p41mod", None)
