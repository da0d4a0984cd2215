"""Depth under a credit method and one tangent space for V, growth and matched insertion (resmlp family).

Laws, all in float64 on small seeded models:
* AG and V from BP's credit equal AG and V from autograd (the credit is the gradient);
* V_l = 0 exactly when the inserted zero block's parameter gradient at its origin is 0 (both directions,
  constructed cases), and every parameter other than the output projection has an exactly zero gradient;
* one small gradient step on the inserted block changes the loss by its first-order prediction −η‖G‖²;
* the gradient-matched insertion's loss change equals −α·B·V² to first order (V and the insertion share Ψ);
* growth keeps a method's feedback for every existing block (re-keyed) and draws the new block's.
"""

import copy
import json

import pytest
import torch
import torch.nn.functional as F

from depthaudit.cli import main
from depthaudit.depth.growth import activation_gradients, credit_signal, zero_block_features
from depthaudit.depth.insert import block_features, insert_zero_block, zero_block
from depthaudit.depth.matched import gradient_matched
from depthaudit.errors import UsageError
from depthaudit.methods import build_method
from depthaudit.models import build_model


def _model(d=8, blocks=3, seed=0):
    return build_model("resmlp", (12,), 5, d, blocks, 1, seed).double()


def _batches(n=3, b=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(b, 12, generator=g, dtype=torch.float64), torch.randint(0, 5, (b,), generator=g))
            for _ in range(n)]


def test_bp_credit_signal_equals_autograd_ag_and_v():
    model, batches = _model(), _batches()
    feats = zero_block_features(model, lambda p: 100 + p)
    ref = activation_gradients(model, batches, feature_fn=feats)
    got = credit_signal(build_method("bp", model, 0), model, batches, feats)
    dag = max(abs(a - b) for a, b in zip(got["AG"], ref["AG"], strict=True))
    dv = max(abs(a - b) for a, b in zip(got["V"], ref["V"], strict=True))
    print(f"BP credit vs autograd: max |ΔAG| = {dag:.2e}, max |ΔV| = {dv:.2e}")
    assert dag < 1e-14 and dv < 1e-14
    fa = credit_signal(build_method("fa", model, 0), model, batches, feats)
    assert fa["AG"] != pytest.approx(ref["AG"], rel=1e-3)  # FA's credit is not the gradient: a real difference


def _inserted_grads(model, pos, seed, x, loss_fn):
    """Gradients of every parameter of the zero block inserted at ``pos``, at its origin."""
    grown = insert_zero_block(model, pos, seed).eval()
    blk = grown.blocks[pos]
    loss_fn(grown(x)).backward()
    return blk, {n: p.grad.clone() for n, p in blk.named_parameters()}


FAMILIES = ["resmlp", "gpt"]


def _family(name: str, blocks: int = 2):
    """``(model, x, y, loss_fn)``: a float64 model of the family, a batch, and its mean loss."""
    torch.manual_seed(0)
    if name == "gpt":
        from depthaudit.models.gpt import GPTDecoder, lm_loss

        model = GPTDecoder(11, 6, 8, blocks, heads=2, mlp_ratio=2, seed=0).double().eval()
        g = torch.Generator().manual_seed(1)
        return model, torch.randint(0, 11, (8, 6), generator=g), torch.randint(0, 11, (8, 6), generator=g), lm_loss
    x, y = _batches(1, b=48)[0]
    return _model(blocks=blocks).eval(), x, y, F.cross_entropy


def _outputs(blk):
    """The zero block's output-projection parameters by name: its tangent space at the origin."""
    return [n for n, _ in blk.named_parameters() if n.split(".")[0] in ("fc2", "o")]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", ["generic", "orthogonal"])
