"""The field's measures: weight angle and norm ratio, per-example cosine distribution, linear CKA to BP."""

import json
import math

import numpy as np
import torch

from depthaudit.cli import main
from depthaudit.diagnostics import CKAToBP, CreditCosine, PerSampleCosine, Snapshot, WeightAlignment, linear_cka
from depthaudit.methods import build_method
from depthaudit.models import build_model


def _setup(seed=0, B=32, d=12, L=3, C=5, din=7):
    torch.manual_seed(seed)
    model = build_model("resmlp", (din,), C, d, L, 2, seed).double()
    batches = [(torch.randn(B, din, dtype=torch.float64), torch.randint(0, C, (B,))) for _ in range(2)]
    return model, batches


def test_weight_angle_is_zero_and_ratio_one_when_feedback_is_the_weight():
    model, batches = _setup(1)
    fa = build_method("fa", model, 3)
    rand = WeightAlignment().compute(Snapshot(model, fa, batches))
    w, b = model.blocks[0].fc1.weight.detach().numpy(), fa.feedback["block1.fc1"].numpy()
    ref = math.degrees(math.acos(np.sum(w * b) / (np.linalg.norm(w) * np.linalg.norm(b))))  # numpy, independently
    got = rand["per_weight"]["block1.fc1"]
    print(f"FA random: angle {got['angle']:.3f}° (numpy {ref:.3f}°), ratio {got['ratio']:.3f} "
          f"(numpy {np.linalg.norm(b) / np.linalg.norm(w):.3f})")
    assert abs(got["angle"] - ref) < 1e-9 and abs(got["ratio"] - np.linalg.norm(b) / np.linalg.norm(w)) < 1e-12
    assert all(v["angle"] > 45 for v in rand["per_weight"].values())
    for k in fa.feedback:  # B = Wᵀ (stored in W's shape)
        blk, name = k.split(".")
        mod = model.readout if blk == "readout" else model.blocks[int(blk[5:]) - 1]
        fa.feedback[k] = mod.feedback_weights()[name].detach().clone()
    same = WeightAlignment().compute(Snapshot(model, fa, batches))
    worst = max(max(v["angle"], abs(v["ratio"] - 1)) for v in [*same["per_weight"].values(), *same["per_block"]])
    print(f"FA with B = W: max angle / |ratio − 1| = {worst:.1e}")
    assert worst < 1e-5  # acos near 1 resolves ~1e-6 degrees in fp64
    kp = build_method("kp", model, 3)
    kp.feedback = {k: torch.zeros_like(v) for k, v in kp.feedback.items()}  # D = B − W = 0
    assert max(v["angle"] for v in WeightAlignment().compute(Snapshot(model, kp, batches))["per_block"]) < 1e-5
    assert WeightAlignment().compute(Snapshot(model, build_method("dfa", model, 3), batches)) == {}


def test_per_sample_cosines_mean_is_the_cards_gamma():
    model, batches = _setup(2)
    dfa = build_method("dfa", model, 4)
    snap = Snapshot(model, dfa, batches)
    dist = PerSampleCosine().compute(snap)["per_layer"]
    gamma = CreditCosine().compute(snap)["per_layer"]
    diff = max(abs(d["mean"] - g) for d, g in zip(dist, gamma, strict=True))
    print(f"per-sample cosine mean vs Γ_l: max diff {diff:.1e}")
    assert diff < 1e-6
    c, g = snap.credits[2].numpy() / 32, snap.reference[2].numpy() / 32  # independent: numpy, per example
    cos = np.sum(c * g, 1) / (np.linalg.norm(c, axis=1) * np.linalg.norm(g, axis=1))
    assert abs(dist[2]["p50"] - np.percentile(cos, 50)) < 1e-5 and abs(dist[2]["p95"] - np.percentile(cos, 95)) < 1e-5
    assert sum(dist[2]["hist"]) == 64 and dist[2]["p5"] <= dist[2]["p50"] <= dist[2]["p95"]


def test_linear_cka_laws():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 8, generator=g, dtype=torch.float64)
    y = torch.tanh(x @ torch.randn(8, 6, generator=g, dtype=torch.float64)) + 0.3 * torch.randn(50, 6, generator=g,
                                                                                              dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))  # an orthogonal rotation
    n = x.shape[0]
    h = np.eye(n) - 1 / n  # centring matrix; HSIC(K, L) = tr(K H L H) with linear kernels, numpy

    def hsic(a, b):
        return np.trace(a @ a.T @ h @ b @ b.T @ h)

    ref = hsic(x.numpy(), y.numpy()) / math.sqrt(hsic(x.numpy(), x.numpy()) * hsic(y.numpy(), y.numpy()))
    got = linear_cka(x, y)
    print(f"CKA(X, Y) = {got:.6f} (HSIC form {ref:.6f}); CKA(X, X) = {linear_cka(x, x):.15f}; "
          f"CKA(XQ, Y) − CKA(X, Y) = {linear_cka(x @ q, y) - got:.1e}")
    assert abs(got - ref) < 1e-12 and abs(linear_cka(x, x) - 1) < 1e-12
    assert abs(linear_cka(x @ q, y) - got) < 1e-12 and abs(linear_cka(3.0 * x, y) - got) < 1e-12
    assert got < 0.99


