"""The field's methods (weight mirrors, DRTP, sign-DFA, DKP, PFA, forward gradient) against independent laws."""

import json

import pytest
import torch
import torch.nn.functional as F

from depthaudit.cli import main
from depthaudit.methods import DFA, DRTP, DirectKolenPollack, ForwardGradient, ProductFA, SignDFA, WeightMirror
from depthaudit.methods.forward_grad import forward_gradient
from depthaudit.models import build_model
from depthaudit.recipe import output_error

NEW = ["wm", "drtp", "sign-dfa", "dkp", "pfa", "fg"]


def _setup(seed=0, B=16, d=12, L=3, C=5, din=7):
    torch.manual_seed(seed)
    model = build_model("resmlp", (din,), C, d, L, 2, seed).double()
    x = torch.randn(B, din, dtype=torch.float64)
    y = torch.randint(0, C, (B,))
    return model, x, y


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_sign_dfa_is_dfa_on_the_sign_of_the_error():
    model, x, y = _setup(1)
    dfa, sdfa = DFA(model, 3), SignDFA(model, 3)
    _, cs = sdfa.measure_credits(model, x, y)
    e = torch.softmax(model(x), -1) - F.one_hot(y, 5).double()  # closed-form CE error
    dfa.measure_credits(model, x, y)  # draws the same B (same seed)
    worst = max((c - torch.sign(e) @ dfa.feedback[f"B{i}"].T).abs().max().item() for i, c in enumerate(cs))
    print(f"sign-dfa vs DFA(sign e): max diff {worst:.1e}")
    assert worst < 1e-13


def test_drtp_projects_the_target_and_ignores_the_output_error():
    model, x, y = _setup(2)
    drtp = DRTP(model, 4)
    _, cs = drtp.measure_credits(model, x, y)
    onehot = F.one_hot(y, 5).double()
    worst = max((c + onehot @ drtp.feedback[f"B{i}"].T).abs().max().item() for i, c in enumerate(cs))
    e0 = output_error(model(x), y)
    with torch.no_grad():  # a different readout: another output error, the same states
        model.readout.out_head.weight.normal_()
    e1 = output_error(model(x), y)
    _, cs1 = drtp.measure_credits(model, x, y)
    moved = (e1 - e0).abs().max().item()
    same = max((a - b).abs().max().item() for a, b in zip(cs, cs1, strict=True))
    print(f"drtp vs −y*·Bᵀ: max diff {worst:.1e}; output error moved {moved:.2f}, credit moved {same:.1e}")
    assert worst < 1e-13 and moved > 0.1 and same == 0.0


def test_dkp_with_zero_rate_and_dfas_b_equals_dfa_and_learns_by_the_kp_rule():
    model, x, y = _setup(3)
    dfa, dkp = DFA(model, 5), DirectKolenPollack(model, 99, lr=0.0)
    dfa.measure_credits(model, x, y)
    dkp.load_state_dict(dfa.state_dict())  # exact initial B = DFA's
    model.zero_grad()
    dfa.step(model, x, y)
    g_dfa = _grads(model)
    model.zero_grad()
    dkp.step(model, x, y)
    g_dkp = _grads(model)
    diff = max((g_dfa[k] - g_dkp[k]).abs().max().item() for k in g_dfa)
    print(f"dkp(lr=0, B=DFA's) vs dfa: max grad diff {diff:.1e}")
    assert diff == 0.0
    # one learning step against the rule written out by hand
    dkp2 = DirectKolenPollack(model, 5, lr=0.1, wd=0.01)
    dkp2.load_state_dict(dfa.state_dict())
    logits, states = model(x, return_states=True)
    e = torch.softmax(logits, -1) - F.one_hot(y, 5).double()
    b0 = {k: v.clone() for k, v in dkp2.feedback.items()}
    model.zero_grad()
    dkp2.step(model, x, y)
    worst = 0.0
    for i, h in enumerate(states):
        hand = b0[f"B{i}"] - 0.1 * (torch.einsum("bi,bc->ic", h.detach(), e.detach()) / x.shape[0]
                                    + 0.01 * b0[f"B{i}"])
        worst = max(worst, (dkp2.feedback[f"B{i}"] - hand).abs().max().item())
    print(f"dkp one step vs B − lr(hᵀe/B + wd B): max diff {worst:.1e}")
    assert worst < 1e-13


def _angle(a, b):
    a, b = a.flatten().double(), b.flatten().double()
    return torch.rad2deg(torch.arccos((a @ b / (a.norm() * b.norm())).clamp(-1, 1))).item()


