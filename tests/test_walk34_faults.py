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