def test_cka_to_a_model_itself_is_one_and_to_another_is_not():
    model, batches = _setup(3)
    fa = build_method("fa", model, 1)
    same = CKAToBP(reference=model).compute(Snapshot(model, fa, batches))
    other = CKAToBP(reference=build_model("resmlp", (7,), 5, 12, 3, 2, 99).double()).compute(
        Snapshot(model, fa, batches))
    print(f"CKA to itself {same['per_layer']}; to another init {[round(v, 3) for v in other['per_layer']]}")
    assert all(abs(v - 1) < 1e-12 for v in same["per_layer"]) and other["mean"] < 0.99
    assert CKAToBP.from_plan({"every": 1}) is None  # not scheduled in training without a reference


def test_audit_reports_the_field_measures(tmp_path):
    out = tmp_path / "a"
    args = ["audit", "--methods", "bp", "wm", "--epochs", "1", "--d-hidden", "32", "--num-blocks", "2", "--seeds",
            "1", "--probe-batches", "1", "--probe-batch-size", "64", "--out", str(out)]
    assert main(args) == 0
    rep = json.loads((out / "report.json").read_text())
    bp, wm = rep["methods"]
    print("wm angle per block:", [a["mean"] for a in wm["weight_alignment"]["angle"]],
          "CKA(wm, bp):", [c["mean"] for c in wm["cka_to_bp"]], "CKA(bp, bp):", [c["mean"] for c in bp["cka_to_bp"]])
    assert all(abs(c["mean"] - 1) < 1e-9 for c in bp["cka_to_bp"]) and len(wm["cka_to_bp"]) == 3
    assert "weight_alignment" not in bp and len(wm["weight_alignment"]["angle"]) == 3
    assert all(abs(d["p50"]["mean"] - 1) < 1e-6 for d in bp["per_sample_cosine"])
    assert (out / "per_sample_cosine.png").stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "Linear CKA to BP" in md and "Weight alignment" in md and "Per-example credit cosine" in md


def test_a_diverged_run_without_a_checkpoint_leaves_the_others_cka(tmp_path):
    """A diverged run keeps no usable weights; its missing checkpoint emptied the whole CKA column of the audit
    (the SGD field audit: dfa diverged in epoch 1, so bp's and fa's CKA were not reported)."""
    from depthaudit.cli import main
    from depthaudit.data import load_data
    from depthaudit.experiments.audit import cka_to_bp

    out = tmp_path / "a"
    assert main(["audit", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--methods", "bp", "fa", "--probe-batches", "1", "--out", str(out)]) == 0
    recs = {}
    for p in (out / "runs").glob("*_all_*/result.json"):
        rec = json.loads(p.read_text())
        recs[f"{rec['config']['method']}/trained/s42"] = rec
    data = load_data("mnist1d", None, False, "cpu")
    both = cka_to_bp(recs, ("bp", "fa"), (42,), data, out / "runs", 1, 128)
    assert set(both) == {"bp", "fa"}
    fa = next((out / "runs").glob("*_fa_all_*"))
    (fa / "checkpoint.pt").unlink()
    recs["fa/trained/s42"]["status"] = "diverged"  # (as a diverged run is stored: no usable weights)
    got = cka_to_bp(recs, ("bp", "fa"), (42,), data, out / "runs", 1, 128)
    print(got)
    assert set(got) == {"bp"} and got["bp"] == both["bp"]


def test_a_method_whose_checkpoint_is_missing_loses_its_cka_alone(tmp_path, capsys):
    """A folder grown across sessions: early runs' checkpoints gone (git-ignored), later runs' there. One missing
    checkpoint emptied the whole CKA column; now that method alone has none (said), the others keep theirs."""
    from depthaudit.cli import main
    from depthaudit.data import load_data
    from depthaudit.experiments.audit import cka_to_bp

    out = tmp_path / "a"
    assert main(["audit", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--methods", "bp", "fa", "dfa", "--seeds", "42", "7", "--probe-batches", "1", "--out",
                 str(out)]) == 0
    recs = {}
    for p in (out / "runs").glob("*_all_*/result.json"):
        rec = json.loads(p.read_text())
        recs[f"{rec['config']['method']}/trained/s{rec['config']['seed']}"] = rec
    data = load_data("mnist1d", None, False, "cpu")
    every = cka_to_bp(recs, ("bp", "fa", "dfa"), (42, 7), data, out / "runs", 1, 128)
    assert set(every) == {"bp", "fa", "dfa"}
    gone = next(p for p in (out / "runs").glob("*_fa_all_*") if json.loads(
        (p / "result.json").read_text())["config"]["seed"] == 7)
    (gone / "checkpoint.pt").unlink()  # one seed of fa: fa has no CKA (no seed averaged without it)
    capsys.readouterr()
    got = cka_to_bp(recs, ("bp", "fa", "dfa"), (42, 7), data, out / "runs", 1, 128)
    print(sorted(got))
    assert set(got) == {"bp", "dfa"} and got["dfa"] == every["dfa"] and got["bp"] == every["bp"]
    assert "checkpoint.pt is missing, so fa has no CKA to BP in the report" in capsys.readouterr().err
