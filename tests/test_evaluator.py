"""The drop-in evaluator and the user-loop monitor (depthaudit.evaluator): laws against independent references."""

import copy
import json
import math
from importlib.resources import files

import jsonschema
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from depthaudit.config import TrainConfig
from depthaudit.data.base import DataBundle
from depthaudit.diagnostics import (
    CreditCosine,
    ReferenceNorm,
    RobustCosine,
    Snapshot,
    StreamNorms,
    audit_monitor,
    audit_tracker,
    robust_cosine,
)
from depthaudit.errors import UsageError
from depthaudit.evaluator import CreditEvaluator, TrainingMonitor, capture_credits, frozen_twin
from depthaudit.loop import build, cosine_lr, make_optimizer, train
from depthaudit.methods import build_method
from depthaudit.models import ResidualAdapter, build_model
from depthaudit.runner import probe_batches, tracking_plan
from depthaudit.seeds import derive_seed
from depthaudit.verdicts import Thresholds


def _batches(n=2, b=64, din=40, seed=0, classes=10):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(b, din, generator=g), torch.randint(0, classes, (b,), generator=g)) for _ in range(n)]


# ---- a user's own networks, written without depthaudit -------------------------------------------------------


class FAFunction(torch.autograd.Function):
    """Linear ``y = x Wᵀ + b`` whose backward sends ``g B`` to the input instead of ``g W`` (Lillicrap's FA)."""

    @staticmethod
    def forward(ctx, x, weight, bias, feedback):
        ctx.save_for_backward(x, feedback)
        return x @ weight.T + bias

    @staticmethod
    def backward(ctx, g):
        x, feedback = ctx.saved_tensors
        return g @ feedback, g.T @ x, g.sum(0), None


class FALinear(nn.Linear):
    """An ``nn.Linear`` subclass with a fixed feedback matrix (the biotorch design)."""

    def __init__(self, fin, fout):
        super().__init__(fin, fout)
        self.register_buffer("feedback", torch.zeros(fout, fin))

    def forward(self, x):
        return FAFunction.apply(x, self.weight, self.bias, self.feedback)


class FAOnly(nn.Module):
    """The same FA linear, but not an ``nn.Linear`` subclass: no BP twin can be derived from it."""

    def __init__(self, lin: FALinear):
        super().__init__()
        self.lin = lin

    def forward(self, x):
        return FAFunction.apply(x, self.lin.weight, self.lin.bias, self.lin.feedback)


class UserBlock(nn.Module):
    def __init__(self, d, linear=nn.Linear):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), linear(d, d), linear(d, d)

    def forward(self, h):
        return self.fc2(F.gelu(self.fc1(self.ln(h))))


class UserResMLP(nn.Module):
    """The reference ResMLP's architecture as a user writes it; ``forward`` is the user's own."""

    def __init__(self, din, d, L, classes, linear=nn.Linear):
        super().__init__()
        self.embed = linear(din, d)
        self.blocks = nn.ModuleList(UserBlock(d, linear) for _ in range(L))
        self.out_ln, self.out_head = nn.LayerNorm(d), linear(d, classes)

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = h + b(h)
        return self.out_head(self.out_ln(h))


def _user_fa_twin_of(ref_model, method, linear=FALinear):
    """A UserResMLP with ``ref_model``'s weights and ``method``'s (depthaudit fa) feedback in its FA layers."""
    d, L = ref_model.embed.proj.out_features, len(ref_model.blocks)
    net = UserResMLP(ref_model.embed.proj.in_features, d, L, ref_model.readout.out_head.out_features, linear)
    with torch.no_grad():
        net.embed.weight.copy_(ref_model.embed.proj.weight)
        net.embed.bias.copy_(ref_model.embed.proj.bias)
        for i, (mine, theirs) in enumerate(zip(net.blocks, ref_model.blocks, strict=True), start=1):
            mine.ln.load_state_dict(theirs.ln.state_dict())
            for k in ("fc1", "fc2"):
                getattr(mine, k).weight.copy_(getattr(theirs, k).weight)
                getattr(mine, k).bias.copy_(getattr(theirs, k).bias)
                getattr(mine, k).feedback.copy_(method.feedback[f"block{i}.{k}"])
        net.out_ln.load_state_dict(ref_model.readout.out_ln.state_dict())
        net.out_head.weight.copy_(ref_model.readout.out_head.weight)
        net.out_head.bias.copy_(ref_model.readout.out_head.bias)
        net.out_head.feedback.copy_(method.feedback["readout.out_head"])
    return net


