"""Laws of issue 34's named options: SB/CB construction choices, the penalty's reduction, the warm-up switch."""

import math
from dataclasses import replace

import pytest
import torch
from _util import exact_remaining

from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.loop import build, train
from depthaudit.methods import BP, DFA
from depthaudit.methods.credit_bridge import CreditBridge
from depthaudit.methods.state_bridge import StateBridge
from depthaudit.models import build_model
from depthaudit.recipe import Penalty, local_update, trace_forward


def _setup(seed=0):
    torch.manual_seed(seed)
    model = build_model("resmlp", (7,), 5, 12, 3, 2, seed).double()
    x, y = torch.randn(16, 7, dtype=torch.float64), torch.randint(0, 5, (16,))
    return model, x, y


@pytest.mark.parametrize("predictor", ["residual", "plain"])
@pytest.mark.parametrize("cond", ["error", "none"])
@pytest.mark.parametrize("credit_at", ["output", "input"])
def test_sb_with_the_exact_predictor_gives_bp_credit_in_every_form(predictor, cond, credit_at):
    model, x, y = _setup()
    sb = StateBridge(model, 0, predictor=predictor, cond=cond, credit_at=credit_at)
    sb.predict = exact_remaining(model)  # G = the true remaining network (whatever the learned predictor's form)
    _, c = sb.measure_credits(model, x, y)
    _, g = BP(model, 0).measure_credits(model, x, y)
    ref = g if credit_at == "output" else [g[0], *g[:-1]]  # input: block l reads the credit at h_{l-1}
    diff = max((a - b).abs().max().item() for a, b in zip(c, ref, strict=True))
    print(f"SB {predictor}/{cond}/{credit_at} with the exact predictor vs BP's credit: max diff {diff:.1e}")
    assert diff < 1e-12


def test_sb_and_cb_forms_build_what_they_say():
    model, x, y = _setup()
    plain = StateBridge(model, 0, predictor="plain", cond="none")
    plain.measure_credits(model, x, y)  # builds the predictor
    assert not plain.predictor.residual and plain.predictor.fc1.in_features == 12 + 16  # LN(h), t_l; no s
    assert plain.predictor.fc2.weight.abs().max() > 0  # default init, not the identity start
    h = torch.randn(4, 12, dtype=torch.float64)
    e = torch.randn(4, 5, dtype=torch.float64)
    assert torch.equal(plain.predictor(h, 1, e), plain.predictor(h, 1, torch.zeros_like(e)))  # s is not read
    res = StateBridge(model, 0)
    res.measure_credits(model, x, y)
    assert torch.equal(res.predictor(h, 1, e), h)  # ours starts as the identity
    cb = CreditBridge(model, 0, cond="none", credit_at="input")
    _, c = cb.measure_credits(model, x, y)
    full = CreditBridge(model, 0, cond="none")
    _, c_out = full.measure_credits(model, x, y)
    assert cb.value.fc1.in_features == 12 + 16
    assert all(torch.equal(a, b) for a, b in zip(c, [c_out[0], *c_out[:-1]], strict=True))


@pytest.mark.parametrize("reduction,factor", [("example", lambda B, n: 1.0), ("element", lambda B, n: 1 / n),
                                              ("example-vs-sum", lambda B, n: 1 / B),
                                              ("element-vs-sum", lambda B, n: 1 / (B * n))])
def test_penalty_reduction_scales_the_penalty_by_its_stated_factor(reduction, factor):
    model, x, y = _setup(1)
    lam = 0.3
    tr = trace_forward(model, x)
    zero = [torch.zeros_like(h) for h in tr.states]  # a zero credit gives a zero surrogate update: penalty alone
    local_update(model, tr, zero, Penalty(lam, "abs", reduction=reduction))
    got = [p.grad.clone() for blk in model.blocks for p in blk.parameters()]
    model.zero_grad(set_to_none=True)
    # independent reference: autograd of the penalty written out, λ · mean_b ‖f_b‖² × the stated factor
    B, n = x.shape[0], tr.outs[0][0].numel()
    ref_loss = sum(lam * factor(B, n) * f.pow(2).sum(1).mean() for f in trace_forward(model, x).outs)
    ref = torch.autograd.grad(ref_loss, [p for blk in model.blocks for p in blk.parameters()])
    diff = max((a - b).abs().max().item() for a, b in zip(got, ref, strict=True))
    print(f"penalty reduction {reduction}: factor {factor(B, n):.3g}, max diff vs autograd {diff:.1e}")
    assert diff < 1e-14 and max(a.abs().max().item() for a in got) > 0
    if reduction == "element":  # literally (f**2).mean() over every element
        lit = torch.autograd.grad(sum(lam * f.pow(2).mean() for f in trace_forward(model, x).outs),
                                  [p for blk in model.blocks for p in blk.parameters()])
        assert max((a - b).abs().max().item() for a, b in zip(got, lit, strict=True)) < 1e-14