def test_weight_mirror_feedback_converges_to_the_forward_weight():
    model, _, _ = _setup(4)
    wm = WeightMirror(model, 6, rate=0.05, noise=64)
    w = model.blocks[0].fc1.weight  # a linear layer (24 × 12)
    a0 = _angle(wm.feedback["block1.fc1"], w)
    for _ in range(300):
        wm.after_step(model)
    rel = ((wm.feedback["block1.fc1"] - w).norm() / w.norm()).item()
    a1 = _angle(wm.feedback["block1.fc1"], w)
    # stationary spread of the EMA: rel² ≈ rate/(2−rate)·in/noise ≈ 0.0048 → rel ≈ 0.07; allow 0.15
    print(f"weight mirror: angle(B, W) {a0:.1f}° → {a1:.1f}° after 300 mirror steps, ‖B−W‖/‖W‖ = {rel:.3f}")
    assert a0 > 60 and a1 < 10 and rel < 0.15
    # the counter travels with the feedback: a restored copy mirrors the same noise next
    twin = WeightMirror(model, 6, rate=0.05, noise=64)
    twin.load_state_dict(wm.state_dict())
    wm.after_step(model)
    twin.after_step(model)
    assert all(torch.equal(wm.feedback[k], twin.feedback[k]) for k in wm.feedback)