def _adapt(net):
    return ResidualAdapter(net, embed="embed", blocks="blocks", readout=["out_ln", "out_head"])


class ConvBlock(nn.Module):
    """A conv block that adds its own skip connection, with BatchNorm and dropout (state and randomness)."""

    def __init__(self, c):
        super().__init__()
        self.norm, self.conv, self.drop = nn.BatchNorm1d(c), nn.Conv1d(c, c, 3, padding=1), nn.Dropout(0.2)

    def forward(self, h):
        return h + self.drop(self.conv(torch.relu(self.norm(h))))


class ConvNet(nn.Module):
    def __init__(self, c=8, L=3, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Unflatten(1, (1, -1)), nn.Conv1d(1, c, 3, padding=1))
        self.layers = nn.ModuleList(ConvBlock(c) for _ in range(L))
        self.head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(c, classes))

    def forward(self, x):
        h = self.stem(x)
        for b in self.layers:
            h = b(h)
        return self.head(h)


def _conv_adapter(net):
    return ResidualAdapter(net, embed="stem", blocks="layers", readout="head", block_includes_residual=True)


def _independent_bp(model, x, y):
    """Per-example BP credits by plain autograd: ∂(Σ_b ℓ_b)/∂h_l through the model's own forward."""
    logits, states = model(x, return_states=True)
    return torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum"), states)


# ---- laws ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["resmlp", "vit", "user_conv"])
def test_bp_captured_credit_equals_autograd_and_gamma_is_one(kind):
    torch.manual_seed(0)
    if kind == "resmlp":
        model, batches = build_model("resmlp", (40,), 10, 32, 4, None, 0), _batches()
    elif kind == "vit":  # token states (B, T, d); D1/D2 on the cls token, as the CLI reads them
        model, batches = build_model("vit", (40,), 10, 16, 2, 2, 0), _batches()
    else:
        model, batches = _conv_adapter(ConvNet()), _batches(din=24)
    ev = CreditEvaluator(model, batches)  # credit captured from the model's own (BP) backward
    out = ev()
    assert out["evaluator"]["reference"] == "autograd" and out["evaluator"]["custom_backward"] == []
    model.eval()  # the evaluator measures in eval mode (BatchNorm's running statistics)
    ind = [torch.cat(t) for t in zip(*(_independent_bp(model, x, y) for x, y in batches), strict=True)]
    got = ev.last_snapshot.credits
    diff = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(got, ind, strict=True))
    gam = out["credit_cosine"]["per_layer"]
    print(f"{kind}: captured vs autograd credit, max rel diff {diff:.2e}; Γ_l {gam}; "
          f"max |Γ_l - 1| {max(abs(g - 1) for g in gam):.2e}")
    assert diff < 1e-5
    assert max(abs(g - 1) for g in gam) < 1e-6
    assert max(abs(g - 1) for g in out["robust_cosine"]["per_layer"]) < 1e-12
    if kind != "user_conv":  # D1/D2 as the CLI's diagnostics measure them on depthaudit's own BP probe
        p = Snapshot(model, build_method("bp", model, 0), batches)
        bp_ref = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(got, p.reference, strict=True))
        s, r = StreamNorms().compute(p), ReferenceNorm().compute(p)
        print(f"vs depthaudit bp_credits: max rel diff {bp_ref:.2e}; ρ {out['stream']['rho']} vs {s['rho']}; "
              f"‖g_L‖ {out['reference']['g_L']:.6e} vs {r['g_L']:.6e}")
        assert bp_ref < 1e-5
        assert out["stream"]["norms"] == s["norms"] and out["stream"]["view"] == s["view"]  # same states, same view
        assert out["reference"]["g_L"] == pytest.approx(r["g_L"], rel=1e-6)