def test_penalty_reduction_is_checked_and_canonical_without_a_penalty():
    from depthaudit.errors import UsageError

    with pytest.raises(UsageError, match="penalty.reduction 'mean' not known"):
        TrainConfig(scale_penalty=0.1, penalty_reduction="mean")
    with pytest.warns(UserWarning, match="has no effect without scale_penalty"):  # λ = 0: moot, and said
        assert TrainConfig(penalty_reduction="element").penalty_reduction == "example"
    assert TrainConfig(scale_penalty=0.1, penalty_reduction="element").penalty_reduction == "element"


TINY = dict(dataset="mnist1d", d_hidden=16, num_blocks=2, epochs=2, batch_size=500, device="cpu")


def _weights(run):
    return torch.cat([p.detach().flatten() for p in run.model.parameters()])


def test_warmup_switches_methods_at_exactly_the_stated_step(monkeypatch):
    cfg = TrainConfig(method="bp", warmup="dfa", warmup_fraction=0.3, **TINY)
    data = load_data(cfg.dataset, None, False, torch.device("cpu"))
    total = cfg.epochs * math.ceil(data.x_train.shape[0] / cfg.batch_size)
    seen = []
    for cls in (BP, DFA):
        orig = cls.step

        def spy(self, *a, _orig=orig, _name=cls.name, **k):
            seen.append(_name)
            return _orig(self, *a, **k)

        monkeypatch.setattr(cls, "step", spy)
    train(cfg, data, log=lambda m: None)
    k = round(0.3 * total)
    print(f"warm-up: {total} steps, switch after {k}: {seen.count('dfa')} dfa steps then {seen.count('bp')} bp")
    assert seen == ["dfa"] * k + ["bp"] * (total - k)


def test_warmup_limits_equal_the_methods_alone_bit_for_bit():
    base = TrainConfig(method="bp", **TINY)
    data = load_data(base.dataset, None, False, torch.device("cpu"))
    alone = {m: _weights(train(replace(base, method=m), data, log=lambda s: None)) for m in ("bp", "dfa")}
    all_warm = _weights(train(replace(base, warmup="dfa", warmup_fraction=1.0), data, log=lambda s: None))
    none_warm = _weights(train(replace(base, warmup="dfa", warmup_fraction=0.0), data, log=lambda s: None))
    d1, d0 = (all_warm - alone["dfa"]).abs().max().item(), (none_warm - alone["bp"]).abs().max().item()
    print(f"warm-up fraction 1 vs dfa alone: max diff {d1:.1e}; fraction 0 vs bp alone: {d0:.1e}")
    assert d1 == 0.0 and d0 == 0.0


def test_warmup_spec_is_checked_and_recorded(tmp_path):
    from depthaudit.errors import UsageError

    with pytest.raises(UsageError, match="nope"):
        TrainConfig(warmup="nope")
    cfg = TrainConfig(method="sb", warmup="dfa", warmup_fraction=0.5, **TINY)
    data = load_data(cfg.dataset, None, False, torch.device("cpu"))
    model, method = build(cfg, data)
    assert method.switch == round(0.5 * 2 * math.ceil(data.x_train.shape[0] / 500))
    assert cfg.to_dict()["warmup"] == "dfa" and TrainConfig(**TINY).warmup_fraction == 0.2


