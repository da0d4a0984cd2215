"""Equilibrium propagation (feed-forward): laws against BP's exact credit."""

import json

import pytest
import torch

from depthaudit.cli import main
from depthaudit.methods import BP, build_method
from depthaudit.methods.ep import EP
from depthaudit.models import build_model


def _setup(L, seed=0):
    torch.manual_seed(seed)
    model = build_model("resmlp", (7,), 5, 12, L, 2, seed).double()
    x, y = torch.randn(16, 7, dtype=torch.float64), torch.randint(0, 5, (16,))
    _, ref = BP(model, 0).measure_credits(model, x, y)
    return model, x, y, ref


def _rel(c, ref):
    return max(((a - b).norm() / b.norm()).item() for a, b in zip(c, ref, strict=True))


def test_ep_error_credit_tends_to_bp_as_beta_goes_to_zero():
    model, x, y, ref = _setup(3)
    errs = [_rel(EP(model, 0, beta, 200, 0.5, "error").measure_credits(model, x, y)[1], ref)
            for beta in (0.1, 0.01, 0.001)]
    print("EP (error readout) max relative error vs BP at beta 0.1, 0.01, 0.001:", errs)
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-2  # first order in β
    assert errs[1] / errs[2] > 5


def test_ep_state_credit_is_bp_for_one_block_and_aligned_deeper():
    model, x, y, ref = _setup(1)
    errs = [_rel(EP(model, 0, beta, 200, 0.5).measure_credits(model, x, y)[1], ref) for beta in (0.1, 0.01, 0.001)]
    print("L=1, protocol's state credit vs BP:", errs)
    assert errs[2] < 5e-3 and errs[0] > errs[2]
    model, x, y, ref = _setup(3)
    cos = []
    for beta in (0.5, 0.1, 0.001):
        c = EP(model, 0, beta, 20, 0.5).measure_credits(model, x, y)[1]
        cos.append(min(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()
                       for a, b in zip(c, ref, strict=True)))
    print("L=3, state credit: worst per-layer cosine to BP at beta 0.5, 0.1, 0.001 (T=20):", cos)
    assert cos[0] < cos[1] < cos[2] and cos[2] > 0.999  # the SPEC's reference β=0.5, T=20 and smaller β


def test_ep_credits_are_per_example_and_leave_no_grad():
    model, x, y, _ = _setup(2)
    _, c = EP(model, 0, 0.1, 20, 0.5).measure_credits(model, x, y)
    _, c_half = EP(model, 0, 0.1, 20, 0.5).measure_credits(model, x[:8], y[:8])
    assert max((a[:8] - b).abs().max().item() for a, b in zip(c, c_half, strict=True)) < 1e-12
    assert all(p.grad is None for p in model.parameters())


def test_ep_trains_through_the_cli_and_records_its_options(tmp_path):
    out = tmp_path / "ep"
    assert main(["train", "--method", "ep", "--ep-beta", "0.5", "--ep-steps", "5", "--epochs", "1", "--d-hidden", "32",
                 "--num-blocks", "2", "--out", str(out)]) == 0
    rec = json.loads((out / "result.json").read_text())
    assert rec["status"] == "ok" and rec["config"]["method_options"]["steps"] == 5 and rec["final"]["test_acc"] > 0.15
    assert main(["train", "--method", "ep", "--ep-beta", "0", "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()
    m = build_method("ep", build_model("resmlp", (7,), 5, 8, 1, None, 0), 0)
    assert isinstance(m, EP) and m.beta == pytest.approx(0.5) and m.steps == 20  # the reference values
