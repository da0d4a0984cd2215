"""Training-loop laws: frozen blocks untouched, determinism, learning, divergence recorded."""

import json
import math

import torch

from depthaudit.cli import main
from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.loop import build, train


def _data():
    return load_data("mnist1d", None, False, torch.device("cpu"))


def test_frozen_blocks_are_bit_identical_after_training():
    data = _data()
    for method in ("bp", "fa", "dfa"):
        cfg = TrainConfig(method=method, d_hidden=32, num_blocks=4, epochs=1, train_blocks="last:2")
        init_model, _ = build(cfg, data)
        run = train(cfg, data, log=lambda m: None)
        for i in range(4):
            before = init_model.blocks[i].state_dict()
            after = run.model.blocks[i].state_dict()
            same = all(torch.equal(before[k], after[k]) for k in before)
            assert same == (i < 2), (method, i)  # blocks 1,2 frozen; 3,4 trained
        assert not torch.equal(init_model.embed.proj.weight, run.model.embed.proj.weight)


def _strip(d):
    d = json.loads(json.dumps(d))
    d["provenance"].pop("started_at")
    d["provenance"].pop("written_at", None)
    d["provenance"].pop("argv")
    d.pop("timing")
    for h in d["history"]:
        h.pop("seconds")
    return d


def test_same_seed_same_result_json(tmp_path):
    args = ["train", "--d-hidden", "32", "--num-blocks", "2", "--epochs", "2", "--method", "fa",
            "--no-checkpoint"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    assert main([*args, "--seed", "7", "--out", str(tmp_path / "c")]) == 0
    a, b, c = (json.loads((tmp_path / k / "result.json").read_text()) for k in "abc")
    assert _strip(a) == _strip(b)
    assert a["history"] != c["history"]


def test_short_mnist1d_bp_run_is_far_above_chance(tmp_path):
    assert main(["train", "--d-hidden", "64", "--epochs", "4", "--out", str(tmp_path / "r")]) == 0
    res = json.loads((tmp_path / "r" / "result.json").read_text())
    print("MNIST-1D BP 4 epochs test acc", res["final"]["test_acc"])
    assert res["status"] == "ok" and res["final"]["test_acc"] > 0.4  # chance is 0.1
    assert len(res["history"]) == 4
    prov = res["provenance"]
    for key in ("version", "git", "torch", "device", "data", "seed"):
        assert key in prov
    assert len(prov["data"]["sha256"]) == 64
    ckpt = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)
    assert set(ckpt) >= {"config", "model", "method"}


def test_checkpoint_carries_the_feedback(tmp_path):
    assert main(["train", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1", "--method", "dfa",
                 "--out", str(tmp_path / "r")]) == 0
    ckpt = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)
    cfg = TrainConfig.from_dict(ckpt["config"])
    _, method = build(cfg, _data())
    x = torch.zeros(2, 40)
    method.measure_credits(_ := build(cfg, _data())[0], x, torch.zeros(2, dtype=torch.long))  # draws the same B
    for k, v in ckpt["method"].items():
        assert torch.equal(method.feedback[k], v), k
    assert set(ckpt["method"]) == {"B0", "B1", "B2"}


def test_diverging_run_is_recorded_not_crashed(tmp_path):
    code = main(["train", "--d-hidden", "32", "--num-blocks", "2", "--epochs", "3", "--lr", "1e9",
                 "--out", str(tmp_path / "r"), "--no-checkpoint"])
    res = json.loads((tmp_path / "r" / "result.json").read_text())  # strict JSON: NaN stored as null
    print("diverged run:", res["status"], res["final"])
    assert code == 0 and res["status"] == "diverged"
    assert res["final"]["diverged_at_epoch"] == len(res["history"]) >= 1