def test_published_cells_verdict_and_protocol_gate():
    from depthaudit.report.published_audit import TABLE1, is_protocol, verdict

    # hand-computed: SB 0.205 ± 0.039 → tolerance 0.078; BP 0.615 ± 0.004 → tolerance 2 pp
    assert verdict(0.205 + 0.078, TABLE1["sb"]) == "reproduced"
    assert verdict(0.205 + 0.079, TABLE1["sb"]) == "not (+7.9 pp)"
    assert verdict(0.595, TABLE1["bp"]) == "reproduced" and verdict(0.594, TABLE1["bp"]).startswith("not (-2.1")
    assert verdict(None, TABLE1["bp"]) == "—"
    base = {"dataset": "cifar10", "arch": "resmlp", "variant": "ref", "d_hidden": 256, "num_blocks": 4,
            "augment": "crop+flip", "batch_size": 128, "lr": 0.001, "weight_decay": 0.01, "epochs": 100}
    assert is_protocol(base, 100) and not is_protocol(base, 30)
    assert not is_protocol({**base, "lr": 0.002}, 100) and not is_protocol({**base, "augment": "none"}, 100)


def test_claim_figure_reads_every_stored_row_and_draws(tmp_path):
    from pathlib import Path

    from depthaudit.report.claim import main, points, published_points

    folder = Path(__file__).resolve().parents[1] / "docs" / "results" / "intervene_e30"
    pts = points(folder)
    import json

    doc = json.loads((folder / "intervention.json").read_text())
    want = [(r["method"], d["lambda"], d["test_acc"]["mean"]) for r in doc["rows"] for d in r["by_lambda"]]
    assert [(p["label"], p["lambda"], p["acc"]) for p in pts] == want and len(pts) == 12
    assert {(p["label"], p["lambda"]) for p in published_points()} >= {("sb", 0.0), ("sb", 0.01), ("cb", 0.01)}
    assert main([str(tmp_path / "claim.png"), str(folder)]) == 0
    assert (tmp_path / "claim.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([str(tmp_path / "x.png")]) == 2


def test_claim_points_from_single_cells_read_each_trained_record(tmp_path):
    import json

    from depthaudit.report.claim import points

    def rec(tb, acc, gamma, **cfg):
        return {"config": {"method": "sb", "method_options": {"credit_at": "input", "predictor": "plain", "cond": "x"},
                           "train_blocks": tb, "scale_penalty": 0.01, "penalty_reduction": "element-vs-sum",
                           "epochs": 30, "warmup": "dfa", "warmup_fraction": 0.2, **cfg},
                "final": {"test_acc": acc}, "history": [{"probe": {"credit_cosine": {"mean_per_layer": gamma}}}]}

    for name, r in (("a", rec("all", 0.4, 0.3)), ("b", rec("none", 0.35, 0.1))):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "result.json").write_text(json.dumps(r))
    pts = points(tmp_path)
    assert [(p["label"], p["acc"], p["gamma"], p["lambda"]) for p in pts] == \
        [("sb:credit_at=input,predictor=plain [element-vs-sum] after dfa 0.2", 0.4, 0.3, 0.01)]  # frozen twin: no point


def test_spearman_against_a_hand_computed_case():
    from depthaudit.report.claim import spearman

    assert spearman([1.0, 2.0, 3.0], [10.0, 20.0, 30.0]) == 1.0
    assert spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == -1.0
    # ranks x (0,1,2,3), y (1,0,3,2): d² = 1+1+1+1 = 4, ρ = 1 − 6·4/(4·15) = 0.6
    assert abs(spearman([0.1, 0.2, 0.3, 0.4], [0.5, 0.1, 0.9, 0.7]) - 0.6) < 1e-12


def test_a_folder_claimed_before_a_field_existed_stays_its_own(tmp_path):
    from depthaudit.errors import UsageError
    from depthaudit.stores import claim_folder

    old = {"base": {"lr": 0.001, "warmup": None, "warmup_fraction": 0.2, "penalty_reduction": "example"}, "m": 1}
    claim_folder(tmp_path, "audit", old)
    # today's claim: optimizer at the protocol's value, the neutral fields left out — the same audit
    claim_folder(tmp_path, "audit", {"base": {"lr": 0.001, "optimizer": "adamw"}, "m": 1})
    with pytest.raises(UsageError, match="differs in base.optimizer"):  # a real difference is still refused
        claim_folder(tmp_path, "audit", {"base": {"lr": 0.001, "optimizer": "sgd"}, "m": 1})
    with pytest.raises(UsageError, match="differs in base.penalty_reduction"):
        claim_folder(tmp_path, "audit", {"base": {"lr": 0.001, "penalty_reduction": "element"}, "m": 1})