def test_fa_as_custom_autograd_layers_gives_depthaudits_fa_gamma_on_the_same_weights():
    ref_model = build_model("resmlp", (40,), 10, 32, 4, None, 0)
    method = build_method("fa", ref_model, 0)
    batches = _batches()
    net = _user_fa_twin_of(ref_model, method)
    user = _adapt(net)
    x0 = batches[0][0]
    assert torch.allclose(net(x0), ref_model(x0), atol=1e-6)  # same weights, same function
    out = CreditEvaluator(user, batches)()  # captured through FAFunction's backward; reference: the BP twin
    ev = out["evaluator"]
    p = Snapshot(ref_model, method, batches)  # depthaudit's own audit measurement of method fa
    theirs, theirs_rob = CreditCosine().compute(p)["per_layer"], RobustCosine().compute(p)["per_layer"]
    mine, mine_rob = out["credit_cosine"]["per_layer"], out["robust_cosine"]["per_layer"]
    d_gam = max(abs(a - b) for a, b in zip(mine, theirs, strict=True))
    d_rob = max(abs(a - b) for a, b in zip(mine_rob, theirs_rob, strict=True))
    print(f"Γ_l captured {[round(v, 5) for v in mine]}\nΓ_l depthaudit fa {[round(v, 5) for v in theirs]}\n"
          f"max |ΔΓ_l| {d_gam:.2e}, max |Δrobust_l| {d_rob:.2e}, twin logits rel diff {ev['twin_logits_max_diff']}")
    assert d_gam < 1e-5 and d_rob < 1e-5
    assert ev["reference"] == "twin" and ev["custom_backward"] == ["FAFunctionBackward"]
    assert min(mine[:-1]) < 0.9  # a real FA: not BP below the top
    assert out["reference"]["g_L"] == pytest.approx(ReferenceNorm().compute(p)["g_L"], rel=1e-5)
    assert out["stream"]["rho"] == pytest.approx(StreamNorms().compute(p)["rho"], rel=1e-6)


def _fa_block_grad_by_hand(blk, h, g):
    """FA's parameter gradient of one reference block (LN → fc1 → GELU → fc2) for output gradient ``g``, by hand.

    Every ``Wᵀ`` on the way down replaced by the block's feedback ``B``; GELU and LN derivatives exact.
    """
    n_hat = (h - h.mean(1, keepdim=True)) / torch.sqrt(h.var(1, unbiased=False, keepdim=True) + 1e-5)
    u = n_hat * blk.ln.weight + blk.ln.bias
    a1 = u @ blk.fc1.weight.T + blk.fc1.bias
    z = F.gelu(a1)
    dgelu = 0.5 * (1 + torch.erf(a1 / math.sqrt(2))) + a1 * torch.exp(-a1 ** 2 / 2) / math.sqrt(2 * math.pi)
    da1 = (g @ blk.fc2.feedback) * dgelu
    du = da1 @ blk.fc1.feedback
    return [(du * n_hat).sum(0), du.sum(0), da1.T @ u, da1.sum(0), g.T @ z, g.sum(0)]


def test_update_cosine_of_a_captured_method_is_its_own_parameter_gradient_against_bp():
    ref_model = build_model("resmlp", (40,), 10, 32, 3, None, 2)
    method = build_method("fa", ref_model, 2)
    batches = _batches(seed=3)
    net = _user_fa_twin_of(ref_model, method)
    out = CreditEvaluator(_adapt(net), batches)()
    p = Snapshot(ref_model, method, batches)  # depthaudit's fa credits and the exact reference, per example
    want = []
    for i, (blk, ref_blk) in enumerate(zip(net.blocks, ref_model.blocks, strict=True)):
        fa, bp, start = None, None, 0
        for x, _ in batches:
            n = x.shape[0]
            h = p.states[i][start:start + n]
            with torch.no_grad():
                g = _fa_block_grad_by_hand(blk, h, p.credits[i + 1][start:start + n] / n)
            bp_g = torch.autograd.grad((ref_blk(h) * p.reference[i + 1][start:start + n] / n).sum(),
                                       [ref_blk.ln.weight, ref_blk.ln.bias, *ref_blk.fc1.parameters(),
                                        *ref_blk.fc2.parameters()])
            fa = g if fa is None else [a + b for a, b in zip(fa, g, strict=True)]
            bp = bp_g if bp is None else [a + b for a, b in zip(bp, bp_g, strict=True)]
            start += n
        want.append(robust_cosine(torch.cat([t.flatten() for t in fa]), torch.cat([t.flatten() for t in bp])))
    got = out["update_cosine"]["per_block"]
    d = max(abs(a - b) for a, b in zip(got, want, strict=True))
    print(f"update cosine per block, evaluator {[round(v, 5) for v in got]}, by hand {[round(v, 5) for v in want]}; "
          f"max |diff| {d:.1e}")
    assert d < 1e-5 and min(got) < 0.95  # FA's own within-block update is not BP's
    bp_out = CreditEvaluator(ref_model, batches)()  # plain autograd (BP): the update is BP's own
    assert max(abs(c - 1) for c in bp_out["update_cosine"]["per_block"]) < 1e-12