def test_grouped_optimizer_equals_one_optimizer_per_block():
    from depthaudit.loop import make_optimizer

    data = _data()
    cfg = TrainConfig(method="fa", d_hidden=16, num_blocks=3, epochs=1, train_blocks="last:2")
    (m1, meth1), (m2, meth2) = build(cfg, data), build(cfg, data)
    grouped = make_optimizer(m1, cfg)
    assert grouped.defaults["fused"]  # CPU parameters: torch's fused AdamW (its agreement with the default: below)
    separate = [torch.optim.AdamW(ps, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
                for ps in m2.groups().values() if ps and all(p.requires_grad for p in ps)]
    n_grouped = sum(len(g["params"]) for g in grouped.param_groups)
    assert n_grouped == sum(len(o.param_groups[0]["params"]) for o in separate)
    for i in range(5):
        idx = torch.arange(i * 64, (i + 1) * 64)
        for model, meth, opts in ((m1, meth1, [grouped]), (m2, meth2, separate)):
            for o in opts:
                o.zero_grad()
            meth.step(model, data.x_train[idx], data.y_train[idx])
            for o in opts:
                o.step()
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_the_cpu_optimizer_is_torchs_default_adamw_to_rounding():
    """make_optimizer's fused CPU AdamW against torch.optim.AdamW's default (for-loop) form: 30 recipe steps of
    an fp64 model with frozen blocks and a cosine lr; the weights agree to rounding, frozen ones bit for bit."""
    from depthaudit.loop import make_optimizer

    data = _data()
    cfg = TrainConfig(method="bp", d_hidden=16, num_blocks=3, epochs=1, train_blocks="last:2", weight_decay=0.05)
    (m1, meth1), (m2, meth2) = build(cfg, data), build(cfg, data)
    m1.double()
    m2.double()
    x = data.x_train.double()
    ours = make_optimizer(m1, cfg)
    ref = torch.optim.AdamW([p for p in m2.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    assert ours.defaults["fused"] and not ref.defaults["fused"]
    start = {k: v.clone() for k, v in m1.state_dict().items()}
    for i in range(30):
        idx = torch.arange(i * 20, (i + 1) * 20) % x.shape[0]
        for model, meth, opt in ((m1, meth1, ours), (m2, meth2, ref)):
            for g in opt.param_groups:
                g["lr"] = cfg.lr * (1 + math.cos(math.pi * i / 30)) / 2
            opt.zero_grad()
            meth.step(model, x[idx], data.y_train[idx])
            opt.step()
    worst = max((a - b).abs().max().item() for a, b in zip(m1.state_dict().values(), m2.state_dict().values(),
                                                           strict=True))
    moved = max((a - start[k]).abs().max().item() for k, a in m1.state_dict().items())
    print(f"fused CPU AdamW vs torch default AdamW, 30 steps fp64: max |diff| {worst:.2e} (moved {moved:.2e})")
    assert worst < 1e-12 and moved > 1e-3
    frozen = [k for k in start if k.startswith("blocks.0.")]  # last:2 of 3 blocks: block 1 is frozen
    assert frozen and all(torch.equal(m1.state_dict()[k], start[k]) for k in frozen)


def test_without_the_fused_cpu_kernel_the_optimizers_fall_back_to_torchs_default(monkeypatch):
    """torch < 2.4 has no fused AdamW for CPU tensors: make_optimizer and the stacked optimizer then take
    torch's default form (which the fused one equals to rounding: the test above)."""
    from depthaudit import batched, loop, optim

    monkeypatch.setattr(optim, "cpu_fused_adamw", lambda: False)  # make_optimizer's adamw (depthaudit.optim)
    monkeypatch.setattr(batched, "cpu_fused_adamw", lambda: False)
    data = _data()
    cfg = TrainConfig(method="bp", d_hidden=16, num_blocks=2, epochs=1)
    model, meth = build(cfg, data)
    assert not loop.make_optimizer(model, cfg).defaults["fused"]
    w = torch.nn.Parameter(torch.zeros(2, 3))
    assert not batched.MaskedAdamW([([w], torch.tensor([True, True]))], lr=1e-3, weight_decay=0.0).fused
    monkeypatch.undo()
    assert loop.make_optimizer(model, cfg).defaults["fused"]


def test_a_record_names_the_code_loaded_at_start_and_when_training_began(tmp_path):
    """The git commit is read once, at import (before any run), so a long run whose tree changes under it still
    names the code it loaded; ``started_at`` is training's start, ``written_at`` the record's (they differ by the
    run's training seconds)."""
    from datetime import datetime

    from depthaudit import provenance as pv

    assert pv.git_commit.cache_info().currsize == 1  # read when the module was imported
    assert main(["train", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "3", "--out", str(tmp_path / "r"),
                 "--no-checkpoint"]) == 0
    res = json.loads((tmp_path / "r" / "result.json").read_text())
    prov = res["provenance"]
    start, written = (datetime.fromisoformat(prov[k]) for k in ("started_at", "written_at"))
    gap = (written - start).total_seconds()
    print(f"started {prov['started_at']}, written {prov['written_at']}: {gap:.0f} s apart; trained "
          f"{res['timing']['train_seconds']:.1f} s")
    assert prov["git"] == pv.git_commit() and pv.git_commit.cache_info().misses == 1
    assert abs(gap - res["timing"]["train_seconds"]) <= 2.0  # both stamps are whole seconds
    # a run that trained for an hour: its record says it started an hour before it was written
    from depthaudit.loop import RunOutput
    from depthaudit.runner import result_record

    cfg = TrainConfig(d_hidden=16, num_blocks=2, epochs=1)
    data = _data()
    model, method = build(cfg, data)
    rec = result_record(cfg, data, RunOutput("ok", [], {}, 3600.0, model, method), None)
    start, written = (datetime.fromisoformat(rec["provenance"][k]) for k in ("started_at", "written_at"))
    assert abs((written - start).total_seconds() - 3600) <= 1.0
