"""Credit Bridge (cb): credit = ∇_h of a learned value (laws against BP and closed forms)."""

import json
import math

import torch
import torch.nn.functional as F

from depthaudit.cli import main
from depthaudit.methods import BP
from depthaudit.methods.credit_bridge import CreditBridge, softmin
from depthaudit.models import build_model
from depthaudit.recipe import output_error, readout_pass, trace_forward


def _setup(seed=0, n=32):
    torch.manual_seed(seed)
    model = build_model("resmlp", (7,), 5, 12, 3, 2, seed).double()
    x, y = torch.randn(n, 7, dtype=torch.float64), torch.randint(0, 5, (n,))
    return model, x, y


def _trace(model, x, y):
    tr = trace_forward(model, x, input_grad=True)
    readout_pass(tr, y, accumulate=False)
    return tr, output_error(tr.logits, y)


def test_softmin_closed_forms():
    v = torch.tensor([[1.0, 3.0], [2.0, -1.0], [4.0, 0.0]], dtype=torch.float64)  # (K=3, B=2)
    # hand: τ = 1, column 0: −log((e^-1 + e^-2 + e^-4)/3)
    hand = -math.log((math.exp(-1) + math.exp(-2) + math.exp(-4)) / 3)
    got = softmin(v, 1.0)
    print(f"softmin τ=1: {got[0].item():.12f} vs hand {hand:.12f}")
    assert abs(got[0].item() - hand) < 1e-12
    assert torch.allclose(softmin(v, 1e6), v.mean(0), atol=1e-5)  # τ → ∞: the mean
    assert torch.allclose(softmin(v, 1e-3), v.min(0).values, atol=1e-2)  # τ → 0: the minimum (+ τ log K)


def test_exact_value_gives_exactly_the_bp_credit():
    """With V = the true loss-to-go ℓ(readout(rest of the network(h_l))), ∇_h V is BP's credit at every l."""
    model, x, y = _setup()
    cb = CreditBridge(model, 0)

    class Exact(torch.nn.Module):
        def forward(self, h, pos, e):
            for blk in model.blocks[pos:]:
                h = h + blk(h)
            return F.cross_entropy(model.readout(h), y, reduction="none")

    _, c = cb.measure_credits(model, x, y)  # builds the learned V, then replace it
    cb.value = Exact()
    _, c = cb.measure_credits(model, x, y)
    _, ref = BP(model, 0).measure_credits(model, x, y)
    diff = max((a - b).abs().max().item() for a, b in zip(c, ref, strict=True))
    print(f"CB with the exact value vs BP: max diff {diff:.1e}")
    assert diff < 1e-12


def test_terminal_matching_makes_grad_V_match_the_true_gradient():
    """Training only ever sees the batch: ∇_h V(h_L) must come to match ∂ℓ_b/∂h_L there (per-example cosine)."""
    model, x, y = _setup(n=64)
    tr, e = _trace(model, x, y)
    cb = CreditBridge(model, 3, lr=3e-3)
    cb._build(tr.states, 5)
    ell = F.cross_entropy(tr.logits.detach(), y, reduction="none")

    def cos_L():
        g = cb.value_grad(tr.states[-1], len(tr.states) - 1, e)
        return F.cosine_similarity(g, tr.gL, dim=1).mean().item()

    before = cos_L()
    losses = [cb.train_value(tr.states, e, ell, tr.gL) for _ in range(600)]
    after = cos_L()
    print(f"cos(∇V(h_L), ∂ℓ/∂h_L) before {before:.3f} after {after:.4f}; "
          f"terminal-gradient NMSE {losses[0][2].item():.3f} → {losses[-1][2].item():.4f}")
    assert after > 0.98 and after > before
    assert losses[-1][2] < 0.05 * losses[0][2]


def test_state_round_trips_and_cli_trains_cb(tmp_path):
    model, x, y = _setup()
    cb = CreditBridge(model, 1)
    cb.step(model, x, y)  # builds and trains V one step
    back = CreditBridge(model, 99)
    back.load_state_dict(cb.state_dict())
    _, c1 = cb.measure_credits(model, x, y)
    _, c2 = back.measure_credits(model, x, y)
    assert all(torch.equal(a, b) for a, b in zip(c1, c2, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(back.target.parameters(), cb.target.parameters(), strict=True))

    out = tmp_path / "cb"
    assert main(["train", "--method", "cb", "--epochs", "2", "--d-hidden", "32", "--num-blocks", "2",
                 "--cb-sigma", "0.05", "--out", str(out)]) == 0
    rec = json.loads((out / "result.json").read_text())
    stats = [h["method"] for h in rec["history"]]
    print("cb value losses per epoch:", stats)
    assert rec["config"]["method_options"]["sigma"] == 0.05 and rec["status"] == "ok"
    assert set(stats[0]) == {"value_consistency", "value_terminal", "value_terminal_grad_nmse"}
    assert stats[1]["value_terminal_grad_nmse"] < stats[0]["value_terminal_grad_nmse"]
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    keys = [k for k in ck["method"] if k.startswith("value.")]
    assert keys, sorted(ck)
