"""Sign symmetry (uSF, frSF, brSF) and Kolen–Pollack: their defining laws."""

import pytest
import torch

from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.loop import Stepper, build
from depthaudit.methods import BP, build_method
from depthaudit.models import build_model


def _model(seed=0):
    return build_model("resmlp", (40,), 10, 16, 2, 2, seed)


def _batch(seed=0, n=32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 40, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_usf_is_sign_of_w_times_stated_scale():
    model = _model()
    m = build_method("usf", model, 0)
    w = model.blocks[0].fc1.weight
    b = m.feedback_for("block1", model.blocks[0])["fc1"]
    assert torch.equal(b, torch.sign(w.detach()) * (3 * w.shape[1]) ** -0.5)
    print("uSF magnitude", b.abs().unique().tolist(), "= 1/sqrt(3*fan_in) with fan_in", w.shape[1])


def test_frsf_keeps_magnitudes_fixed_and_follows_signs():
    cfg = TrainConfig(method="frsf", d_hidden=16, num_blocks=2, mlp_ratio=2, epochs=1, lr=0.05)
    data = load_data("mnist1d", None, False, torch.device("cpu"))
    model, method = build(cfg, data)
    blk = model.blocks[1]
    b0 = method.feedback_for("block2", blk)["fc2"].clone()
    w0 = blk.fc2.weight.detach().clone()
    stepper = Stepper(cfg, data, model, method)
    for i in range(20):
        stepper(torch.arange(i * 128, (i + 1) * 128), 0.05)
    b1 = method.feedback_for("block2", blk)["fc2"]
    w1 = blk.fc2.weight.detach()
    assert not torch.equal(torch.sign(w0), torch.sign(w1))  # some signs flipped during training ...
    assert torch.equal(torch.sign(b1), torch.sign(w1))  # ... and the feedback followed them
    assert torch.equal(b1.abs(), b0.abs())  # while every magnitude stayed fixed


def test_brsf_redraws_magnitudes_every_step():
    model = _model()
    m = build_method("brsf", model, 0)
    b0 = m.feedback_for("block1", model.blocks[0])["fc1"].clone()
    assert torch.equal(m.feedback_for("block1", model.blocks[0])["fc1"], b0)  # fixed within a step
    m.after_step(model, 1e-3, 0.01)
    b1 = m.feedback_for("block1", model.blocks[0])["fc1"]
    w = model.blocks[0].fc1.weight
    assert torch.equal(torch.sign(b1), torch.sign(w.detach())) and not torch.equal(b1.abs(), b0.abs())


def test_kp_difference_contracts_exactly_and_feedback_approaches_w():
    cfg = TrainConfig(method="kp", d_hidden=16, num_blocks=2, mlp_ratio=2, epochs=1, lr=1e-2, weight_decay=0.5)
    data = load_data("mnist1d", None, False, torch.device("cpu"))
    model, method = build(cfg, data)
    stepper = Stepper(cfg, data, model, method)

    def rel(key, w):
        return ((method.matrix(key, w) - w).norm() / w.norm()).item()

    w = model.blocks[0].fc1.weight
    start = rel("block1.fc1", w)
    d_before = (method.matrix("block1.fc1", w) - w.detach()).clone()
    stepper(torch.arange(0, 128), 1e-2)
    d_after = method.matrix("block1.fc1", w) - w.detach()
    # law: B − W ← (1 − lr·wd)(B − W), whatever W's update was
    assert torch.allclose(d_after, d_before * (1 - 1e-2 * 0.5), atol=1e-7)
    for i in range(1, 150):
        stepper(torch.arange((i % 60) * 128, (i % 60 + 1) * 128), 1e-2)
    end = rel("block1.fc1", w)
    print(f"KP relative distance |B-W|/|W|: {start:.3f} -> {end:.3f} after 150 steps")
    assert end < 0.7 * start  # observed 1.398 -> 0.871 (seeded)


def test_kp_with_zero_difference_equals_bp():
    model = _model(3)
    model.double()
    x, y = _batch(3)
    x = x.double()
    kp = build_method("kp", model, 0)
    for k in kp.feedback:
        kp.feedback[k] = torch.zeros_like(kp.feedback[k]).double()
    _, c_kp = kp.measure_credits(model, x, y)
    _, c_bp = BP(model, 0).measure_credits(model, x, y)
    assert max((a - b).abs().max().item() for a, b in zip(c_kp, c_bp, strict=True)) < 1e-12


@pytest.mark.parametrize("method", ["usf", "frsf", "brsf", "kp"])
def test_relatives_train_through_the_cli(method, tmp_path):
    from depthaudit.cli import main

    assert main(["train", "--method", method, "--d-hidden", "32", "--num-blocks", "2", "--epochs", "1",
                 "--out", str(tmp_path / method)]) == 0
