"""Stream-level FA and per-weight FA with an exact head: laws against BP (SPEC §2)."""

import torch
import torch.nn.functional as F

from depthaudit.cli import main
from depthaudit.methods import BP, FA, build_method
from depthaudit.methods.fa_stream import FAStream
from depthaudit.models import build_model


def _setup(arch="resmlp", shape=(7,), seed=0):
    torch.manual_seed(seed)
    model = build_model(arch, shape, 5, 12, 3, 2, seed).double()
    x, y = torch.randn(16, *shape, dtype=torch.float64), torch.randint(0, 5, (16,))
    logits, states = model(x, return_states=True)
    ref = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum"), states)  # autograd, independent
    return model, x, y, ref


def test_fa_stream_top_credit_is_exact_and_the_rest_follows_the_matrices():
    model, x, y, ref = _setup()
    m = FAStream(model, 3)
    _, c = m.measure_credits(model, x, y)
    top = (c[-1] - ref[-1]).abs().max().item()
    print(f"fa-stream: c_L vs autograd max diff {top:.1e}")
    assert top < 1e-12
    for i in range(3, 0, -1):  # c_{l-1} = c_l B_lᵀ, hand-checked
        assert torch.allclose(c[i - 1], c[i] @ m.feedback[f"B{i}"].T, atol=1e-12)
    b = m.feedback["B1"]
    assert b.shape == (12, 12) and abs(b.std().item() - 12 ** -0.5) < 0.1  # N(0, 1/d)


def test_fa_stream_with_identity_and_zero_matrices_passes_c_L_everywhere():
    model, x, y, ref = _setup()
    m = FAStream(model, 3, identity=True, scale=0.0)
    _, c = m.measure_credits(model, x, y)
    assert all(torch.equal(ci, c[-1]) for ci in c)
    m2 = FAStream(model, 3, identity=True)
    m2.measure_credits(model, x, y)
    for k in m2.feedback:
        m2.feedback[k] = torch.zeros_like(m2.feedback[k])
    assert all(torch.equal(ci, c[-1]) for ci in m2.measure_credits(model, x, y)[1])


def test_fa_stream_on_tokens_acts_on_the_feature_dimension_and_round_trips():
    model, x, y, ref = _setup("vit", (3, 8, 8))
    m = FAStream(model, 5)
    _, c = m.measure_credits(model, x, y)
    assert c[0].shape == ref[0].shape and torch.allclose(c[-1], ref[-1], atol=1e-12)
    assert torch.allclose(c[2], torch.einsum("btd,ed->bte", c[3], m.feedback["B3"]), atol=1e-12)
    back = FAStream(model, 99)
    back.load_state_dict(m.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(back.measure_credits(model, x, y)[1], c, strict=True))


def test_fa_exact_head_gives_the_true_top_credit_and_feedback_head_does_not():
    model, x, y, ref = _setup()
    exact = FA(model, 4)
    exact.set_head("exact")
    _, c = exact.measure_credits(model, x, y)
    _, c_fb = FA(model, 4).measure_credits(model, x, y)
    print("FA exact head c_L diff", (c[-1] - ref[-1]).abs().max().item())
    assert torch.allclose(c[-1], ref[-1], atol=1e-12) and not torch.allclose(c_fb[-1], ref[-1], atol=1e-3)
    # below h_L both use the same block feedback
    fb = FA(model, 4)
    for k in fb.feedback:
        mod, name = k.split(".")
        owner = model.readout if mod == "readout" else model.blocks[int(mod[5:]) - 1]
        fb.feedback[k] = owner.feedback_weights()[name].detach().clone()
    fb.set_head("exact")
    assert max((a - b).abs().max().item() for a, b in zip(fb.measure_credits(model, x, y)[1], ref, strict=True)) < 1e-12
    _, c_bp = BP(model, 0).measure_credits(model, x, y)
    assert torch.allclose(c_bp[-1], c[-1], atol=1e-12)


def test_fa_family_through_the_cli(tmp_path):
    import json

    out = tmp_path / "a"
    assert main(["audit", "--methods", "fa", "fa-stream", "--epochs", "1", "--d-hidden", "24", "--num-blocks", "2",
                 "--probe-batches", "1", "--probe-batch-size", "64", "--fa-stream-identity", "--fa-head", "exact",
                 "--out", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    # a flag sets the option of every chosen method that declares it; the row's label names it
    assert [m["method"] for m in rep["methods"]] == ["fa:head=exact", "fa-stream:identity"]
    opts = {json.loads(p.read_text())["config"]["method"]: json.loads(p.read_text())["config"]["method_options"]
            for p in (out / "runs").glob("*/result.json")}
    assert opts == {"fa": {"head": "exact"}, "fa-stream": {"identity": True, "scale": 1.0}}
    m = build_method("fa-stream", build_model("resmlp", (7,), 5, 8, 2, None, 0), 0)
    assert isinstance(m, FAStream) and not m.identity


def test_fa_family_side_by_side_in_the_ladder(tmp_path):
    import json

    out = tmp_path / "lad"
    assert main(["ladder", "--dataset", "mnist1d", "--d-hidden", "24", "--num-blocks", "2", "--methods",
                 "fa:head=exact", "fa-stream:identity", "--k-values", "0", "2", "--seeds", "1", "--epochs", "1",
                 "--probe-batches", "1", "--probe-batch-size", "64", "--out", str(out)]) == 0
    doc = json.loads((out / "ladder_d24_L2_mnist1d.json").read_text())
    cfgs = {key: rec["config"] for key, rec in doc["runs"].items()}
    assert cfgs["fa:head=exact/k2/s1"]["method_options"] == {"head": "exact"}
    assert cfgs["fa:head=exact/k2/s1"]["method"] == "fa"
    assert cfgs["fa-stream:identity/k0/s1"]["method_options"]["identity"] is True
    table = (out / "ladder_d24_L2_mnist1d.md").read_text()
    assert "| k (last blocks trained) | fa:head=exact | fa-stream:identity |" in table  # the variant names each column
