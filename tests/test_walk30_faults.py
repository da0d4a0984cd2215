"""Walk 30's wrong cases, each reproduced as the walker did it (docs/walks/walk30_*.txt)."""

import hashlib

import numpy as np
import pytest

from depthaudit.cli import main
from depthaudit.data import DATASETS, ArrayData


def _register(name, shape):
    def load(data_dir=None, download=False):
        rng = np.random.default_rng(0)
        x = rng.integers(0, 255, (300, *shape)).astype(np.uint8)
        xt = rng.integers(0, 255, (100, *shape)).astype(np.uint8)
        return ArrayData(x, rng.integers(0, 3, 300), xt, rng.integers(0, 3, 100), num_classes=3,
                         source=f"w30 {shape}", sha256=hashlib.sha256(repr(shape).encode()).hexdigest())
    DATASETS.register(name, epochs=1)(load)


@pytest.mark.parametrize("shape,hint", [((8,), ""), ((8, 8), " (grayscale? give x[..., None])"),
                                        ((3, 8, 8), " (channels first? give x.transpose(0, 2, 3, 1))"),
                                        ((8, 8, 1), None), ((8, 8, 3), None)])
def test_uint8_inputs_that_are_not_images_are_one_line(tmp_path, capsys, shape, hint):
    """W1 (case 50): a plug-in dataset of uint8 inputs that are not (N, H, W, C) images — flat (N, 8) or grayscale
    (N, 8, 8) — was an IndexError inside the image conversion, an internal error."""
    name = "w30u" + "x".join(map(str, shape))
    _register(name, shape)
    try:
        rc = main(["train", "--dataset", name, "--d-hidden", "8", "--num-blocks", "1", "--out", str(tmp_path / "t")])
    finally:
        DATASETS._items.pop(name, None)
        DATASETS._meta.pop(name, None)
    err = capsys.readouterr().err.strip().splitlines()
    print(rc, err[-1])
    if hint is None:  # images, channels last: trained
        assert rc == 0
        return
    assert rc == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].endswith(f"its train inputs are uint8 of shape {(300, *shape)}; uint8 inputs are read as images "
                            f"(N, H, W, C) with C 1 or 3{hint}; for features give x.astype(np.float32)")
    assert not (tmp_path / "t").exists()


def test_an_intervene_cell_claims_its_folder_as_an_audit_cell_does(tmp_path, capsys):
    """W2 (cases 82, 83): `intervene --cell` claimed nothing: another recipe's cells and a ladder's trained into
    its folder and replaced its sweep.json, stranding its cells."""
    out = str(tmp_path / "i")
    c = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1", "--probe-batches", "1",
         "--probe-batch-size", "32"]
    grid = ["intervene", *c, "--methods", "bp", "--seeds", "1", "--lambdas", "0", "0.1", "--out", out]
    assert main([*grid, "--cell", "0"]) == 0
    assert (tmp_path / "i" / "identity.json").is_file()
    sweep = (tmp_path / "i" / "sweep.json").read_text()
    assert main([*grid, "--lr", "0.002", "--cell", "1"]) == 2
    assert "belongs to another intervene (differs in base.lr)" in capsys.readouterr().err
    assert main(["ladder", *c, "--methods", "bp", "--seeds", "1", "--out", out, "--cell", "0"]) == 2
    assert "holds the results of another command (intervene); ladder cannot write there" in capsys.readouterr().err
    assert (tmp_path / "i" / "sweep.json").read_text() == sweep
    for cell in ("1", "2", "3"):
        assert main([*grid, "--cell", cell]) == 0
    assert main(["report", out]) == 0
    assert (tmp_path / "i" / "intervention.json").is_file()