def test_v_zero_iff_inserted_block_gradient_zero(family, case):
    model, x, _, _ = _family(family)
    model.readout = torch.nn.Identity()  # the loss reads h_L directly: its gradient at h_L is chosen below
    pos, seed = model.num_blocks, 7  # insert on top: the gradient at h_L is the loss's Q
    with torch.no_grad():
        h = model(x)  # (B, …, d)
        psi = block_features(zero_block(model, seed).double().eval(), h)  # (positions, m): the tangent features
    q = torch.randn(h.shape, dtype=torch.float64).reshape(-1, h.shape[-1])
    if case == "orthogonal":  # Q ⟂ span(Ψ): V must be 0 and so must the new block's gradient
        q = q - psi @ torch.linalg.pinv(psi) @ q
    q = q.reshape(h.shape)
    loss_fn = lambda out: (out * q).sum()  # noqa: E731  (mean-loss gradient at h_L = Q)
    blk, grads = _inserted_grads(model, pos, seed, x, loss_fn)
    sig = activation_gradients(model, [(x, None)], feature_fn=zero_block_features(model, lambda p: seed),
                               loss_fn=lambda out, y: loss_fn(out))
    outs = _outputs(blk)
    v = sig["V"][pos]
    gnorm = sum(grads[n].norm() ** 2 for n in outs).sqrt().item()
    others = max(g.abs().max().item() for n, g in grads.items() if n not in outs)
    print(f"{family} {case}: V = {v:.3e}, ‖∂L/∂({', '.join(outs)})‖ = {gnorm:.3e}, max other grad = {others:.1e}, "
          f"AG = {sig['AG'][pos]:.3e}, {psi.shape[1]} tangent features")
    assert others == 0.0  # only the output projections move at the origin: the tangent space is theirs
    assert v <= sig["AG"][pos] + 1e-12
    if case == "orthogonal":
        assert v < 1e-11 and gnorm < 1e-11  # float64 rounding of a sum over B·T positions
    else:
        assert v > 1e-3 and gnorm > 1e-3


@pytest.mark.parametrize("family", FAMILIES)
def test_one_small_step_on_the_inserted_block_matches_first_order(family):
    model, x, y, loss_fn = _family(family)
    for pos in range(model.num_blocks + 1):
        grown = insert_zero_block(model, pos, seed=11 + pos).eval()
        blk = grown.blocks[pos]
        params = [p for n, p in blk.named_parameters() if n in _outputs(blk)]
        loss = loss_fn(grown(x), y)
        grads = torch.autograd.grad(loss, params)
        eta = 1e-8  # small enough that curvature (the second-order term) is below the 1e-4 tolerance
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p -= eta * g
            after = loss_fn(grown(x), y)
        pred = -eta * sum(g.norm() ** 2 for g in grads)
        ratio = ((after - loss) / pred).item()
        print(f"{family} insert at {pos}: actual Δloss / first-order prediction = {ratio:.8f}")
        assert ratio == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_matched_insertion_change_is_minus_alpha_b_v_squared(family):
    model, x, y, loss_fn = _family(family)
    batch = [(x, y)]
    for pos in range(model.num_blocks + 1):
        seed = 200 + pos
        feats = zero_block_features(model, lambda p, s=seed: s)
        v = activation_gradients(model, batch, feature_fn=feats, loss_fn=loss_fn)["V"][pos]
        res = gradient_matched(model, batch, pos, alpha=1e-8, seed=seed, loss_fn=loss_fn)  # small: first order
        pred = -1e-8 * x.shape[0] * v**2
        print(f"{family} position {pos}: matched Δloss {res['delta']:.6e}, −α·B·V² {pred:.6e}")
        assert res["delta"] == pytest.approx(pred, rel=1e-4)


