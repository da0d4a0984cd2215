"""Credit-mix limits (α=1 is BP, α=0 is the method) and the BP warm start's starting point."""

import json

import pytest
import torch

from depthaudit.cli import main
from depthaudit.methods import build_method
from depthaudit.models import build_model


def _setup(seed=0):
    model = build_model("resmlp", (40,), 10, 16, 3, 2, seed).double()
    g = torch.Generator().manual_seed(seed)
    return model, torch.randn(24, 40, generator=g).double(), torch.randint(0, 10, (24,), generator=g)


def _grads(method, model, x, y):
    model.zero_grad(set_to_none=True)
    method.step(model, x, y)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["fa", "dfa"])
def test_credit_mix_limits(name):
    model, x, y = _setup()
    bp = build_method("bp", model, 0)
    bp.fast = False
    for alpha, ref in ((1.0, bp), (0.0, build_method(name, model, 0))):
        got = _grads(build_method(name, model, 0, credit_mix=alpha), model, x, y)
        want = _grads(ref, model, x, y)
        diff = max((got[k] - want[k]).abs().max().item() for k in want)
        print(f"{name} mix α={alpha}: update max diff vs {'bp' if alpha else name} {diff:.1e}")
        assert set(got) == set(want) and diff < 1e-12
    # strictly between, the credit is the stated mix of rms-normalised credits
    bridged = build_method(name, model, 0, credit_mix=0.25)
    _, c_mix = bridged.measure_credits(model, x, y)
    _, c_m = build_method(name, model, 0).measure_credits(model, x, y)
    _, c_bp = bp.measure_credits(model, x, y)
    rms = lambda t: t.pow(2).mean().sqrt()  # noqa: E731
    for a, b, c in zip(c_mix, c_m, c_bp, strict=True):
        assert torch.allclose(a, 0.75 * b / rms(b) + 0.25 * c / rms(c), atol=1e-12)


def test_credit_mix_out_of_range_is_refused(tmp_path, capsys):
    assert main(["train", "--credit-mix", "1.5", "--out", str(tmp_path / "x")]) == 2
    assert "--credit-mix" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_warm_start_starts_from_the_checkpoint(tmp_path):
    assert main(["train", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1", "--out", str(tmp_path / "bp")]) == 0
    ckpt = tmp_path / "bp" / "checkpoint.pt"
    assert main(["train", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "0", "--method", "dfa",
                 "--warm-start", str(ckpt), "--out", str(tmp_path / "sb")]) == 0
    a = torch.load(ckpt, weights_only=True)["model"]
    b = torch.load(tmp_path / "sb" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)  # zero epochs: exactly the BP state
    res = json.loads((tmp_path / "sb" / "result.json").read_text())
    assert res["config"]["warm_start"] == str(ckpt)
    assert main(["train", "--warm-start", str(tmp_path / "nope.pt"), "--out", str(tmp_path / "z")]) == 2


def test_the_credit_mix_card_says_why_pearson_r_is_withheld():
    """Walk 15 case 73: with 2 α values the card printed r as "—" without a word (r of 2 points is ±1)."""
    from depthaudit.experiments.toward_bp import pearson
    from depthaudit.report.toward_bp import credit_mix_md

    def row(alpha, cos, acc):
        ms = lambda v: {"mean": v, "std": None, "n": 1}  # noqa: E731
        return {"alpha": alpha, "test_acc": ms(acc), "cos_mean_per_layer": ms(cos), "cos_concat": ms(cos),
                "per_layer": [ms(cos)]}

    rows = [row(0.0, 0.2, 0.5), row(1.0, 1.0, 0.6)]
    md = credit_mix_md({"rows": rows, "pearson_cos_acc": pearson([0.2, 1.0], [0.5, 0.6])})
    assert "over the α grid: — (needs at least 3 α values with both numbers; this grid has 2)" in md
    rows.append(row(0.5, 0.6, 0.58))
    md = credit_mix_md({"rows": rows, "pearson_cos_acc": pearson([0.2, 1.0, 0.6], [0.5, 0.6, 0.58])})
    assert "over the α grid: +0.9" in md and "needs" not in md
