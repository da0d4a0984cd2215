"""State Bridge: credit through a predictor of h_L (laws against BP)."""

import json

import torch
from _util import exact_remaining

from depthaudit.cli import main
from depthaudit.methods import BP
from depthaudit.methods.state_bridge import StateBridge
from depthaudit.models import build_model


def _setup(seed=0):
    torch.manual_seed(seed)
    model = build_model("resmlp", (7,), 5, 12, 3, 2, seed).double()
    x, y = torch.randn(16, 7, dtype=torch.float64), torch.randint(0, 5, (16,))
    return model, x, y


def test_exact_predictor_gives_exactly_the_bp_credit():
    model, x, y = _setup()
    sb = StateBridge(model, 0)
    sb.predict = exact_remaining(model)  # G = the true remaining network (whatever the learned predictor's form)
    _, c = sb.measure_credits(model, x, y)
    _, ref = BP(model, 0).measure_credits(model, x, y)
    diff = max((a - b).abs().max().item() for a, b in zip(c, ref, strict=True))
    print(f"SB with the exact predictor vs BP: max diff {diff:.1e}")
    assert diff < 1e-12


def test_predictor_learns_h_L_and_round_trips():
    model, x, y = _setup()
    sb = StateBridge(model, 1, lr=1e-2)
    from depthaudit.recipe import output_error, readout_pass, trace_forward

    tr = trace_forward(model, x, input_grad=True)
    readout_pass(tr, y, accumulate=False)
    e = output_error(tr.logits, y)
    sb._build(tr.states, 5)
    losses = [sb.train_predictor(tr.states, e).item() for _ in range(200)]
    print("predictor normalised MSE: first", losses[0], "last", losses[-1])
    assert losses[-1] < 0.1 * losses[0]
    back = StateBridge(model, 99)
    back.load_state_dict(sb.state_dict())
    back._build(tr.states, 5)
    assert all(torch.equal(a, b) for a, b in zip(back.predictor.parameters(), sb.predictor.parameters(),
                                                  strict=True))


def test_sb_trains_through_the_cli_and_logs_its_predictor_loss(tmp_path):
    out = tmp_path / "sb"
    assert main(["train", "--method", "sb", "--epochs", "2", "--d-hidden", "32", "--num-blocks", "2",
                 "--out", str(out)]) == 0
    rec = json.loads((out / "result.json").read_text())
    assert rec["status"] == "ok" and all("predictor_nmse" in h["method"] for h in rec["history"])
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    assert any(k.startswith("predictor.") for k in ck["method"])