def test_pfa_feedback_is_the_product_and_its_mismatch_decays_as_kp_through_the_expansion():
    model, x, y = _setup(5)
    pfa = ProductFA(model, 7, ratio=4)
    k, w = "block2.fc2", model.blocks[1].fc2.weight
    q, p0 = pfa.expansion[k].clone(), pfa.feedback[k].clone()
    assert q.shape == (w.shape[0], 4 * w.shape[0]) and torch.allclose(pfa.matrix(k, w), q @ p0, atol=0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    m0, w0 = q @ p0, w.detach().clone()
    model.zero_grad()
    pfa.step(model, x, y)
    opt.step()
    pfa.after_step(model, 0.01, 0.1)
    u = w.detach() - w0 + 0.01 * 0.1 * w0  # the step's update without its decoupled decay
    hand = (1 - 0.001) * (m0 - w0) + (q @ q.T - torch.eye(q.shape[0], dtype=q.dtype)) @ u
    diff = (pfa.matrix(k, w) - w.detach() - hand).abs().max().item()
    print(f"pfa: M − W after one step vs (1 − lr·wd)(M₀ − W₀) + (QQᵀ − I)U: max diff {diff:.1e}")
    assert diff < 1e-13 and u.abs().max() > 0


def test_pfa_kept_product_equals_the_papers_rule_applied_step_by_step():
    """The kept ``M`` (ours, for speed) against the rule written out: ``P ← (1 − lr·wd) P + Qᵀ U`` every step,
    ``M = Q P``, over steps with a changing lr (a schedule) and a state read in between (a checkpoint)."""
    model, x, y = _setup(3)
    pfa = ProductFA(model, 11, ratio=3)
    ref = {k: v.clone() for k, v in pfa.feedback.items()}  # P, updated by hand below
    weights = dict(pfa._weights)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    worst = 0.0
    for step, lr in enumerate((0.01, 0.008, 0.005, 0.002, 0.001)):
        for g in opt.param_groups:
            g["lr"] = lr
        before = {k: w.detach().flatten(1).clone() for k, w in weights.items()}
        model.zero_grad()
        pfa.step(model, x, y)
        opt.step()
        pfa.after_step(model, lr, 0.1)
        for k, w in weights.items():
            u = w.detach().flatten(1) - before[k] + lr * 0.1 * before[k]
            ref[k] = (1 - lr * 0.1) * ref[k] + pfa.expansion[k].mT @ u
            m = pfa.matrix(k, w).flatten(1)
            worst = max(worst, (m - pfa.expansion[k] @ ref[k]).abs().max().item())
        if step == 2:  # a checkpoint mid-run: P brought up to date, equal to the hand rule's
            st = pfa.state_dict()
            worst = max(worst, *((st[k] - ref[k]).abs().max().item() for k in ref))
    st = pfa.state_dict()
    worst = max(worst, *((st[k] - ref[k]).abs().max().item() for k in ref))
    print(f"pfa: kept M and synced P vs the rule step by step (5 steps, lr schedule): max diff {worst:.1e}")
    assert worst < 1e-12


def test_forward_gradient_is_unbiased_on_a_quadratic():
    g = torch.Generator().manual_seed(0)
    d, n = 6, 20000
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    a = a @ a.T + torch.eye(d, dtype=torch.float64)
    b = torch.randn(d, generator=g, dtype=torch.float64)
    x = torch.randn(1, d, generator=g, dtype=torch.float64).expand(n, d).contiguous()  # one point, n draws

    def f(z):  # ½ zᵀAz + bᵀz per row, (n,)
        return 0.5 * ((z @ a) * z).sum(1) + z @ b

    true = x[0] @ a + b  # closed-form gradient (A symmetric)
    for kind in ("gaussian", "rademacher"):
        v = torch.randn(n, d, generator=g, dtype=torch.float64) if kind == "gaussian" else \
            torch.randint(0, 2, (n, d), generator=g).double() * 2 - 1
        est = forward_gradient(f, x, v)
        mean, se = est.mean(0), est.std(0) / n**0.5
        z = ((mean - true) / se).abs().max().item()
        print(f"forward gradient ({kind}), {n} draws: max |mean − ∇f| = {(mean - true).abs().max():.3f} "
              f"= {z:.2f} standard errors (tolerance 4.5)")
        assert z < 4.5


def test_forward_gradient_credit_is_jvp_times_tangent_and_unbiased_for_bp():
    model, x, y = _setup(6, B=4)
    logits, states = model(x, return_states=True)
    ref = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum"), states)  # BP credits
    fg = ForwardGradient(model, 8)
    _, cs = fg.measure_credits(model, x, y)
    gen = torch.Generator().manual_seed(8 + 7919)  # the method's draw for step 0, replayed: c = (g·v) v exactly
    worst = 0.0
    for c, g in zip(cs, ref, strict=True):
        v = torch.randn(g.shape, generator=gen, dtype=torch.float64)
        worst = max(worst, (c - (g * v).sum(1, keepdim=True) * v).abs().max().item())
    print(f"fg credit vs (∇ℓ·v)v with autograd's ∇ℓ: max diff {worst:.1e}")
    assert worst < 1e-12
    many = ForwardGradient(model, 9, samples=3000)
    _, avg = many.measure_credits(model, x, y)
    rel = max(((c - g).norm() / g.norm()).item() for c, g in zip(avg, ref, strict=True))
    # E[(g·v)v] = g; with K draws the relative error is about √((d+1)/K) ≈ 0.066 for d = 12: allow 0.2
    print(f"fg, 3000 tangents: max over positions of ‖c − ∇ℓ‖/‖∇ℓ‖ = {rel:.3f}")
    assert rel < 0.2


@pytest.mark.parametrize("name", NEW)
def test_new_method_runs_through_the_audit(name, tmp_path):
    out = tmp_path / "a"
    args = ["audit", "--methods", name, "--epochs", "1", "--d-hidden", "32", "--num-blocks", "2", "--seeds", "1",
            "--probe-batches", "1", "--probe-batch-size", "64", "--out", str(out)]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    (m,) = report["methods"]
    acc = m["standard_pair"]["test_acc"]["mean"]
    print(f"{name}: 1 epoch mnist1d d=32 L=2, test acc {acc:.3f}, Γ per layer "
          f"{[round(c['mean'], 3) for c in m['per_layer_cosine']]}")
    assert m["method"] == name and 0.0 <= acc <= 1.0 and all(c["mean"] is not None for c in m["per_layer_cosine"])


@pytest.mark.parametrize("name", NEW)
def test_a_restored_method_continues_exactly_as_the_original(name):
    """Checkpoint law: state_dict → a fresh instance of the same run (as a resume builds it: the run's seed, its
    draws at step 0) → the same credits and the same next step; without the load they differ."""
    from depthaudit.methods import build_method

    model, x, y = _setup(7)
    twin_model, _, _ = _setup(7)
    a = build_method(name, model, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(2):  # learned state moves (wm, dkp, pfa, fg's counter)
        model.zero_grad()
        a.step(model, x, y)
        opt.step()
        a.after_step(model, 1e-2, 0.1)
    twin_model.load_state_dict(model.state_dict())
    b = build_method(name, twin_model, 1)
    b.measure_credits(twin_model, x[:2], y[:2])  # lazily drawn feedback exists before it is overwritten
    fresh = max((ca - cb).abs().max().item() for ca, cb in zip(a.measure_credits(model, x, y)[1],
                                                                b.measure_credits(twin_model, x, y)[1], strict=True))
    b.load_state_dict(a.state_dict())
    worst = max((ca - cb).abs().max().item() for ca, cb in zip(a.measure_credits(model, x, y)[1],
                                                                b.measure_credits(twin_model, x, y)[1], strict=True))
    for m, meth in ((model, a), (twin_model, b)):  # one more training step each
        m.zero_grad()
        meth.step(m, x, y)
        meth.after_step(m, 1e-2, 0.1)
    sa, sb = a.state_dict(), b.state_dict()
    worst = max(worst, *((sa[k].double() - sb[k].double()).abs().max().item() for k in sa))
    print(f"{name}: restored vs original, credits and state after one more step: max diff {worst:.1e} "
          f"(not restored: credits differ by {fresh:.1e})")
    assert sa.keys() == sb.keys() and worst == 0.0
    assert fresh > 0 or name in ("drtp", "sign-dfa")  # fixed feedback: the same run draws it identically
