"""Walk 34's wrong cases, each reproduced as the walker did it (docs/walks/walk34_*.txt)."""

import json

import numpy as np
import pytest

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
