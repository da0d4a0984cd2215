"""Stacked runs: every run of a stacked group equals the same run trained alone (fp64, ≤ 1e-10)."""

from dataclasses import replace

import pytest
import torch

from depthaudit.batched import MaskedAdamW, StackedStepper, group_key, train_stacked
from depthaudit.config import TrainConfig
from depthaudit.data.base import DataBundle
from depthaudit.errors import UsageError
from depthaudit.loop import Stepper, fit, train
from depthaudit.methods import build_method
from depthaudit.models import build_model

TOL = 1e-10


def _data(dtype=torch.float64, n=640, n_test=200, d_in=12, classes=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d_in, classes, generator=g)
    x = torch.randn(n + n_test, d_in, generator=g)
    y = (x @ w).argmax(1)
    return DataBundle("toy", x[:n].to(dtype), y[:n], x[n:].to(dtype), y[n:], classes, "generated", "0" * 64)


def _build64(cfg: TrainConfig, data: DataBundle):
    """A run's model and method in fp64, exactly as ``train.build`` makes them (same init, same feedback)."""
    model = build_model(cfg.arch, data.input_shape, data.num_classes, cfg.d_hidden, cfg.num_blocks, cfg.mlp_ratio,
                        cfg.seed, cfg.variant).double()
    trainable = set(cfg.trainable())
    for i, blk in enumerate(model.blocks, start=1):
        blk.requires_grad_(i in trainable)
    method = build_method(cfg.method, model, cfg.seed, None, cfg)
    method.measure_credits(model, data.x_train[:2], data.y_train[:2])  # lazily drawn feedback, as train_stacked does
    return model, method


def _cfgs(method, **kw):
    base = TrainConfig(dataset="toy", arch="resmlp", d_hidden=16, num_blocks=3, method=method, epochs=2,
                       batch_size=32, lr=3e-3, augment="none", device="cpu", **kw)
    runs = [(1, "all"), (2, "none"), (3, "last:1"), (1, "first:2")]
    return [replace(base, seed=s, train_blocks=tb) for s, tb in runs]


def _alone(cfg, data):
    model, method = _build64(cfg, data)
    step = Stepper(cfg, data, model, method)
    hist, _ = fit(data.x_train.shape[0], cfg.batch_size, cfg.epochs, cfg.lr, cfg.seed, "cpu", step,
                  lambda: (0.0, 0.0), log=lambda m: None)
    return model, method, [h["train_loss"] for h in hist]


SPECS = ["bp", "fa", "fa:head=exact", "dfa", "sign-dfa", "drtp", "usf", "kp", "fa-stream", "fa-stream:identity",
         "ep:steps=3", "ep:steps=3,credit=error", "bp+penalty", "fa+lambdas", "fa+rel"]


@pytest.mark.parametrize("spec", SPECS + [f"{s}@vmap" for s in ("bp", "fa", "dfa", "fa-stream", "bp+penalty",
                                                                 "fa+lambdas")])
def test_every_stacked_run_equals_the_run_alone_fp64(spec, monkeypatch):
    """``@vmap``: the GPU's form (one vmap over the runs) run on the CPU, which otherwise loops over the runs."""
    from depthaudit.batched import StackedModule
    from depthaudit.methods import parse_method_spec

    spec, _, form = spec.partition("@")
    monkeypatch.setattr(StackedModule, "vmap_on_cpu", form == "vmap")

    name, _, extra = spec.partition("+")
    kw = {"penalty": {"scale_penalty": 0.05}, "rel": {"scale_penalty": 0.05, "penalty_form": "rel"}}.get(extra, {})
    cfgs = [parse_method_spec(name, replace(c, **kw))[1] for c in _cfgs("bp")]
    if extra == "lambdas":  # the intervention's grid: a different λ per run, one group
        cfgs = [replace(c, scale_penalty=lam) for c, lam in zip(cfgs, (0.0, 0.05, 0.1, 0.0), strict=True)]
    data = _data()
    built = [_build64(c, data) for c in cfgs]
    init = [{k: v.clone() for k, v in m.state_dict().items()} for m, _ in built]
    stepper = StackedStepper(cfgs, data, [b[0] for b in built], [b[1] for b in built])
    hist, status = fit(data.x_train.shape[0], 32, 2, cfgs[0].lr, [c.seed for c in cfgs], "cpu", stepper,
                       lambda: ([0.0] * 4, [0.0] * 4), on_epoch_end=[None] * 4, log=lambda m: None)
    assert status == ["ok"] * 4 and data.x_train.shape[0] // 32 * 2 >= 20  # ≥ 20 steps
    stepper.model.write_back([b[0] for b in built])
    stepper.method.unstack([b[1] for b in built])
    worst = 0.0
    for r, cfg in enumerate(cfgs):
        model, method, losses = _alone(cfg, data)
        got = built[r][0].state_dict()
        for k, v in model.state_dict().items():
            worst = max(worst, (got[k] - v).abs().max().item())
        for k, v in method.state_dict().items():
            worst = max(worst, (built[r][1].state_dict()[k] - v).abs().max().item())
        worst = max(worst, max(abs(a - b) for a, b in zip(losses, [h["train_loss"] for h in hist[r]], strict=True)))
        trainable = set(cfg.trainable())
        for i in range(1, cfg.num_blocks + 1):
            if i not in trainable:  # a frozen block never moves, bit for bit
                for k in got:
                    if k.startswith(f"blocks.{i - 1}."):
                        assert torch.equal(got[k], init[r][k]), (spec, r, k)
    print(f"{spec} ({form or 'cpu loop'}): max |stacked − alone| over 4 runs, 40 steps = {worst:.2e}")
    assert worst <= TOL