def test_custom_backward_without_a_derivable_twin_is_refused_then_a_reference_callable_audits_it():
    ref_model = build_model("resmlp", (40,), 10, 16, 2, None, 1)
    method = build_method("fa", ref_model, 1)
    net = _user_fa_twin_of(ref_model, method)
    net.blocks[0].fc1 = FAOnly(net.blocks[0].fc1)  # one FA layer the twin cannot switch to its base class
    batches = _batches()
    with pytest.raises(UsageError, match=r"FAFunctionBackward.*reference="):
        CreditEvaluator(_adapt(net), batches)()

    def exact(states, logits, y):  # the user's own exact reference: BP through depthaudit's model, same weights
        h = states[0].clone().requires_grad_()
        hs = [h]
        for blk in ref_model.blocks:
            h = h + blk(h)
            hs.append(h)
        return [g * y.shape[0] for g in torch.autograd.grad(F.cross_entropy(ref_model.readout(h), y), hs)]

    out = CreditEvaluator(_adapt(net), batches, reference=exact)()
    theirs = CreditCosine().compute(Snapshot(ref_model, method, batches))["per_layer"]
    d = max(abs(a - b) for a, b in zip(out["credit_cosine"]["per_layer"], theirs, strict=True))
    print("reference callable: max |ΔΓ_l| vs depthaudit fa", d)
    assert out["evaluator"]["reference"] == "callable" and d < 1e-5


def test_callable_credit_is_measured_like_the_clis_method():
    model = build_model("resmlp", (40,), 10, 16, 3, None, 0)
    method = build_method("dfa", model, 5)
    batches = _batches()
    # DFA from its definition, written here: c_l = B_l e with depthaudit's fixed B_l (drawn on first use)
    _ = Snapshot(model, method, batches).credits

    def dfa(states, logits, y):
        e = torch.softmax(logits, -1) - F.one_hot(y, logits.shape[-1]).to(logits)
        return [(e @ method.feedback[f"B{i}"].T).view_as(h) for i, h in enumerate(states)]

    out = CreditEvaluator(model, batches, credit=dfa)()
    theirs = CreditCosine().compute(Snapshot(model, method, batches))["per_layer"]
    d = max(abs(a - b) for a, b in zip(out["credit_cosine"]["per_layer"], theirs, strict=True))
    print("callable DFA vs depthaudit dfa: max |ΔΓ_l|", d)
    assert d < 1e-6


def _snapshot(model, opt):
    return {"params": [p.detach().clone() for p in model.parameters()],
            "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
            "buffers": [b.clone() for b in model.buffers()], "opt": copy.deepcopy(opt.state_dict()),
            "rng": torch.get_rng_state().clone(), "training": [m.training for m in model.modules()]}


def _same(a, b) -> list[str]:
    bad = []
    for k in ("params", "grads", "buffers"):
        for i, (u, v) in enumerate(zip(a[k], b[k], strict=True)):
            if (u is None) != (v is None) or (u is not None and not torch.equal(u, v)):
                bad.append(f"{k}[{i}]")
    sa, sb = a["opt"]["state"], b["opt"]["state"]
    bad += [f"opt[{i}].{n}" for i in sa for n in sa[i] if not torch.equal(torch.as_tensor(sa[i][n]),
                                                                          torch.as_tensor(sb[i][n]))]
    if not torch.equal(a["rng"], b["rng"]):
        bad.append("rng")
    if a["training"] != b["training"]:
        bad.append("train/eval flags")
    return bad


@pytest.mark.parametrize("eval_mode", [True, False])
def test_evaluator_changes_no_parameter_grad_buffer_optimizer_state_or_rng(eval_mode):
    # a user's model with BatchNorm (buffers) and dropout (RNG), mid-training: grads and AdamW state populated
    def run(measure: bool):
        torch.manual_seed(0)
        net = ConvNet()
        model = _conv_adapter(net)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        batches = _batches(din=24, seed=1)
        mon = TrainingMonitor(model, batches, eval_mode=eval_mode, log=None) if measure else None
        bad = []
        for step in range(4):
            x, y = torch.randn(32, 24), torch.randint(0, 10, (32,))
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            if measure:  # between backward and step: .grad must reach the optimizer untouched
                before = _snapshot(net, opt)
                mon.step(step)
                CreditEvaluator(model, batches, reference="twin", eval_mode=eval_mode)()
                bad += _same(before, _snapshot(net, opt))
            opt.step()
        return [p.detach().clone() for p in net.parameters()] + [b.clone() for b in net.buffers()], bad, mon

    plain, _, _ = run(False)
    measured, bad, mon = run(True)
    print(f"eval_mode={eval_mode}: changed by the evaluator: {bad or 'nothing'}; measured steps "
          f"{[h['epoch'] for h in mon.history]}")
    assert bad == []
    diff = max((a - b).abs().max().item() for a, b in zip(plain, measured, strict=True))
    print("params/buffers after 4 steps, with vs without the monitor: max |diff|", diff)
    assert all(torch.equal(a, b) for a, b in zip(plain, measured, strict=True))  # bitwise: the run is the same run