def test_a_train_that_meets_anothers_result_under_the_lock_says_whose_it_is(tmp_path):
    """W3 (cases 132, 133): a train whose folder another train (started just before) finished into was refused
    under the folder's lock with an unqualified "already exists; pass --force"; sequentially the same refusal
    says whose run it is. Both now come from one place."""
    import depthaudit as da
    from depthaudit.api import claim_training

    out = tmp_path / "t"
    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    da.train(da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1, lr=0.002), out, progress=False)
    with pytest.raises(da.UsageError) as e:
        with claim_training(out, base, False):
            pass
    print(e.value)
    assert str(e.value) == (f"{out}/result.json already exists (a run of another configuration: differs in lr); "
                            "pass --force (force=True) to overwrite or choose another output folder")


def test_an_audit_of_a_model_with_an_unused_block_parameter_measures_it(tmp_path, capsys):
    """W7 (cases 181, 182): a plug-in model whose blocks hold a parameter their forward never uses trained, but
    its audit was an internal error in the BP reference ("appears to not have been used in the graph"). That
    parameter's gradient is zero, as .grad would read it; the spare layer changes no number of the audit."""
    import json

    import torch
    from torch import nn

    from depthaudit.models import MODELS, ResidualAdapter

    class Blk(nn.Module):
        def __init__(self, d, spare):
            super().__init__()
            self.lin = nn.Linear(d, d)
            if spare:
                self.spare = nn.Linear(d, d)

        def forward(self, h):
            return h + self.lin(h)

    class Net(nn.Module):
        def __init__(self, din, d, L, C, spare):
            super().__init__()
            self.stem, self.head = nn.Linear(din, d), nn.Linear(d, C)
            self.layers = nn.ModuleList([Blk(d, spare) for _ in range(L)])

        def forward(self, x):
            h = self.stem(x.flatten(1))
            for b in self.layers:
                h = b(h)
            return self.head(h)

    def factory(spare):
        def make(input_shape, num_classes, d_hidden=8, num_blocks=2, mlp_ratio=1, seed=0):
            g = torch.Generator().manual_seed(seed)
            net = Net(int(torch.tensor(input_shape).prod()), d_hidden, num_blocks, num_classes, spare)
            with torch.no_grad():  # the same weights with or without the spare layer (drawn last)
                for p in [p for n, p in net.named_parameters() if "spare" not in n]:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            return ResidualAdapter(net, embed="stem", blocks="layers", readout="head", block_includes_residual=True)
        return make

    reports = {}
    for name, spare in (("w30spare", True), ("w30plain", False)):
        MODELS.register(name)(factory(spare))
        try:
            out = tmp_path / name
            assert main(["audit", "--dataset", "mnist1d", "--arch", name, "--d-hidden", "8", "--num-blocks", "2",
                         "--epochs", "1", "--methods", "bp", "dfa", "--seeds", "1", "--probe-batches", "1",
                         "--probe-batch-size", "32", "--out", str(out)]) == 0, capsys.readouterr().err[-800:]
            reports[name] = json.loads((out / "report.json").read_text())["methods"]
        finally:
            MODELS._items.pop(name, None)
            MODELS._meta.pop(name, None)
    for a, b in zip(reports["w30spare"], reports["w30plain"], strict=True):
        print(a["method"], a["trained_test_acc"], b["trained_test_acc"])
        assert a["trained_test_acc"] == b["trained_test_acc"] and a["checks"] == b["checks"]