@pytest.mark.parametrize("fused", [True, False], ids=["fused-cpu-form", "foreach-form"])
def test_masked_adamw_is_torch_adamw_per_run(fused):
    """Both forms (the CPU's fused per-slice kernel, the GPU's masked ``_foreach`` one) = torch's own AdamW per
    run, two groups with different masks, a changing lr; a masked-out slice never moves, bit for bit."""
    torch.manual_seed(0)
    ws = [torch.randn(4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    vs = [torch.randn(5, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    opts = [torch.optim.AdamW([w, v], lr=1e-2, weight_decay=0.1) for w, v in zip(ws, vs, strict=True)]
    sw = torch.nn.Parameter(torch.stack([w.detach() for w in ws]))
    sv = torch.nn.Parameter(torch.stack([v.detach() for v in vs]))
    opt = MaskedAdamW([([sw], torch.tensor([True, False, True])), ([sv], torch.tensor([False, True, True]))],
                      lr=1e-2, weight_decay=0.1)
    assert opt.fused  # CPU parameters take the fused form by default
    opt.fused = fused
    start_w, start_v = sw.detach().clone(), sv.detach().clone()
    for t in range(25):
        lr = 1e-2 * (1 - t / 25)
        gw, gv = torch.randn(3, 4, 3, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
        for r in range(3):
            ws[r].grad = gw[r].clone() if r != 1 else None  # a frozen parameter has no gradient alone
            vs[r].grad = gv[r].clone() if r != 0 else None
            for g in opts[r].param_groups:
                g["lr"] = lr
            opts[r].step()
        sw.grad, sv.grad = gw, gv  # stacked: every run's slice has a gradient; the mask decides
        opt.lr = lr
        opt.step()
    diff = max([(sw[r] - ws[r]).abs().max().item() for r in (0, 2)] + [(sv[r] - vs[r]).abs().max().item()
                                                                        for r in (1, 2)])
    print(f"masked AdamW ({'fused' if fused else 'foreach'}) vs torch AdamW per run: {diff:.2e}")
    assert diff < 1e-12
    assert torch.equal(sw[1], start_w[1]) and torch.equal(sv[0], start_v[0])  # decoupled decay did not move them


def test_train_stacked_matches_train_alone_fp32_and_keeps_the_record_shape():
    data = _data(torch.float32)
    cfgs = _cfgs("fa")[:3]
    outs = train_stacked(cfgs, data)
    for cfg, out in zip(cfgs, outs, strict=True):
        alone = train(cfg, data, log=lambda m: None)
        assert out.status == alone.status == "ok"
        assert set(out.final) == set(alone.final) and [set(h) for h in out.history] == [set(h) for h in alone.history]
        diff = max(abs(a["test_loss"] - b["test_loss"]) for a, b in zip(out.history, alone.history, strict=True))
        print(f"{cfg.train_blocks}: test loss stacked vs alone, fp32: {diff:.2e}")
        assert diff < 1e-4
        for (k, v), (k2, v2) in zip(out.model.state_dict().items(), alone.model.state_dict().items(), strict=True):
            assert k == k2 and torch.allclose(v, v2, atol=1e-4)


def test_a_diverging_run_does_not_touch_its_neighbours():
    data = _data(torch.float32)
    cfgs = _cfgs("bp")[:2]
    cfgs = [replace(cfgs[0], lr=1e9, weight_decay=0.0), cfgs[1]]
    with pytest.raises(UsageError, match="cannot train stacked"):
        train_stacked(cfgs, data)  # different lr: not one group
    cfgs = [replace(c, lr=5e3) for c in _cfgs("bp")[:2]]
    outs = train_stacked(cfgs, data)
    alone = [train(c, data, log=lambda m: None) for c in cfgs]
    assert [o.status for o in outs] == [a.status for a in alone]
    assert [len(o.history) for o in outs] == [len(a.history) for a in alone]


def test_group_key_shares_seed_and_blocks_only():
    a, b, c, d = _cfgs("fa")
    assert group_key(a) == group_key(b) == group_key(c) == group_key(d) is not None
    assert group_key(replace(a, lr=1e-2)) != group_key(a)
    assert group_key(a.with_method("brsf")) is None  # draws per step in run order: does not stack
    assert group_key(a.with_method("sb")) is None  # its own auxiliary network and optimizer
    with pytest.raises(UsageError, match="with_method"):  # options of another method are never carried silently
        replace(a, method="sb")


def test_ladder_and_audit_stacked_give_the_records_of_one_by_one(tmp_path):
    import json

    from depthaudit.cli import main

    def ladder(out, n):
        assert main(["ladder", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--methods", "fa",
                     "dfa", "--k-values", "0", "2", "--seeds", "1", "2", "--epochs", "1", "--probe-batches", "1",
                     "--probe-batch-size", "64", "--out", str(out), "--batch-runs", str(n)]) == 0
        return json.loads((out / "ladder_d16_L2_mnist1d.json").read_text())["runs"]

    one, stacked = ladder(tmp_path / "one", 1), ladder(tmp_path / "stacked", 4)
    assert one.keys() == stacked.keys()
    for k in one:
        a, b = one[k], stacked[k]
        assert b["timing"]["stacked_runs"] == 4 and "stacked_runs" not in a["timing"]
        assert set(a) == set(b) and a["config"] == b["config"] and a["status"] == b["status"]
        assert abs(a["final"]["test_loss"] - b["final"]["test_loss"]) < 1e-5
        pa, pb = a["history"][-1]["probe"], b["history"][-1]["probe"]
        assert set(pa) == set(pb)
    out = tmp_path / "audit"
    assert main(["audit", "--methods", "bp", "fa-stream", "--epochs", "1", "--d-hidden", "16", "--num-blocks", "2",
                 "--seeds", "1", "2", "--probe-batches", "1", "--probe-batch-size", "64", "--out", str(out),
                 "--batch-runs", "4"]) == 0
    recs = [json.loads(p.read_text()) for p in (out / "runs").glob("*/result.json")]
    assert len(recs) == 8 and {r["timing"]["stacked_runs"] for r in recs} == {4}


def test_stacked_augmentation_draws_each_runs_own_stream_and_equals_the_run_alone_fp64():
    """Crop+flip in a stack: each run draws its own offsets and flips (one shared gather) — the same images,
    hence the same weights, as when the run trains alone."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(360, 3, 8, 8, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (360,), generator=g)
    data = DataBundle("toy-img", x[:320], y[:320], x[320:], y[320:], 4, "generated", "0" * 64,
                      pad_value=torch.tensor([-1.0, -2.0, 0.5], dtype=torch.float64))
    base = TrainConfig(dataset="toy-img", arch="resmlp", d_hidden=16, num_blocks=2, method="fa", epochs=2,
                       batch_size=32, lr=3e-3, augment="crop+flip", device="cpu")
    cfgs = [replace(base, seed=s, train_blocks=tb) for s, tb in [(1, "all"), (2, "none"), (5, "last:1")]]
    built = [_build64(c, data) for c in cfgs]
    stepper = StackedStepper(cfgs, data, [b[0] for b in built], [b[1] for b in built])
    fit(320, 32, 2, base.lr, [c.seed for c in cfgs], "cpu", stepper, lambda: ([0.0] * 3, [0.0] * 3),
        on_epoch_end=[None] * 3, log=lambda m: None)
    stepper.model.write_back([b[0] for b in built])
    worst, moved = 0.0, 0.0
    for r, cfg in enumerate(cfgs):
        model, _, _ = _alone(cfg, data)
        plain = _alone(replace(cfg, augment="none"), data)[0]
        for k, v in model.state_dict().items():
            worst = max(worst, (built[r][0].state_dict()[k] - v).abs().max().item())
            moved = max(moved, (plain.state_dict()[k] - v).abs().max().item())
    print(f"stacked vs alone with crop+flip, 3 runs, 20 steps: {worst:.2e} (augmentation itself moved weights "
          f"by {moved:.2e})")
    assert worst <= TOL and moved > 1e-3  # the augmentation acted, and identically in both engines


@pytest.mark.parametrize("spec", ["fa", "dfa", "fa-stream", "kp", "usf", "ep:steps=3"])
def test_a_runs_state_written_back_from_a_stack_stays_on_its_device(spec):
    """``unstack`` must leave each run's feedback where its stream lives (on a GPU: not on the CPU copy that
    ``state_dict`` makes); checked here with the ``meta`` device standing in for a GPU."""
    from depthaudit.methods import parse_method_spec

    data = _data()
    cfgs = [parse_method_spec(spec, c)[1] for c in _cfgs("bp")[:2]]
    built = [_build64(c, data) for c in cfgs]
    stacked = StackedStepper(cfgs, data, [b[0] for b in built], [b[1] for b in built]).method
    for _, m in built:
        if hasattr(m, "to"):
            m.to("meta")
    stacked.unstack([b[1] for b in built])
    devices = {v.device.type for _, m in built for v in getattr(m, "feedback", {}).values()}
    print(f"{spec}: feedback devices after unstack: {devices or 'none (no feedback state)'}")
    assert devices <= {"meta"}
