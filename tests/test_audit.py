"""The audit protocol: D1/D2/D3 on constructed cases, per-layer vs aggregate cosine, report schema."""

import json
import math
from importlib.resources import files

import jsonschema
import pytest
import torch

from depthaudit.cli import main
from depthaudit.diagnostics import CreditCosine, Probe, ReferenceNorm, StreamNorms, Tracker, aggregate_cosines, cosine
from depthaudit.diagnostics.identity import identity_stats
from depthaudit.methods import build_method
from depthaudit.models import build_model
from depthaudit.verdicts import Thresholds, accuracy_gap_pp, check_d1, check_d2, check_d3, mean_std

TH = Thresholds()


def _model(arch="resmlp", seed=0, d=32, L=4):
    return build_model(arch, (40,), 10, d, L, 4, seed)


def _batch(n=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 40, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_bp_per_layer_cosines_are_one_on_a_healthy_model():
    model = _model()
    x, y = _batch()
    out = CreditCosine().compute(Probe(model, build_method("bp", model, 0), x, y))
    print("BP per-layer cosines:", out["per_layer"])
    assert len(out["per_layer"]) == 5
    assert max(abs(c - 1) for c in out["per_layer"]) < 1e-5
    assert abs(out["concat"] - 1) < 1e-5 and abs(out["mean_per_layer"] - 1) < 1e-5


def test_fa_per_layer_cosine_uses_an_independent_reference():
    model = _model()
    x, y = _batch()
    probe = Probe(model, build_method("fa", model, 3), x, y)
    # reference equals autograd's gradient of the summed loss w.r.t. every h_l
    logits, states = model(x, return_states=True)
    ref = torch.autograd.grad(torch.nn.functional.cross_entropy(logits, y, reduction="sum"), states)
    assert max((a - b).abs().max().item() for a, b in zip(ref, probe.reference, strict=True)) < 1e-5
    cos = CreditCosine().compute(probe)["per_layer"]
    assert all(abs(c) < 0.99 for c in cos[:-1])  # random feedback: not BP


def test_d1_flags_an_exploded_stream_and_passes_a_healthy_one():
    model = _model()
    x, y = _batch()
    healthy = StreamNorms().compute(Probe(model, build_method("bp", model, 0), x, y))
    with torch.no_grad():
        model.blocks[2].fc2.weight.mul_(1e4)  # block 3 now writes a huge update into the stream
    exploded = StreamNorms().compute(Probe(model, build_method("bp", model, 0), x, y))
    print("rho healthy", healthy["rho"], "exploded", exploded["rho"])
    assert check_d1(healthy["rho"], TH)["status"] == "PASS"
    assert check_d1(exploded["rho"], TH)["status"] == "FLAG"
    assert exploded["rho"] == pytest.approx(exploded["norms"][3] / exploded["norms"][2])
    assert check_d1(math.inf, TH)["status"] == "FLAG" and check_d1(math.nan, TH)["status"] == "FLAG"


def _scaled(arch, scale):
    model = _model(arch)
    with torch.no_grad():
        model.embed.proj.weight.mul_(scale)
    return model


def test_d2_flags_a_reference_at_the_floor_and_that_cosine_is_noise():
    x, y = _batch()
    eps = TH.eps
    res = {}
    for name, model in (("healthy", _scaled("resmlp", 1.0)), ("scaled", _scaled("resmlp", 1e10)),
                        ("scaled_no_terminal_ln", _scaled("studentnet", 1e10))):
        probe = Probe(model, build_method("fa", model, 1), x, y)
        g_l = ReferenceNorm().compute(probe)["g_L"]
        c, g = probe.credits[-1].double(), probe.reference[-1].double()
        reported = cosine(c, g, eps)
        # the perturbation that flips the reported cosine's sign: remove twice g's component along c
        u = c / c.norm()
        flip = -2 * (g.flatten() @ u.flatten()) * u
        # the most any perturbation of norm eps (1e-8, far below a meaningful gradient) can move it
        sway = max(abs(cosine(c, g + s * eps * d, eps) - reported) for s in (1, -1) for d in (u, g / g.norm()))
        res[name] = dict(g_l=g_l, d2=check_d2(g_l, TH)["status"], cos=reported, flip_norm=flip.norm().item(),
                         flipped=cosine(c, g + flip, eps), sway=sway)
        print(name, {k: (f"{v:.3e}" if isinstance(v, float) else v) for k, v in res[name].items()})
    h, s_, ctl = res["healthy"], res["scaled"], res["scaled_no_terminal_ln"]
    assert h["d2"] == "PASS" and h["sway"] < 1e-6 and h["flip_norm"] > 1e6 * eps
    # terminal LN turns the exploded stream into a vanishing reference: D2 flags it ...
    assert s_["g_l"] < 10 * eps and s_["d2"] == "FLAG"
    # ... and there a perturbation smaller than eps flips the reported cosine: it is noise, not alignment
    assert s_["flip_norm"] < eps and s_["flipped"] == pytest.approx(-s_["cos"], rel=1e-6)
    # the control without terminal LN keeps a valid reference at the same stream scale
    assert ctl["d2"] == "PASS" and ctl["flip_norm"] > 1e6 * eps


def test_aggregate_masks_credit_aligned_at_one_end_only():
    # hand-built: g_l = e1 (norm 1) for l < L, g_L = 10·e1; credit c_l = e2 ⟂ g_l below, c_L = g_L
    L, n = 4, 8
    e1, e2 = torch.zeros(n), torch.zeros(n)
    e1[0], e2[1] = 1.0, 1.0
    ref = [e1.clone() for _ in range(L)] + [10 * e1]
    cred = [e2.clone() for _ in range(L)] + [10 * e1]
    out = aggregate_cosines(cred, ref, 1e-8)
    assert out["per_layer"] == pytest.approx([0, 0, 0, 0, 1])
    assert out["mean_per_layer"] == pytest.approx(1 / 5)
    assert out["concat"] == pytest.approx(100 / 104)  # ⟨c,g⟩ = 100, ‖c‖² = ‖g‖² = 100 + 4
    print("concat aggregate", out["concat"], "hides per-layer", out["per_layer"])


def test_d3_arithmetic_and_thresholds():
    assert accuracy_gap_pp(0.75, 0.70) == pytest.approx(5.0)
    c = check_d3(accuracy_gap_pp(0.75, 0.70), TH)
    assert c["status"] == "PASS" and c["margin"] == pytest.approx(3.0) and c["margin_unit"] == "pp"
    c = check_d3(accuracy_gap_pp(0.71, 0.70), TH)
    assert c["status"] == "FLAG" and c["margin"] == pytest.approx(-1.0)
    assert check_d3(accuracy_gap_pp(0.60, 0.70), TH)["status"] == "FLAG"  # harmful depth
    assert check_d3(1.0, Thresholds(gap_min_pp=0.5))["status"] == "PASS"
    c = check_d2(1e-6, TH)
    assert c["margin"] == pytest.approx(1.0) and c["status"] == "PASS"  # one decade above 1e-7


def test_mean_std_uses_ddof_1():
    ms = mean_std([1.0, 2.0, 3.0, 4.0])
    assert ms["mean"] == 2.5 and ms["std"] == pytest.approx(math.sqrt(5 / 3)) and ms["n"] == 4
    assert mean_std([0.3]) == {"mean": 0.3, "std": None, "n": 1}
    assert mean_std([None, 1.0, 3.0])["n"] == 2


def test_tracker_reads_without_touching_gradients_or_weights():
    model = _model()
    x, y = _batch()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    from depthaudit.diagnostics import audit_tracker

    for name in ("bp", "fa", "dfa"):
        out = audit_tracker(x, y)(1, model, build_method(name, model, 0))
        assert set(out) == {"credit_cosine", "update_cosine", "stream", "reference"}
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    t = Tracker(x, y, [StreamNorms(every=5)])
    assert t(3, model, None) is None and t(5, model, build_method("bp", model, 0)) is not None


def test_identity_check_on_zero_output_blocks_is_exact():
    model = _model()
    x, _ = _batch()
    with torch.no_grad():
        for blk in model.blocks:
            blk.fc2.weight.zero_()
    s = identity_stats(model, x)
    assert s["block_ratio"] == [0.0] * 4 and s["stack_rel_change"] == 0.0
    assert s["stack_cos"] == pytest.approx(1.0)


def test_default_audit_end_to_end_and_report_schema(tmp_path, capsys):
    out = tmp_path / "audit"
    args = ["audit", "--epochs", "2", "--d-hidden", "32", "--num-blocks", "3", "--seeds", "1", "2",
            "--probe-batches", "2", "--probe-batch-size", "64", "--out", str(out)]
    assert main(args) == 0
    card = capsys.readouterr().out
    assert "Standard pair vs protocol" in card and "dfa" in card
    report = json.loads((out / "report.json").read_text())
    schema = json.loads(files("depthaudit.report").joinpath("audit.schema.json").read_text())
    jsonschema.validate(report, schema)
    assert [m["method"] for m in report["methods"]] == ["bp", "fa", "dfa"]
    bp = report["methods"][0]
    assert bp["n_seeds"] == 2 and bp["standard_pair"]["test_acc"]["std"] is not None
    assert all(abs(c["mean"] - 1) < 1e-4 for c in bp["per_layer_cosine"])
    assert bp["history"]["epochs"] == [0, 1, 2]
    # D3 in the report is exactly the arithmetic on the stored runs
    runs = {json.loads(p.read_text())["config"]["train_blocks"] + str(json.loads(p.read_text())["config"]["seed"]):
            json.loads(p.read_text()) for p in (out / "runs").glob("*bp*/result.json")}
    gaps = [100 * (runs[f"all{s}"]["final"]["test_acc"] - runs[f"none{s}"]["final"]["test_acc"]) for s in (1, 2)]
    assert bp["checks"]["D3"]["value"] == pytest.approx(sum(gaps) / 2)
    for f in ("report.md", "cosine_heatmap.png", "scale_checks.png", "depth_utility.png"):
        assert (out / f).stat().st_size > 0
    # rerunning reuses every finished run and reproduces the verdicts
    assert main(args) == 0
    assert "12 of 12 runs already finished" in capsys.readouterr().err
    again = json.loads((out / "report.json").read_text())
    assert again["methods"] == report["methods"]


def test_audit_rejects_unknown_method(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["audit", "--methods", "bp", "nope", "--out", str(tmp_path / "a")])
    assert e.value.code == 2 and not (tmp_path / "a").exists()


def test_default_audit_command_runs_end_to_end(tmp_path):
    """`depthaudit audit` with every default except fewer epochs, as a user runs it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "depthaudit.cli", "audit", "--epochs", "2", "--out", str(tmp_path / "a")],
                       capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "[####################] 6/6 runs" in p.stderr  # progress shown
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    base = report["config"]["base"]
    assert (base["dataset"], base["arch"], base["d_hidden"], base["num_blocks"]) == ("mnist1d", "resmlp", 256, 4)
    assert [m["method"] for m in report["methods"]] == ["bp", "fa", "dfa"]
    for m in report["methods"]:  # the card states what it measured: every check has a value and a status
        for c in m["checks"].values():
            assert c["status"] in ("PASS", "FLAG") and c["value"] is not None
    assert "D1 ρ" in p.stdout and "Frozen-init identity" in p.stdout