def _tiny_data(seed=0, n_train=512, n_test=384, din=40, classes=10):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(din, classes, generator=g)
    x = torch.randn(n_train + n_test, din, generator=g)
    y = (x @ w).argmax(1)
    return DataBundle("tiny-teacher", x[:n_train], y[:n_train], x[n_train:], y[n_train:], classes, "test", "0" * 64)


def _cli_run(cfg, data, th, stop_on_flag=False):
    plan = tracking_plan(3, 128, 1, th, stop_on_flag=stop_on_flag)
    batches = probe_batches(data, cfg.seed, 3, 128)
    return train(cfg, data, log=lambda m: None, tracker=audit_tracker(batches, 1, th.eps), monitor=audit_monitor(plan))


def _midpoint_threshold(values):
    """A threshold halfway between two middle values: no value sits within rounding of it."""
    v = sorted(values)
    k = len(v) // 2
    return (v[k - 1] + v[k]) / 2


def _user_loop(cfg, data, th, credit, stop_on_flag):
    """The user's loop: the recipe written out by hand, the monitor two lines in it."""
    model, method = build(cfg, data)
    opt = make_optimizer(model, cfg)
    batches = probe_batches(data, cfg.seed, 3, 128)
    mon = TrainingMonitor(model, batches, credit=method if credit == "method" else "capture", thresholds=th,
                          stop_on_flag=stop_on_flag, name=cfg.method, log=None)
    mon.step(0)
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "shuffle"))
    n, steps = data.x_train.shape[0], math.ceil(data.x_train.shape[0] / cfg.batch_size)
    for epoch in range(1, cfg.epochs + 1):
        if mon.should_stop:
            break
        perm = torch.randperm(n, generator=gen)
        for i in range(steps):
            idx = perm[i * cfg.batch_size:(i + 1) * cfg.batch_size]
            for grp in opt.param_groups:
                grp["lr"] = cosine_lr(cfg.lr, (epoch - 1) * steps + i, cfg.epochs * steps)
            opt.zero_grad(set_to_none=True)
            method.step(model, data.x_train[idx], data.y_train[idx])
            opt.step()
        mon.step(epoch)
    return model, mon


@pytest.mark.parametrize("method,credit,stop", [("fa", "method", False), ("bp", "capture", False),
                                                ("fa", "method", True)])
