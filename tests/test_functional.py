"""Functional credit measurements against hand-computed cases (SPEC §3)."""

import math

import pytest
import torch

from depthaudit.cli import main
from depthaudit.diagnostics import FreshBNull, Nudging, PerturbationCorrelation, Snapshot
from depthaudit.diagnostics.functional import loss_from, pearson
from depthaudit.methods import build_method
from depthaudit.models import build_model


def _probe(method="bp", seed=0, L=2):
    model = build_model("studentnet", (10,), 4, 8, L, None, seed).double()
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(32, 10, generator=g, dtype=torch.float64), torch.randint(0, 4, (32,), generator=g))]
    return Snapshot(model, build_method(method, model, seed), batches)


def test_loss_from_a_position_reruns_the_rest_of_the_network():
    p = _probe()
    x, y = p.batches[0]
    direct = torch.nn.functional.cross_entropy(p.model(x), y, reduction="none")
    for pos, h in enumerate(p.states):
        assert torch.allclose(loss_from(p.model, pos, h.double(), y), direct, atol=1e-6)


def test_linear_case_perturbation_correlation_is_exact():
    # hand-computed: zero-output blocks and a linear readout make ℓ(h + εv) − ℓ(h) = ⟨∂ℓ/∂h, εv⟩ + O(ε²); with
    # a credit equal to the gradient the correlation tends to 1 as ε → 0, with a random credit to ≈ 0
    p = _probe("bp")
    with torch.no_grad():
        for blk in p.model.blocks:
            blk.fc2.weight.zero_()
    p = Snapshot(p.model, p.method, p.batches)
    rs = [PerturbationCorrelation(directions=16, step=s).compute(p)["mean"] for s in (1e-1, 1e-3)]
    print("BP perturbation correlation at step 1e-1, 1e-3:", rs)
    assert rs[1] > 0.9999 and rs[1] >= rs[0]
    rnd = PerturbationCorrelation(directions=16, step=1e-3).compute(_probe("dfa"))["per_layer"]
    print("DFA (random credit) per layer:", rnd)
    # a random credit predicts the loss change no better than chance: far from BP's 1 at every position
    assert len(rnd) == 3 and max(abs(r) for r in rnd) < 0.5
    assert abs(pearson(torch.arange(5.0), 2 * torch.arange(5.0)) - 1) < 1e-12
    assert math.isnan(pearson(torch.ones(4), torch.arange(4.0)))


def test_gradient_credit_nudges_downhill_and_its_negative_uphill():
    p = _probe("bp")
    down = Nudging(eta=0.01).compute(p)
    print("BP nudging per layer:", down["per_layer"])
    assert all(d < 0 for d in down["per_layer"]) and down["downhill_fraction"] == 1.0
    flipped = Snapshot(p.model, p.method, p.batches)
    flipped.__dict__["credits"] = [-c for c in p.credits]  # the same measurement with the credit reversed
    assert all(d > 0 for d in Nudging(eta=0.01).compute(flipped)["per_layer"])


def test_fresh_b_null_is_chance_level_and_refused_without_feedback():
    p = _probe("fa")
    out = FreshBNull(draws=8).compute(p)
    print("FA fresh-B null mean per layer:", out["null_mean"], "z:", out["z"])
    assert len(out["null_mean"]) == 3 and out["draws"] == 8 and all(s > 0 for s in out["null_std"])
    # z is the method's Γ_l standardised by the null, recomputed by hand from the returned fields
    for m, a, s, z in zip(out["per_layer"], out["null_mean"], out["null_std"], out["z"], strict=True):
        assert z == pytest.approx((m - a) / s, rel=1e-12)
    assert all(abs(m) < 0.5 for m in out["null_mean"][:-1])  # fresh random feedback: chance level below h_L
    assert "refused" in FreshBNull(draws=8).compute(_probe("bp"))
    assert "no random feedback" in FreshBNull(draws=8).compute(_probe("bp"))["refused"]


def test_audit_with_functional_measurements(tmp_path, capsys):
    out = tmp_path / "a"
    assert main(["audit", "--methods", "bp", "dfa", "--epochs", "1", "--d-hidden", "24", "--num-blocks", "2",
                 "--probe-batches", "1", "--probe-batch-size", "64", "--functional", "--fresh-b-draws", "4",
                 "--out", str(out)]) == 0
    import json

    rep = json.loads((out / "report.json").read_text())
    bp, dfa = rep["methods"]
    assert bp["functional"]["fresh_b_refused"].startswith("method bp")
    assert len(dfa["functional"]["fresh_b_null"]["z"]) == 3 and len(bp["functional"]["nudging"]) == 3
    assert "Functional credit measurements" in capsys.readouterr().out
