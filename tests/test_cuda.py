"""The device path on a GPU: the laws of the CPU suite, re-checked with every tensor on CUDA.

Skipped where no CUDA device exists (CI has none); run on a GPU machine with ``pytest tests/test_cuda.py``.
``DEPTHAUDIT_TEST_DEVICE=cpu`` runs the same checks on the CPU (to check the tests themselves).
"""

import os
from dataclasses import replace

import pytest
import torch

from depthaudit.batched import StackedStepper
from depthaudit.config import TrainConfig
from depthaudit.data.augment import apply_augment, augment_batch, augment_draws
from depthaudit.data.base import DataBundle
from depthaudit.loop import Stepper, fit, train
from depthaudit.methods import build_method, parse_method_spec
from depthaudit.models import build_model

DEV = os.environ.get("DEPTHAUDIT_TEST_DEVICE") or "cuda"
pytestmark = pytest.mark.skipif(DEV.startswith("cuda") and not torch.cuda.is_available(),
                                reason="no CUDA device on this machine (run on a GPU machine)")


def _data(dtype=torch.float64, n=640, n_test=200, image=False):
    g = torch.Generator().manual_seed(0)
    shape = (3, 8, 8) if image else (12,)
    x = torch.randn(n + n_test, *shape, generator=g, dtype=dtype)
    y = (x.flatten(1) @ torch.randn(x[0].numel(), 5, generator=g, dtype=dtype)).argmax(1)
    pad = torch.tensor([-1.0, -2.0, 0.5], dtype=dtype, device=DEV) if image else None
    return DataBundle("toy", x[:n].to(DEV), y[:n].to(DEV), x[n:].to(DEV), y[n:].to(DEV), 5, "generated", "0" * 64,
                      pad_value=pad)


def _build(cfg, data):
    model = build_model(cfg.arch, data.input_shape, data.num_classes, cfg.d_hidden, cfg.num_blocks, cfg.mlp_ratio,
                        cfg.seed, cfg.variant).to(device=DEV, dtype=data.x_train.dtype)
    trainable = set(cfg.trainable())
    for i, blk in enumerate(model.blocks, start=1):
        blk.requires_grad_(i in trainable)
    method = build_method(cfg.method, model, cfg.seed, None, cfg)
    method.measure_credits(model, data.x_train[:2], data.y_train[:2])
    return model, method


@pytest.mark.parametrize("spec", ["bp", "fa", "dfa", "fa-stream"])
def test_stacked_runs_equal_runs_alone_on_the_device_fp64(spec):
    data = _data(image=True)
    base = TrainConfig(dataset="toy", arch="resmlp", d_hidden=16, num_blocks=3, method="bp", epochs=2,
                       batch_size=32, lr=3e-3, augment="crop+flip", device=DEV)
    cfgs = [parse_method_spec(spec, replace(base, seed=s, train_blocks=tb))[1]
            for s, tb in [(1, "all"), (2, "none"), (3, "last:1")]]
    built = [_build(c, data) for c in cfgs]
    stepper = StackedStepper(cfgs, data, [b[0] for b in built], [b[1] for b in built])
    fit(640, 32, 2, base.lr, [c.seed for c in cfgs], DEV, stepper, lambda: ([0.0] * 3, [0.0] * 3),
        on_epoch_end=[None] * 3, log=lambda m: None)
    stepper.model.write_back([b[0] for b in built])
    worst = 0.0
    for r, cfg in enumerate(cfgs):
        model, method = _build(cfg, data)
        step = Stepper(cfg, data, model, method)
        fit(640, 32, 2, cfg.lr, cfg.seed, DEV, step, lambda: (0.0, 0.0), log=lambda m: None)
        got = built[r][0].state_dict()
        assert all(v.device.type == torch.device(DEV).type for v in got.values())
        worst = max(worst, max((got[k] - v).abs().max().item() for k, v in model.state_dict().items()))
    print(f"{spec} on {DEV}: max |stacked − alone| over 3 runs, 40 steps, crop+flip = {worst:.2e}")
    assert worst <= 1e-10


def test_fa_with_b_equal_w_is_bp_on_the_device():
    data = _data()
    cfg = TrainConfig(dataset="toy", arch="resmlp", d_hidden=16, num_blocks=3, method="fa", device=DEV)
    model, fa = _build(cfg, data)
    for k in fa.feedback:
        mod, name = k.split(".")
        owner = model.readout if mod == "readout" else model.blocks[int(mod[5:]) - 1]
        fa.feedback[k] = owner.feedback_weights()[name].detach().clone()
    bp = build_method("bp", model, 0, None, cfg.with_method("bp"))
    x, y = data.x_train[:64], data.y_train[:64]
    _, c_fa = fa.measure_credits(model, x, y)
    _, c_bp = bp.measure_credits(model, x, y)
    diff = max((a - b).abs().max().item() for a, b in zip(c_fa, c_bp, strict=True))
    print(f"FA(B=W) vs BP credits on {DEV}: {diff:.2e}")
    assert diff < 1e-12


def test_augmentation_on_the_device_matches_the_cpu_for_the_same_draws():
    data = _data(dtype=torch.float32, image=True)
    x = data.x_train[:64]
    off, flip = augment_draws(64, "crop+flip", x.device, torch.Generator(device=x.device).manual_seed(4))
    got = apply_augment(x, "crop+flip", data.pad_value, off, flip)
    ref = apply_augment(x.cpu(), "crop+flip", data.pad_value.cpu(), off.cpu(), flip.cpu())
    assert torch.equal(got.cpu(), ref)  # a gather and a select: exact on any device
    again = augment_batch(x, "crop+flip", data.pad_value, torch.Generator(device=x.device).manual_seed(4))
    assert torch.equal(again, got)