def test_monitor_in_a_plain_user_loop_equals_the_clis_monitor_on_the_same_run(method, credit, stop):
    data = _tiny_data()
    cfg = TrainConfig(dataset="tiny", d_hidden=16, num_blocks=3, method=method, epochs=4, lr=3e-3, seed=7)
    first = _cli_run(cfg, data, Thresholds())  # pick thresholds that fire mid-run, from the run itself
    hist = [first.init_measurement] + [h["probe"] for h in first.history]
    rho, g_l = [p["stream"]["rho"] for p in hist], [p["reference"]["g_L"] for p in hist]
    print("ρ by epoch", rho, "\n‖g_L‖ by epoch", g_l)
    rho_max, g_min = _midpoint_threshold(rho), _midpoint_threshold(g_l)
    th = Thresholds(rho_max=rho_max, eps=1e-8, ref_factor=g_min / 1e-8)
    cli = _cli_run(cfg, data, th, stop)
    model, mon = _user_loop(cfg, data, th, credit, stop)
    mine = [h["probe"] for h in mon.history]
    theirs = [cli.init_measurement] + [h["probe"] for h in cli.history]
    rel = lambda a, b: abs(a - b) / abs(b)  # noqa: E731
    d1 = max(rel(a["stream"]["rho"], b["stream"]["rho"]) for a, b in zip(mine, theirs, strict=True))
    d2 = max(rel(a["reference"]["g_L"], b["reference"]["g_L"]) for a, b in zip(mine, theirs, strict=True))
    dg = max(abs(u - v) for a, b in zip(mine, theirs, strict=True)
             for u, v in zip(a["credit_cosine"]["per_layer"], b["credit_cosine"]["per_layer"], strict=True))
    print(f"{method} credit={credit} stop_on_flag={stop}: thresholds ρ>{rho_max:.6g}, ‖g_L‖<{g_min:.6g}; "
          f"user-loop monitor fired {mon.fired}; CLI fired {cli.monitor['fired']}; measured epochs "
          f"{mon.monitor.measured_epochs} vs {cli.monitor['measured_epochs']}; max rel |Δρ| {d1:.1e}, "
          f"max rel |Δ‖g_L‖| {d2:.1e}, max |ΔΓ_l| {dg:.1e}")
    assert {k: v and v["epoch"] for k, v in mon.fired.items()} == {k: v and v["epoch"] for k, v in
                                                                   cli.monitor["fired"].items()}
    assert any(v is not None and v["epoch"] > 0 for v in mon.fired.values())  # fired mid-run, not only at init
    assert mon.monitor.measured_epochs == cli.monitor["measured_epochs"]
    if credit == "method":  # the CLI's own Snapshot: equal to the bit
        assert mon.monitor.to_dict() == cli.monitor and d1 == 0 and d2 == 0 and dg == 0
    else:  # captured from the model's backward: same states; the reference through one autograd pass
        assert d1 == 0 and d2 < 1e-6 and dg < 1e-6
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), cli.model.parameters(), strict=True))
    if stop:
        assert cli.status == "stopped_flagged" and mon.should_stop
        report = mon.report(test_acc=cli.final["test_acc"], frozen_acc=0.1)
        assert report["methods"][0]["status"] == ["stopped_flagged"]
        assert report["methods"][0]["monitor"]["stopped_at_epoch"] == [cli.final["stopped_at_epoch"]]


def test_report_card_json_and_figures_are_the_clis_and_a_diverged_run_is_reported(tmp_path):
    torch.manual_seed(0)
    net = ConvNet(L=2)
    model = _conv_adapter(net)
    frozen = frozen_twin(net, blocks="layers")
    assert all(not p.requires_grad for p in frozen.layers.parameters())
    assert all(p.requires_grad for p in frozen.head.parameters()) and all(p.requires_grad for p in net.parameters())
    batches = _batches(din=24, seed=2)
    mon = TrainingMonitor(model, batches, schedule=lambda s: s % 2 == 0, name="bp-user", log=None)
    for s in range(5):
        mon.step(s)
    assert [h["epoch"] for h in mon.history] == [0, 2, 4]
    report = mon.report(test_acc=torch.tensor(0.31), frozen_acc=0.22, dataset="noise", budget=4)
    mon.write(tmp_path / "out")
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    schema = json.loads(files("depthaudit.report").joinpath("audit.schema.json").read_text())
    jsonschema.validate(on_disk, schema)
    for f in ("report.md", "cosine_heatmap.png", "scale_checks.png", "depth_utility.png"):
        assert (tmp_path / "out" / f).stat().st_size > 0
    card = mon.card()
    print(card)
    m = report["methods"][0]
    assert "Standard pair vs protocol" in card and "bp-user" in card
    assert m["checks"]["D3"]["value"] == pytest.approx(9.0) and m["checks"]["D3"]["status"] == "PASS"
    assert max(abs(c["mean"] - 1) for c in m["per_layer_cosine"]) < 1e-6
    for acc, fz in ((0.57, 0.55), (0.42, 0.40)):  # walk 15 case 302: an exact 2 pp gap flagged by float rounding
        d3 = mon.report(test_acc=acc, frozen_acc=fz)["methods"][0]["checks"]["D3"]
        assert d3["value"] == 2.0 and d3["status"] == "PASS", d3

    with torch.no_grad():  # the run diverges: a result, reported, not a crash
        net.layers[1].conv.weight.fill_(math.nan)
    mon.step(6)
    report = mon.report(test_acc=0.1, frozen_acc=0.22)
    card = mon.card(report)
    print("\n".join(card.splitlines()[:5]))
    assert report["methods"][0]["status"] == ["diverged"] and "DIVERGED" in card
    assert mon.fired["D1"]["epoch"] == 6  # a non-finite ρ fires D1, as in the CLI's monitor
    assert math.isnan(mon.history[-1]["probe"]["robust_cosine"]["per_layer"][0])  # never a fake 1


def test_robust_cosine_of_non_finite_values_is_nan_not_one():
    nan = torch.tensor([math.nan, 1.0])
    assert math.isnan(robust_cosine(nan, torch.ones(2)))
    assert robust_cosine(torch.ones(2), torch.ones(2)) == pytest.approx(1.0)


