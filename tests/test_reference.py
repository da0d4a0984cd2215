"""The published protocol's defaults: reference models, CIFAR augmentation, budget vs schedule, legacy configs."""


import numpy as np
import pytest
import torch

from depthaudit.cli import main
from depthaudit.config import TrainConfig
from depthaudit.data.augment import PAD, augment_batch
from depthaudit.data.teacher import make_teacher_data, phi
from depthaudit.models import build_model


def test_reference_resmlp_block_is_the_protocols():
    model = build_model("resmlp", (3, 32, 32), 10, 256, 4, None, 0)  # ratio None → the variant's: 1
    blk = model.blocks[0]
    assert blk.fc1.weight.shape == (256, 256) and blk.fc2.weight.shape == (256, 256)  # expansion 1
    assert blk.ln is not None and blk.ln.elementwise_affine  # LayerNorm with γ, β
    w2 = torch.cat([b.fc2.weight.flatten() for b in model.blocks])
    print("fc2 weight std", w2.std().item(), "mean", w2.mean().item())
    assert w2.std().item() == pytest.approx(0.01, rel=0.02) and abs(w2.mean().item()) < 1e-4  # N(0, 0.01²)
    assert all(torch.equal(b.fc2.bias, torch.zeros(256)) for b in model.blocks)  # bias 0
    # every other Linear: PyTorch's default init, weight and bias U(±1/√fan_in)
    for lin in (blk.fc1, model.embed.proj, model.readout.out_head):
        bound = lin.in_features ** -0.5
        for t in (lin.weight, lin.bias):
            assert t.abs().max() <= bound and t.std() > 0.4 * bound  # U(±b) has std b/√3 ≈ 0.58 b
    v01 = build_model("resmlp", (3, 32, 32), 10, 256, 4, None, 0, variant="v0.1")
    assert v01.blocks[0].ln is None and v01.blocks[0].fc1.weight.shape == (1024, 256)
    assert torch.count_nonzero(v01.blocks[0].fc1.bias) == 0
    assert TrainConfig().mlp_ratio == 1 and TrainConfig(variant="v0.1").mlp_ratio == 4
    assert TrainConfig(arch="vit").mlp_ratio == 4


def test_reference_vit_reads_the_cls_token():
    model = build_model("vit", (3, 8, 8), 5, 16, 2, None, 0)
    x = torch.randn(3, 3, 8, 8)
    logits, states = model(x, return_states=True)
    assert states[0].shape == (3, 1 + 4, 16) and model.audit_token == 0
    h = states[-1].clone()
    h[:, 1:] += 100.0  # patch tokens of h_L do not reach the head: only the cls token does
    assert torch.equal(model.readout(h), logits)
    old = build_model("vit", (3, 8, 8), 5, 16, 2, None, 0, variant="v0.1")
    assert old(x, return_states=True)[1][0].shape == (3, 4, 16) and old.audit_token is None


def _find_crop(out, src, p):
    """Every (dy, dx, flip) whose crop of the padded image ``src`` equals ``out`` exactly."""
    hits = []
    h, w = out.shape[-2:]
    for dy in range(2 * p + 1):
        for dx in range(2 * p + 1):
            crop = src[:, dy:dy + h, dx:dx + w]
            for flip in (False, True):
                if torch.equal(crop.flip(-1) if flip else crop, out):
                    hits.append((dy, dx, flip))
    return hits


def test_augmentation_is_a_per_example_crop_of_the_zero_padded_raw_image_and_a_flip():
    g = torch.Generator().manual_seed(0)
    raw = torch.rand(64, 3, 8, 8, generator=g)  # raw pixels in [0, 1]
    mean, std = torch.tensor([0.49, 0.48, 0.45]), torch.tensor([0.25, 0.24, 0.26])
    x = (raw - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)
    pad_value = -mean / std  # a black raw pixel, normalised
    out = augment_batch(x, "crop+flip", pad_value, torch.Generator().manual_seed(1))
    # independent reference: torchvision's order on the raw image — pad with 0, crop, flip — then Normalize
    padded = torch.nn.functional.pad(raw, (PAD,) * 4, value=0.0)
    ref_norm = (padded - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)
    offsets, flips = set(), 0
    for i in range(64):
        hits = _find_crop(out[i], ref_norm[i], PAD)
        assert hits, f"example {i} is no crop/flip of its own padded image"
        offsets.add(hits[0][:2])
        flips += hits[0][2]
    print(f"distinct offsets {len(offsets)} of 81, flipped {flips}/64")
    assert len(offsets) > 20 and 15 < flips < 49  # per-example draws, not one for the batch
    assert torch.equal(augment_batch(x, "none", pad_value, g), x)
    same = augment_batch(x, "crop+flip", pad_value, torch.Generator().manual_seed(1))
    assert torch.equal(same, out)  # seeded