@pytest.mark.parametrize("name", ["bp", "fa", "kp", "usf", "dfa", "fa-stream", "ep"])
def test_growth_keeps_existing_feedback_and_draws_the_new_block(name):
    model, (x, y) = _model(blocks=3).float(), _batches(1)[0]
    x = x.float()
    method = build_method(name, model, 3)
    states, before = method.measure_credits(model, x, y)  # lazy methods draw their feedback here
    old = method.state_dict()
    pos = 2  # the new block becomes block 2 (1-based); old blocks 2, 3 become 3, 4
    grown_model = insert_zero_block(model, pos - 1, seed=5, inplace=False)
    grown = method.grown(grown_model, pos, seed=99)
    _, after = grown.measure_credits(grown_model, x, y)
    new = grown.state_dict()
    shift = {"block2": "block3", "block3": "block4", "B2": "B3", "B3": "B4"}
    for k, v in old.items():
        head, _, rest = k.partition(".")
        k2 = shift.get(head, head) + ("." + rest if rest else "")
        assert torch.equal(new[k2], v), k
    added = set(new) - {shift.get(k.partition(".")[0], k.partition(".")[0]) + k[len(k.partition(".")[0]):]
                        for k in old}
    if old:
        assert added, name  # the new block (or stream position) got its own feedback
        for k in added:
            assert not any(torch.equal(new[k], v) for v in old.values() if v.shape == new[k].shape), k
    # the network's function is unchanged; under BP and DFA so is every old position's credit
    assert torch.equal(grown_model(x), model(x))
    if name in ("bp", "dfa"):
        for i, c in enumerate(before):
            j = i if i < pos else i + 1
            assert torch.allclose(after[j], c, atol=0, rtol=0) or (c - after[j]).abs().max() < 1e-6, i
    print(f"{name}: {len(old)} feedback tensors kept, {len(new) - len(old)} drawn for the new block")


def test_a_method_with_an_auxiliary_network_refuses_to_grow():
    model = _model(blocks=2).float()
    method = build_method("sb", model, 0)
    with pytest.raises(UsageError, match="cannot grow"):
        method.grown(insert_zero_block(model, 1, 0), 2, 1)