def test_bad_inputs_get_one_clear_error_naming_the_fix():
    model = build_model("resmlp", (40,), 10, 16, 2, None, 0)
    b = _batches()
    with pytest.raises(UsageError, match="ResidualAdapter"):
        CreditEvaluator(nn.Linear(3, 3), b)
    with pytest.raises(UsageError, match="unequal sizes"):
        CreditEvaluator(model, [b[0], (b[1][0][:10], b[1][1][:10])])
    with pytest.raises(UsageError, match="no probe batches"):
        CreditEvaluator(model, [])
    with pytest.raises(UsageError, match="one per stream position"):
        CreditEvaluator(model, b, credit=lambda s, lg, y: s[:-1])()
    with pytest.raises(UsageError, match="shaped like h_1"):
        CreditEvaluator(model, b, credit=lambda s, lg, y: [s[0], s[1][:, :3], s[2]])()
    with pytest.raises(UsageError, match="loss_fn returned a float; it must return the batch's mean loss"):
        CreditEvaluator(model, b, loss_fn=lambda logits, y: 1.0)()  # (walk 45 case 97: an AttributeError)
    for bad in (None, 3.0, {"c": 1}):  # (walk 41 case 42: None was a bare TypeError from inside depthaudit)
        with pytest.raises(UsageError, match=f"credit returned a {type(bad).__name__}; it must return a list"):
            CreditEvaluator(model, b, credit=lambda s, lg, y, bad=bad: bad)()
        with pytest.raises(UsageError, match=f"reference returned a {type(bad).__name__}; it must return a list"):
            CreditEvaluator(model, b, reference=lambda s, lg, y, bad=bad: bad)()
    with pytest.raises(UsageError, match="credit="):
        CreditEvaluator(model, b, credit="fa")
    with pytest.raises(UsageError, match="blocks='layers'"):
        frozen_twin(ConvNet())
    with pytest.raises(UsageError, match="schedule"):
        TrainingMonitor(model, b, schedule=5, log=None)
    mon = TrainingMonitor(model, b, log=None)
    with pytest.raises(UsageError, match="measured nothing"):
        mon.report(0.5, 0.4)
    mon.step(3)
    with pytest.raises(UsageError, match="steps must increase"):
        mon.step(2)
    with pytest.raises(UsageError, match="fraction"):
        mon.report(test_acc=55.0, frozen_acc=0.4)
    with pytest.raises(UsageError, match="frozen_twin"):
        mon.report(test_acc=0.5, frozen_acc=4.0)


def test_capture_credits_is_the_per_example_convention():
    model = build_model("studentnet", (40,), 10, 16, 2, None, 0)
    x, y = _batches(1)[0]
    states, logits, credits, nodes = capture_credits(model, x, y)
    ref = _independent_bp(model, x, y)
    d = max((a - b).abs().max().item() for a, b in zip(credits, ref, strict=True))
    print("capture_credits vs sum-loss autograd: max |diff|", d)
    assert nodes == [] and d < 1e-6 and all(not c.requires_grad for c in credits)


def test_biotorch_fa_is_audited_as_it_is_and_matches_depthaudit_fa_with_the_same_b(tmp_path, capsys):
    pytest.importorskip("biotorch", reason="pip install --no-deps biotorch==0.0.16")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.biotorch_fa import main

    res = main(["--epochs", "1", "--d-hidden", "16", "--num-blocks", "2", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    cmp = res["comparison"]
    print(out[-900:])
    assert "Standard pair vs protocol" in out and (tmp_path / "o" / "report.json").exists()
    assert cmp["evaluator"]["reference"] == "twin" and cmp["evaluator"]["twin_logits_max_diff"] == 0
    assert cmp["max_abs_gamma_diff_same_B"] < 1e-5 and max(cmp["credit_max_rel_diff_same_B"]) < 1e-5
    assert cmp["gamma_evaluator_fa_same_B"] == cmp["gamma_depthaudit_fa_same_B"]
    # without the twin the model's own autograd runs biotorch's FA: a "reference" that agrees with FA perfectly
    assert min(cmp["gamma_depthaudit_fa_same_B_without_twin"]) > 1 - 1e-6
    assert max(cmp["gamma_biotorch"][:-1]) < 0.9


def test_the_docs_notebook_cells_run_as_written(tmp_path, monkeypatch):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "python-api.md").read_text()
    cells = [c.split("```", 1)[0] for c in text.split("```python\n")[1:3]]
    torch.manual_seed(0)
    x, y = torch.randn(1280 + 256, 24), torch.randint(0, 10, (1280 + 256,))

    def train_one_epoch(m):
        opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.05)
        for i in range(0, 256, 64):
            opt.zero_grad()
            F.cross_entropy(m(x[1280 + i:1280 + i + 64]), y[1280 + i:1280 + i + 64]).backward()
            opt.step()

    def accuracy(m):
        with torch.no_grad():
            return (m.eval()(x[:1280]).argmax(1) == y[:1280]).float().mean().item()

    ns = {"net": ConvNet(), "x_test": x[:1280], "y_test": y[:1280], "epochs": 2, "train_one_epoch": train_one_epoch,
          "accuracy": accuracy}
    monkeypatch.chdir(tmp_path)
    for cell in cells:
        exec(compile(cell, "docs/python-api.md", "exec"), ns)  # noqa: S102
    assert (tmp_path / "results" / "my_run" / "report.json").exists()
    assert [h["epoch"] for h in ns["mon"].history] == [0, 1, 2] and len(ns["out"]["credit_cosine"]["per_layer"]) == 4