def test_runs_of_a_name_now_registered_by_another_module_are_said_or_refused(tmp_path):
    """W5 (cases 172, 173): runs of method m30 trained by module p30a were reused, without a word, when p30b
    registered m30; W6 (case 180): for an --arch whose blocks changed, loading the old checkpoints for the CKA was an
    internal error."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    net = ("import torch\nfrom torch import nn\nfrom depthaudit.methods import METHODS\n"
           "from depthaudit.methods.dfa import DFA\nfrom depthaudit.models import MODELS, ResidualAdapter\n"
           "@METHODS.register('m30')\nclass M30(DFA):\n    pass\n"
           "class Blk(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
           "        self.l = nn.Linear(d, d)\n{extra}"
           "    def forward(self, h):\n        return h + self.l(h)\n"
           "class Net(nn.Module):\n    def __init__(self, din, d, L, C):\n        super().__init__()\n"
           "        self.stem, self.head = nn.Linear(din, d), nn.Linear(d, C)\n"
           "        self.layers = nn.ModuleList([Blk(d) for _ in range(L)])\n"
           "    def forward(self, x):\n        h = self.stem(x.flatten(1))\n        for b in self.layers:\n"
           "            h = b(h)\n        return self.head(h)\n"
           "@MODELS.register('n30')\n"
           "def n30(input_shape, num_classes, d_hidden=8, num_blocks=2, mlp_ratio=1, seed=0):\n"
           "    torch.manual_seed(seed)\n"
           "    net = Net(int(torch.tensor(input_shape).prod()), d_hidden, num_blocks, num_classes)\n"
           "    return ResidualAdapter(net, embed='stem', blocks='layers', readout='head', "
           "block_includes_residual=True)\n")
    (tmp_path / "p30a.py").write_text(net.format(extra=""))
    (tmp_path / "p30b.py").write_text(net.format(extra="        self.g = nn.Linear(d, d)\n"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(tmp_path)]), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}

    def audit(mod, *args):
        return subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", mod, "audit", "--dataset", "mnist1d",
                               "--d-hidden", "8", "--num-blocks", "2", "--epochs", "1", "--seeds", "1",
                               "--probe-batches", "1", "--probe-batch-size", "32", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    assert audit("p30a", "--methods", "bp", "m30", "--out", "m").returncode == 0
    p = audit("p30b", "--methods", "bp", "m30", "--out", "m")
    print(p.stderr[-600:])
    assert p.returncode == 0
    note = next(line for line in p.stderr.splitlines() if "plug-in code that is not what is loaded now" in line)
    assert f"{tmp_path / 'p30a.py'} (module p30a, not loaded now)" in note  # (and p30b, which now registers m30:
    assert f"{tmp_path / 'p30b.py'} (module p30b, which now registers a name they were trained under)" in note  # 35)
    assert audit("p30a", "--arch", "n30", "--methods", "bp", "m30", "--out", "n").returncode == 0
    p = audit("p30b", "--arch", "n30", "--methods", "bp", "m30", "--out", "n")
    last = p.stderr.strip().splitlines()[-1]
    print(last)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "does not fit the model --arch n30 builds here" in last and last.endswith("or write to a new --out")


@pytest.mark.parametrize("embed,readout", [("stem", "stem"), ("head", "head")])
def test_an_adapter_naming_the_wrong_module_is_named_not_the_batch(embed, readout):
    """W4 (case 167): an adapter whose readout (or embed) names the wrong module was "x of shape (128, 40) does not
    fit the model … pass inputs shaped as in training" (the network takes it), and verify(x) torch's raw error."""
    import torch
    from _util import TinyNet

    import depthaudit as da
    from depthaudit.evaluator import CreditEvaluator
    from depthaudit.models import ResidualAdapter

    torch.manual_seed(0)
    net, x, y = TinyNet(40, 16, 2, 10), torch.randn(128, 40), torch.randint(0, 10, (128,))
    ad = ResidualAdapter(net, embed=embed, blocks="layers", readout=readout, block_includes_residual=True)
    for call in (lambda: CreditEvaluator(ad, [(x, y)]), lambda: ad.verify(x)):
        with pytest.raises(da.UsageError) as e:
            call()
        print(e.value)
        assert str(e.value).startswith("ResidualAdapter: embed → blocks → readout fails on ")
        assert str(e.value).endswith("check that embed= names everything before the first block and readout= "
                                     "everything after the last")
    CreditEvaluator(ResidualAdapter(net, embed="stem", blocks="layers", readout="head",
                                    block_includes_residual=True), [(x, y)])  # the right one is taken