def test_a_recipe_run_trains_on_the_device_and_records_plain_numbers():
    data = _data(dtype=torch.float32, image=True)
    cfg = TrainConfig(dataset="toy", arch="resmlp", d_hidden=32, num_blocks=2, method="dfa", epochs=3,
                      batch_size=32, lr=3e-3, augment="crop+flip", device=DEV)
    out = train(cfg, data, log=lambda m: None)
    assert out.status == "ok" and len(out.history) == 3
    for rec in out.history:  # every number in the record is a Python float, moved off the device
        assert all(isinstance(rec[k], float) for k in ("train_loss", "test_loss", "test_acc"))
    assert next(out.model.parameters()).device.type == torch.device(DEV).type
    print(f"dfa on {DEV}: test acc per epoch {[round(r['test_acc'], 3) for r in out.history]}")


@pytest.mark.parametrize("spec", ["bp", "fa", "dfa", "fa-stream"])
def test_stacked_runs_with_the_audit_tracker_on_the_device(spec):
    """Each stacked run's state is written back for its tracker every epoch: it must stay on the device."""
    from depthaudit.batched import train_stacked
    from depthaudit.diagnostics import audit_tracker

    data = _data(dtype=torch.float32, image=True)
    base = TrainConfig(dataset="toy", arch="resmlp", d_hidden=16, num_blocks=2, method="bp", epochs=2,
                       batch_size=32, lr=3e-3, augment="crop+flip", device=DEV)
    cfgs = [parse_method_spec(spec, replace(base, seed=s, train_blocks=tb))[1] for s, tb in [(1, "all"), (2, "none")]]
    batches = [(data.x_test[i:i + 50], data.y_test[i:i + 50]) for i in (0, 50)]
    outs = train_stacked(cfgs, data, trackers=[audit_tracker(batches) for _ in cfgs])
    cos = [o.history[-1]["probe"]["credit_cosine"]["per_layer"] for o in outs]
    print(f"{spec} on {DEV}: per-layer Γ at the last epoch {cos}")
    assert all(o.status == "ok" for o in outs) and all(len(c) == 3 for c in cos)


GRAPH_DEV = DEV if DEV.startswith("cuda") else None  # CUDA graphs exist only on CUDA: these tests skip elsewhere


@pytest.mark.skipif(GRAPH_DEV is None, reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("spec", ["bp", "fa", "dfa", "fa-stream", "dfa:penalty"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_graphed_stacked_step_equals_the_eager_one_bit_for_bit(spec, dtype):
    """The recorded forward+backward replays the eager step's kernels: every parameter equal, every loss equal."""
    data = _data(dtype=dtype, image=True)
    method, lam = (spec.split(":")[0], 1e-2) if spec.endswith(":penalty") else (spec, 0.0)
    base = TrainConfig(dataset="toy", arch="resmlp", d_hidden=16, num_blocks=3, method="bp", epochs=2,
                       batch_size=32, lr=3e-3, augment="crop+flip", device=DEV)
    cfgs = [parse_method_spec(method, replace(base, seed=s, train_blocks=tb, scale_penalty=lam * s))[1]
            for s, tb in [(1, "all"), (2, "none"), (3, "last:1")]]
    out = {}
    for graphs in (False, True):
        built = [_build(c, data) for c in cfgs]
        stepper = StackedStepper(cfgs, data, [b[0] for b in built], [b[1] for b in built], graphs=graphs)
        assert stepper.graphs is graphs
        losses = []
        gen = torch.Generator(device=DEV).manual_seed(0)
        for i in range(16):  # batches of 32 and, every 4th step, of 16 (an epoch's last batch): two graphs
            size = 16 if i % 4 == 3 else 32  # 32: 3 warm-up steps, recorded at step 4; 16: warm at 3, recorded at 7
            idx = torch.stack([torch.randperm(640, device=DEV, generator=gen)[:size] for _ in cfgs])
            losses.append(stepper(idx, 3e-3 * (1 - i / 16)).sum())
        assert len(stepper._graphs) == (2 if graphs else 0)
        stepper.model.write_back([b[0] for b in built])
        out[graphs] = (torch.stack(losses), [b[0].state_dict() for b in built])
    (l0, s0), (l1, s1) = out[False], out[True]
    worst = max((a[k] - b[k]).abs().max().item() for a, b in zip(s0, s1, strict=True) for k in a)
    print(f"{spec} {dtype}: max |graphed − eager| over 3 runs, 16 steps: params {worst:.1e}, "
          f"losses {(l0 - l1).abs().max().item():.1e}")
    assert torch.equal(l0, l1) and worst == 0.0


@pytest.mark.skipif(GRAPH_DEV is None, reason="CUDA graphs need a CUDA device")
def test_a_sweep_with_cuda_graphs_records_the_same_numbers(tmp_path):
    """The ladder through the CLI, stacked, with --cuda-graphs off and by default (auto): the same accuracies."""
    import json

    from depthaudit.cli import main

    common = ["ladder", "--dataset", "teacher-a0", "--d-hidden", "32", "--num-blocks", "2", "--methods", "dfa",
              "--seeds", "1", "2", "--epochs", "2", "--device", DEV, "--batch-runs", "8"]
    accs = {}
    for graphs in (False, True):
        out = tmp_path / str(graphs)
        assert main([*common, "--output_dir", str(out), *([] if graphs else ["--cuda-graphs", "off"])]) == 0
        doc = json.loads(next(out.glob("ladder_*.json")).read_text())
        runs = doc["runs"]
        accs[graphs] = {k: r["final"]["test_acc"] for k, r in runs.items()}
        assert all(bool(r["timing"].get("cuda_graphs")) is graphs for r in runs.values())
    print("accuracies eager vs graphed:", accs)
    assert accs[False] == accs[True]