def test_saturation_and_grow_under_fa_and_dfa(tmp_path, capsys):
    out = tmp_path / "sat"
    common = ["--dataset", "mnist1d", "--d-hidden", "16", "--epochs", "1", "--batch-size", "256"]
    assert main(["saturation", "--family", "resmlp", "--method", "fa", "--extra", "0", "1",
                 "--analysis-batches", "2", *common, "--out", str(out)]) == 0
    doc = json.loads((out / "saturation_resmlp_fa_mnist1d.json").read_text())
    for rec in doc["runs"].values():
        assert rec["recipe"]["method"] == "fa" and rec["signal"]["credit"]["method"] == "fa"
        assert len(rec["signal"]["credit"]["AG"]) == rec["blocks"] + 1 == len(rec["signal"]["V"])
        assert all(v <= a + 1e-9 for v, a in zip(rec["signal"]["V"], rec["signal"]["AG"], strict=True))
    assert "AGmax from fa's credit" in (out / "saturation_resmlp_fa_mnist1d.md").read_text()
    assert (out / "saturation_resmlp_fa_mnist1d.png").stat().st_size > 0
    gout = tmp_path / "grow"
    assert main(["grow", "--family", "resmlp", "--method", "dfa", "--extra", "2", "--insert-at", "1", "2",
                 *common[:-2], "--epochs", "2", "--batch-size", "256", "--out", str(gout)]) == 0
    gdoc = json.loads((gout / "grow_resmlp1+2_dfa_mnist1d.json").read_text())
    g, s = gdoc["runs"]["grown"], gdoc["runs"]["scratch"]
    assert g["final"]["blocks"] == s["final"]["blocks"] == 3 and g["recipe"]["num_blocks"] == 1
    assert len(g["history"]) == len(s["history"]) == 2
    assert "under dfa" in (gout / "grow_resmlp1+2_dfa_mnist1d.md").read_text()
    capsys.readouterr()
    assert main(["saturation", "--method", "fa", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--family resmlp" in err[0] and not (tmp_path / "x").exists()
    assert main(["grow", "--family", "resmlp", "--method", "cb", "--dataset", "mnist1d",
                 "--out", str(tmp_path / "y")]) == 2
    assert "cannot grow" in capsys.readouterr().err and not (tmp_path / "y").exists()


def test_diverged_depth_is_marked_not_measured():
    from depthaudit.report.saturation import saturation_md

    rec = {"blocks": 2, "params": 10, "status": "diverged", "config": {"extra": 1}, "signal": None, "matched": None,
           "final": {"test_acc": None, "test_loss": None}}
    ok = copy.deepcopy(rec) | {"status": "ok", "blocks": 1, "config": {"extra": 0},
                               "signal": {"AGmax": 0.1, "V": [0.05], "AG": [0.1], "low_signal": False},
                               "matched": {"delta": [-1e-6]}, "final": {"test_acc": 0.5, "test_loss": 1.0}}
    md = saturation_md({"identity": {}, "runs": {"a": ok, "b": rec}})
    print(md)
    assert "**diverged**" in md and "not measured" in md


class _Last(torch.nn.Module):
    """A ResNet whose 'logits' are its last stream state, so a test chooses the gradient there."""

    def __init__(self, m):
        super().__init__()
        self.m, self.blocks = m, m.blocks

    def forward(self, x, return_states=False):
        _, states = self.m(x, return_states=True)
        return (states[-1], states) if return_states else states[-1]


def _resnet():
    from depthaudit.models.resnet import ResNetCIFAR

    torch.manual_seed(0)
    model = ResNetCIFAR(4, 1, seed=0, in_ch=3).double().eval()
    g = torch.Generator().manual_seed(2)
    return model, torch.randn(6, 3, 8, 8, generator=g, dtype=torch.float64), torch.randint(0, 4, (6,), generator=g)


@pytest.mark.parametrize("case", ["generic", "orthogonal"])
def test_resnet_v_zero_iff_the_inserted_bn_gradient_is_zero(case):
    """ResNet's one tangent space is the one grow inserts: bn2's γ, β per channel (branch = γ_c·n_c + β_c)."""
    from depthaudit.depth.growth import resnet_value

    model, x, _ = _resnet()
    pos, seed = model.num_blocks if hasattr(model, "num_blocks") else len(model.blocks), 9
    with torch.no_grad():
        h = model(x, return_states=True)[1][pos]  # (B, C, H, W)
        n = model.zero_block(pos, seed).eval().normalized(h)
    mask = (h > 0).double()
    q = torch.randn(h.shape, dtype=torch.float64) * mask  # supported where the ReLU after the sum passes
    if case == "orthogonal":  # per channel: remove q's part in span{n_c ⊙ mask, mask}: then ⟨q, n_c⟩ = ⟨q, 1⟩ = 0
        for c in range(h.shape[1]):
            basis = torch.stack([(n * mask)[:, c].flatten(), mask[:, c].flatten()], 1)
            qc = q[:, c].flatten()
            q[:, c] = (qc - basis @ torch.linalg.pinv(basis) @ qc).reshape(q[:, c].shape)
    grown = model.insert_zero_block(pos, seed).eval()
    blk = grown.blocks[pos]
    (q * grown(x, return_states=True)[1][pos + 1]).sum().backward()
    outs = ["bn2.weight", "bn2.bias"]
    grads = {k: p.grad for k, p in blk.named_parameters()}
    gnorm = sum(grads[k].norm() ** 2 for k in outs).sqrt().item()
    others = max(g.abs().max().item() for k, g in grads.items() if k not in outs)
    sig = activation_gradients(_Last(model), [(x, None)], loss_fn=lambda out, y: (out * q).sum(),
                               value_fn=resnet_value(model, lambda p: seed))
    v = sig["V"][pos]
    print(f"resnet {case}: V = {v:.3e}, ‖∂L/∂(bn2 γ, β)‖ = {gnorm:.3e}, max other grad = {others:.1e}, "
          f"AG = {sig['AG'][pos]:.3e}")
    assert others == 0.0  # conv1, bn1, conv2 reach the output only through γ = 0
    assert v <= sig["AG"][pos] + 1e-12
    if case == "orthogonal":
        assert v < 1e-11 and gnorm < 1e-11
    else:
        assert v > 1e-3 and gnorm > 1e-3


def test_resnet_one_step_and_matched_insertion_follow_v():
    """First order with the ReLU after the residual sum: where the stream is exactly 0 the change is one-sided.

    The prediction is ``⟨Q, relu(h + Δb) − h⟩`` for the branch output ``Δb`` (exact to first order, kinks included);
    V (the masked part, what autograd and V see) gives the matched insertion's change as ``−α·B·V²`` plus the
    one-sided kink term ``⟨Q, relu(Δb)·[h = 0]⟩``.
    """
    from depthaudit.depth.growth import resnet_value

    model, x, y = _resnet()
    logits, states = model(x, return_states=True)
    qs = torch.autograd.grad(F.cross_entropy(logits, y), states)
    for pos in range(len(model.blocks) + 1):
        h, q = states[pos].detach(), qs[pos]
        grown = model.insert_zero_block(pos, seed=30 + pos).eval()
        blk = grown.blocks[pos]
        loss = F.cross_entropy(grown(x), y)
        gw, gb = torch.autograd.grad(loss, [blk.bn2.weight, blk.bn2.bias])
        with torch.no_grad():
            blk.bn2.weight -= 1e-8 * gw
            blk.bn2.bias -= 1e-8 * gb
            db = blk.bn2(blk.conv2(blk.features(h)))  # the branch after the step (it was exactly 0)
            ratio = ((F.cross_entropy(grown(x), y) - loss) / (q * (F.relu(h + db) - h)).sum()).item()
        v = activation_gradients(model, [(x, y)], value_fn=resnet_value(model, lambda p, s=30 + pos: s))["V"][pos]
        res = gradient_matched(model, [(x, y)], pos, alpha=1e-6, seed=30 + pos, keep=True)
        fitted = res["grown"].blocks[pos]
        with torch.no_grad():
            db = fitted.bn2(fitted.conv2(fitted.features(h)))
            kink = (q * F.relu(db) * (h == 0)).sum().item()
        pred = -1e-6 * x.shape[0] * v**2 + kink
        print(f"resnet position {pos}: one step Δloss / first order {ratio:.8f}; matched Δloss {res['delta']:.6e}, "
              f"−α·B·V² + kink {pred:.6e} (kink {kink:.2e})")
        assert ratio == pytest.approx(1.0, abs=1e-4)
        assert res["delta"] == pytest.approx(pred, rel=1e-3)


def test_separated_test_decides_at_delta_plus_t():
    from depthaudit.depth.growth import separated_test

    sig = {"AGmax": 0.012, "AG": [0.004, 0.012], "AG_per_batch": [[0.004, 0.010], [0.004, 0.014]]}
    given = separated_test(sig, delta=0.005, margin=0.005, n_examples=256)
    assert given["decision"] == "not saturated" and given["threshold"] == pytest.approx(0.010)  # 0.012 > 0.010
    assert separated_test(sig, delta=0.005, margin=0.008, n_examples=256)["decision"] == "saturated"  # ≤ 0.013
    auto = separated_test(sig, delta=0.005, margin=None, n_examples=256)  # t = 2·SE of [0.010, 0.014]
    assert auto["margin"] == pytest.approx(2 * (0.002 * 2**0.5) / 2**0.5) and auto["decision"] == "not saturated"
    one = separated_test({"AGmax": 0.1, "AG": [0.1], "AG_per_batch": [[0.1]]}, 0.005, None, 128)
    assert one["decision"] is None and "give --margin" in one["margin_rule"]


def test_saturation_measures_held_out_by_default_and_reports_the_test(tmp_path, capsys):
    out = tmp_path / "s"
    common = ["--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "16", "--epochs", "1", "--extra", "0",
              "--analysis-batches", "3", "--batch-size", "64"]
    assert main(["saturation", *common, "--out", str(out)]) == 0
    rec = next(iter(json.loads((out / "saturation_resmlp_bp_mnist1d.json").read_text())["runs"].values()))
    t = rec["signal"]["test"]
    assert rec["config"]["analysis_split"] == "test" and rec["signal"]["split"] == "test"
    assert t["n_examples"] == 192 and t["delta"] == 5e-3 and t["decision"] in ("saturated", "not saturated")
    md = (out / "saturation_resmlp_bp_mnist1d.md").read_text()
    assert "held-out (test split)" in md and "H0 Γ ≤ δ" in md
    out2 = tmp_path / "s2"
    assert main(["saturation", *common, "--analysis-split", "train", "--delta", "0.5", "--margin", "0.1",
                 "--out", str(out2)]) == 0
    rec2 = next(iter(json.loads((out2 / "saturation_resmlp_bp_mnist1d.json").read_text())["runs"].values()))
    t2 = rec2["signal"]["test"]
    assert rec2["signal"]["split"] == "train" and t2["threshold"] == pytest.approx(0.6)
    assert t2["margin_rule"].startswith("given")
    assert rec2["signal"]["AG"] != rec["signal"]["AG"]  # another split, other batches