def test_biotorch_sign_symmetry_captured_equals_depthaudit_usf_and_weight_replacing_forward_is_refused():
    pytest.importorskip("biotorch", reason="pip install --no-deps biotorch==0.0.16")
    from biotorch.module.biomodule import BioModule

    from depthaudit.evaluator import bp_twin

    batches = _batches(seed=4)
    model = build_model("resmlp", (40,), 10, 32, 3, None, 3)
    # biotorch's uSF with its Kaiming option scales sign(W) by 1/√(3·fan_in): depthaudit's usf rule, no random B
    opts = {"constrain_weights": False, "gradient_clip": False, "init": "kaiming"}
    BioModule(model, mode="usf", layer_config={"type": "usf", "options": opts})
    cap = CreditEvaluator(model, batches)
    out = cap()
    with bp_twin(model):  # depthaudit's own measurement of usf, with an exact reference
        theirs = Snapshot(model, build_method("usf", model, 0), batches)
        gam = CreditCosine().compute(theirs)["per_layer"]
    d = max(abs(a - b) for a, b in zip(out["credit_cosine"]["per_layer"], gam, strict=True))
    rel = max(((a - b).abs().max() / b.abs().max()).item()
              for a, b in zip(cap.last_snapshot.credits, theirs.credits, strict=True))
    print(f"biotorch usf vs depthaudit usf: Γ_l {[round(v, 4) for v in gam]}, max |ΔΓ_l| {d:.1e}, "
          f"credits max rel diff {rel:.1e}")
    assert out["evaluator"]["reference"] == "twin" and d < 1e-5 and rel < 1e-5
    opts = {**opts, "constrain_weights": True}  # biotorch then replaces each weight Parameter in its forward
    model = build_model("resmlp", (40,), 10, 16, 2, None, 0)
    BioModule(model, mode="fa", layer_config={"type": "fa", "options": opts})
    with pytest.raises(RuntimeError, match="replaced trainable parameters"):
        CreditEvaluator(model, batches)()


def test_a_card_without_a_frozen_twin_reports_gamma_d1_d2_and_marks_d3_not_measured(tmp_path):
    model = build_model("resmlp", (40,), 10, 16, 2, None, 0)
    mon = TrainingMonitor(model, _batches(), log=None, name="mine")
    assert "0 measurements so far" in mon._repr_markdown_()  # in Jupyter before the report
    mon.step(0)
    report = mon.report(test_acc=0.5)
    m = report["methods"][0]
    print(mon.card())
    assert m["checks"]["D3"]["status"] == "NOT MEASURED" and m["checks"]["D3"]["value"] is None
    assert "D3" not in m["flags"] and m["checks"]["D1"]["status"] in ("PASS", "FLAG")
    assert "— NOT MEASURED (—)" in mon.card()
    mon.write(tmp_path / "out")
    schema = json.loads(files("depthaudit.report").joinpath("audit.schema.json").read_text())
    jsonschema.validate(json.loads((tmp_path / "out" / "report.json").read_text()), schema)
    md, page = mon._repr_markdown_(), mon._repr_html_()
    assert md.startswith("# depthaudit audit") and "NOT MEASURED" in md  # Jupyter: the card, like Result
    assert page.startswith("<pre>") and page.count("<img src=\"data:image/png;base64,") == 4  # figures inline