@pytest.mark.parametrize("kind", ["crop", "flip"])
def test_crop_alone_and_flip_alone_are_what_they_say(kind):
    """Each example of ``crop`` is an unflipped crop of its padded image; of ``flip`` the image or its mirror."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(48, 3, 8, 8, generator=g, dtype=torch.float64)
    pad_value = torch.tensor([-1.5, -2.0, -1.7], dtype=torch.float64)
    out = augment_batch(x, kind, pad_value, torch.Generator().manual_seed(3))
    padded = torch.cat([pad_value.view(1, 3, 1, 1).expand(48, 3, 8 + 2 * PAD, 8 + 2 * PAD)], 0).clone()
    padded[:, :, PAD:PAD + 8, PAD:PAD + 8] = x
    kinds = set()
    for i in range(48):
        hits = _find_crop(out[i], padded[i], PAD)
        if kind == "flip":
            hits = [hit for hit in hits if hit[:2] == (PAD, PAD)]  # no shift
        else:
            hits = [hit for hit in hits if not hit[2]]  # no mirror
        assert hits, f"{kind}: example {i} is not what {kind} makes"
        kinds.add(hits[0][2] if kind == "flip" else hits[0][:2])
    print(f"{kind}: {len(kinds)} distinct draws over 48 examples")
    assert len(kinds) == 2 if kind == "flip" else len(kinds) > 15


def test_augment_default_follows_the_dataset_and_refuses_non_images(tmp_path, capsys):
    assert TrainConfig(dataset="cifar10").augment == "crop+flip" and TrainConfig().augment == "none"
    assert main(["train", "--augment", "crop+flip", "--epochs", "1", "--d-hidden", "16", "--out",
                 str(tmp_path / "r")]) == 2
    assert "not an image dataset" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_stop_after_trains_the_first_epochs_of_the_full_schedule():
    from depthaudit.data import load_data
    from depthaudit.loop import train

    data = load_data("mnist1d", None, False, torch.device("cpu"))
    cfg = TrainConfig(d_hidden=32, num_blocks=2, epochs=4, method="fa")
    full = train(cfg, data, log=lambda _: None)
    part = train(TrainConfig(d_hidden=32, num_blocks=2, epochs=4, stop_after=2, method="fa"), data,
                 log=lambda _: None)
    short = train(TrainConfig(d_hidden=32, num_blocks=2, epochs=2, method="fa"), data, log=lambda _: None)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in full.history[:2]]
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in part.history] == strip
    assert part.final["epochs_completed"] == 2 and part.final["budget_epochs"] == 4
    # a 2-epoch budget is a different schedule: its lr reaches 0 at the end
    assert short.history[-1]["lr_end"] < part.history[-1]["lr_end"]
    print("lr at the end of epoch 2: budget 4", part.history[-1]["lr_end"], "budget 2", short.history[-1]["lr_end"])


def test_stored_configs_without_the_new_fields_read_as_what_they_ran():
    old = {"dataset": "mnist1d", "arch": "resmlp", "d_hidden": 256, "num_blocks": 4, "mlp_ratio": 4, "epochs": 20}
    cfg = TrainConfig.from_dict(old)
    assert (cfg.variant, cfg.augment, cfg.stop_after) == ("v0.1", "none", None)
    assert not TrainConfig().same_as(old)  # an old run is never reused as a reference-model run
    assert TrainConfig(variant="v0.1", mlp_ratio=4).same_as(old)
    assert TrainConfig.from_dict(TrainConfig(dataset="cifar10").to_dict()) == TrainConfig(dataset="cifar10")
    # a 0.1 penalty run reads as the relative form it ran; without a penalty the form is moot
    assert TrainConfig.from_dict({**old, "scale_penalty": 0.1}).penalty_form == "rel"
    assert TrainConfig.from_dict(old).penalty_form == "abs"


def test_v01_variant_is_bit_identical_to_depthaudit_0_1_init():
    """Fingerprints of 0.1.0's own models (commit e898d6b, computed with that code): --variant v0.1 equals them."""
    import hashlib

    want = {"resmlp": "47fbb15510dd7ae6", "studentnet": "1f0f327d0b1b5d14", "vit": "ec82cc512f0e4f1e"}
    for arch, shape in (("resmlp", (40,)), ("studentnet", (40,)), ("vit", (3, 8, 8))):
        h = hashlib.sha256()
        for k, v in sorted(build_model(arch, shape, 10, 16, 3, 4, 7, variant="v0.1").state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().contiguous().numpy().tobytes())
        assert h.hexdigest()[:16] == want[arch], arch


def test_teacher_student_data():
    d = make_teacher_data(0.0)
    assert d.x_train.shape == (10_000, 64) and d.x_test.shape == (2_000, 64) and d.num_classes == 10
    assert np.bincount(d.y_train, minlength=10).min() > 500  # roughly balanced
    again = make_teacher_data(0.0)
    assert d.sha256 == again.sha256 and np.array_equal(d.y_train, again.y_train)
    assert make_teacher_data(1.0).sha256 != d.sha256
    z = np.linspace(-3, 3, 7)
    assert np.allclose(phi(z, 0.0), z) and np.allclose(phi(z, 1.0), np.tanh(z))
    assert np.allclose(phi(z, 0.25), 0.75 * z + 0.25 * np.tanh(z))
    # α = 0: the teacher is linear, so a linear readout can fit its labels far above chance
    x, y = torch.from_numpy(d.x_train).double(), torch.from_numpy(d.y_train)
    w = torch.linalg.lstsq(x, torch.nn.functional.one_hot(y, 10).double()).solution
    acc = ((torch.from_numpy(d.x_test).double() @ w).argmax(1) == torch.from_numpy(d.y_test)).double().mean()
    print("least-squares linear fit accuracy on teacher-a0:", acc.item())
    assert acc > 0.6
