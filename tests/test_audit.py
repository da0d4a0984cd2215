"""The audit protocol: D1/D2/D3 on constructed cases, per-layer vs aggregate cosine, report schema."""

import json
import math
from importlib.resources import files

import jsonschema
import numpy as np
import pytest
import torch

from depthaudit.cli import main
from depthaudit.diagnostics import (
    CreditCosine,
    Monitor,
    ReferenceNorm,
    RobustCosine,
    Snapshot,
    StreamNorms,
    Tracker,
    robust_aggregates,
    standard_cosines,
)
from depthaudit.diagnostics.identity import identity_stats
from depthaudit.methods import build_method
from depthaudit.models import build_model
from depthaudit.verdicts import Thresholds, accuracy_gap_pp, check_d1, check_d2, check_d3, mean_std

TH = Thresholds()


def _model(arch="resmlp", seed=0, d=32, L=4):
    return build_model(arch, (40,), 10, d, L, None, seed)


def _batches(n=2, b=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(b, 40, generator=g), torch.randint(0, 10, (b,), generator=g)) for _ in range(n)]


def _probe(model, method="bp", batches=None, seed=0):
    return Snapshot(model, build_method(method, model, seed), batches or _batches())


def test_bp_standard_and_robust_cosines_are_one_on_a_healthy_model():
    model = _model()
    p = _probe(model)
    std, rob = CreditCosine().compute(p), RobustCosine().compute(p)
    print("BP standard per-layer:", std["per_layer"], "robust:", rob["per_layer"])
    assert len(std["per_layer"]) == 5
    assert max(abs(c - 1) for c in std["per_layer"]) < 1e-6  # fp32 precision
    assert max(abs(c - 1) for c in rob["per_layer"]) < 1e-12 and abs(rob["concat"] - 1) < 1e-12
    assert all(c <= 1 for c in std["per_layer"] + rob["per_layer"])  # clamped: no stored cosine above 1


def test_standard_cosine_is_the_fields_per_example_mean_loss_cosine():
    model = _model()
    batches = _batches()
    p = _probe(model, "fa", batches, seed=3)
    # independent reference: per batch, autograd of the MEAN loss w.r.t. every h_l, then the field's
    # per-example F.cosine_similarity against the method's credit in the same (mean-loss) convention
    refs = []
    for x, y in batches:
        logits, states = model(x, return_states=True)
        refs.append(torch.autograd.grad(torch.nn.functional.cross_entropy(logits, y), states))
    ref = [torch.cat(r) for r in zip(*refs, strict=True)]
    assert max(((a / 64) - b).abs().max().item() for a, b in zip(p.reference, ref, strict=True)) < 1e-7
    want = [torch.nn.functional.cosine_similarity(c / 64, g, dim=1, eps=1e-8).mean().item()
            for c, g in zip(p.credits, ref, strict=True)]
    got = CreditCosine().compute(p)["per_layer"]
    print("FA standard cosine", got, "independent", want)
    assert got == pytest.approx(want, abs=1e-6)
    assert all(abs(c) < 0.99 for c in got[:-1])  # random feedback: not BP
    # D2's value is the median per-example norm of that same mean-loss g_L
    g_l = ReferenceNorm().compute(p)["g_L"]
    assert g_l == pytest.approx(float(np.median(ref[-1].norm(dim=1).numpy())), rel=1e-6)


def test_d1_uses_median_norms_flags_an_exploded_stream_and_passes_a_healthy_one():
    model = _model()
    healthy = StreamNorms().compute(_probe(model))
    with torch.no_grad():
        model.blocks[2].fc2.weight.mul_(1e4)  # block 3 now writes a huge update into the stream
    p = _probe(model)
    exploded = StreamNorms().compute(p)
    med = [float(np.median(h.flatten(1).norm(dim=1).numpy())) for h in p.states]  # numpy's median, independent
    print("rho healthy", healthy["rho"], "exploded", exploded["rho"])
    assert exploded["norms"] == pytest.approx(med, rel=1e-6)
    assert check_d1(healthy["rho"], TH)["status"] == "PASS"
    assert check_d1(exploded["rho"], TH)["status"] == "FLAG"
    assert exploded["rho"] == pytest.approx(exploded["norms"][3] / exploded["norms"][2])
    assert StreamNorms(stat="mean").compute(p)["rho"] == pytest.approx(exploded["rho_mean"])
    assert check_d1(math.inf, TH)["status"] == "FLAG" and check_d1(math.nan, TH)["status"] == "FLAG"


def test_d2_threshold_sits_at_the_standard_cosines_own_degeneracy_point():
    # constructed: the same vectors scaled through the floor; the field's cosine of BP with itself is
    # min(1, (|g|/eps)^2) per example: exact down to |g| = eps, collapsing below. D2 fires at 10 eps, one
    # decade before that point, and never while the cosine is degenerate
    g = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    g = g / g.norm(dim=1, keepdim=True)  # unit per-example norms
    rows = []
    for scale in (1e-3, 1e-6, 1.01e-7, 5e-8, 1e-8, 5e-9, 1e-9, 1e-10):
        gs = g * scale * 64  # per-example convention; ÷ B_p = 64 gives per-example mean-loss norm = scale
        std = standard_cosines([gs], [gs], 64, 1e-8)[0]
        rob = robust_aggregates([gs], [gs])["per_layer"][0]
        d2 = check_d2(scale, TH)["status"]
        rows.append((scale, std, rob, d2))
        print(f"|g| {scale:.0e}: standard {std:.6f} robust {rob:.6f} D2 {d2}")
        assert rob == pytest.approx(1.0, abs=1e-12)  # the direction is still perfectly aligned
        assert std == pytest.approx(min(1.0, (scale / 1e-8) ** 2), rel=1e-3)  # F.cosine_similarity's floor
        assert d2 == ("PASS" if scale >= 1e-7 else "FLAG")
        if std < 1 - 1e-6:  # wherever the standard cosine has degenerated, D2 has fired
            assert d2 == "FLAG"
    assert rows[-1][1] < 1e-3


def _scaled(arch, scale):
    model = _model(arch)
    with torch.no_grad():
        model.embed.proj.weight.mul_(scale)
        model.embed.proj.bias.mul_(scale)
    return model


def test_d2_flags_an_exploded_terminal_ln_model_where_the_standard_cosine_collapses():
    res = {}
    for name, model in (("healthy", _scaled("resmlp", 1.0)), ("scaled", _scaled("resmlp", 1e10)),
                        ("scaled_no_terminal_ln", _scaled("studentnet", 1e10))):
        p = _probe(model, "bp")
        g_l = ReferenceNorm().compute(p)["g_L"]
        std = CreditCosine().compute(p)["per_layer"][-1]
        rob = RobustCosine().compute(p)["per_layer"][-1]
        live = (p.reference[-1].flatten(1).norm(dim=1) > 0).double().mean().item()  # saturated examples: g = 0
        res[name] = dict(g_l=g_l, d2=check_d2(g_l, TH)["status"], std=std, rob=rob, live=live)
        print(name, {k: (f"{v:.3e}" if isinstance(v, float) else v) for k, v in res[name].items()})
    h, s_, ctl = res["healthy"], res["scaled"], res["scaled_no_terminal_ln"]
    assert h["d2"] == "PASS" and h["std"] == pytest.approx(1, abs=1e-6)
    # terminal LN turns the exploded stream into a vanishing reference: D2 flags it, and there even BP's
    # own standard cosine (credit = reference) has collapsed toward 0 while the robust one stays 1
    assert s_["g_l"] < 10 * TH.eps and s_["d2"] == "FLAG" and s_["std"] < 0.01 and s_["rob"] == pytest.approx(1)
    # the control without terminal LN keeps a valid reference at the same stream scale: Γ_L is 1 on every
    # example whose gradient is not exactly 0 (saturated softmax; F.cosine_similarity(0, 0) = 0)
    assert ctl["d2"] == "PASS" and ctl["std"] == pytest.approx(ctl["live"], abs=1e-6)


def test_aggregate_masks_credit_aligned_at_one_end_only():
    # hand-built: g_l = e1 (norm 1) for l < L, g_L = 10·e1; credit c_l = e2 ⟂ g_l below, c_L = g_L
    L, n = 4, 8
    e1, e2 = torch.zeros(1, n), torch.zeros(1, n)
    e1[0, 0], e2[0, 1] = 1.0, 1.0
    ref = [e1.clone() for _ in range(L)] + [10 * e1]
    cred = [e2.clone() for _ in range(L)] + [10 * e1]
    out = robust_aggregates(cred, ref)
    assert out["per_layer"] == pytest.approx([0, 0, 0, 0, 1])
    assert out["mean_per_layer"] == pytest.approx(1 / 5)
    assert out["concat"] == pytest.approx(100 / 104)  # ⟨c,g⟩ = 100, ‖c‖² = ‖g‖² = 100 + 4
    assert standard_cosines(cred, ref, 1, 1e-8) == pytest.approx([0, 0, 0, 0, 1])
    print("concat aggregate", out["concat"], "hides per-layer", out["per_layer"])


def test_monitor_records_first_firing_and_stop_on_flag_ends_the_run(tmp_path):
    m = Monitor(rho_max=50, g_min=1e-7)
    assert m.update(0, {"stream": {"rho": 2.0}, "reference": {"g_L": 1e-3}}) == []
    assert m.update(1, {"stream": {"rho": 80.0}, "reference": {"g_L": 1e-3}}) == ["D1"]
    assert m.update(2, {"stream": {"rho": 90.0}, "reference": {"g_L": 1e-9}}) == ["D2"]
    assert m.update(3, {"stream": {"rho": 90.0}, "reference": {"g_L": 1e-9}}) == []
    assert m.fired["D1"]["epoch"] == 1 and m.fired["D2"]["epoch"] == 2 and not m.should_stop
    # in a real run: a D2 level no healthy model can pass (g_min = 1) fires at init; with stop-on-flag
    # the run ends there and is recorded, without it training goes on and the firing epoch is kept
    from depthaudit.config import TrainConfig
    from depthaudit.data import load_data
    from depthaudit.diagnostics import audit_tracker
    from depthaudit.loop import train
    from depthaudit.runner import probe_batches

    data = load_data("mnist1d", None, False, torch.device("cpu"))
    cfg = TrainConfig(d_hidden=32, num_blocks=2, epochs=3, method="dfa")
    for stop in (False, True):
        run = train(cfg, data, log=lambda _: None, tracker=audit_tracker(probe_batches(data, 0, 1, 64)),
                    monitor=Monitor(rho_max=50, g_min=1.0, stop_on_flag=stop))
        assert run.monitor["fired"]["D2"]["epoch"] == 0 and run.monitor["fired"]["D1"] is None
        if stop:
            assert run.status == "stopped_flagged" and run.final["epochs_completed"] == 0
        else:
            assert run.status == "ok" and run.final["epochs_completed"] == 3


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
    batches = _batches()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    from depthaudit.diagnostics import audit_tracker

    for name in ("bp", "fa", "dfa"):
        out = audit_tracker(batches)(1, model, build_method(name, model, 0))
        assert set(out) == {"credit_cosine", "robust_cosine", "update_cosine", "stream", "reference",
                            "per_sample_cosine", "weight_alignment"}
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    t = Tracker(batches, [StreamNorms(every=5)])
    assert t(3, model, None) is None and t(5, model, build_method("bp", model, 0)) is not None


def test_identity_check_on_zero_output_blocks_is_exact():
    model = _model()
    x, _ = _batches(1)[0]
    with torch.no_grad():
        for blk in model.blocks:
            blk.fc2.weight.zero_()
    s = identity_stats(model, x)
    assert s["block_ratio"] == [0.0] * 4 and s["stack_rel_change"] == 0.0
    assert s["stack_cos"] == pytest.approx(1.0) and s["per_example"]["stack_rel_change"] == 0.0


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
    dec = report["decision"]
    assert dec["n"] == 3 and dec["chance_acc"] == pytest.approx(0.1)
    assert dec["protocol_count"] == sum(bool(m["flags"]) for m in report["methods"])
    assert "Decision table: the standard pair walks back" in card
    bp = report["methods"][0]
    assert bp["n_seeds"] == 2 and bp["standard_pair"]["test_acc"]["std"] is not None
    assert all(abs(c["mean"] - 1) < 1e-6 for c in bp["per_layer_cosine"])
    assert bp["monitor"]["D1"]["first_fired_epoch"] == [None, None]
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
    assert main(["audit", "--methods", "bp", "nope", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown method 'nope'" in err and len(err.splitlines()) == 1 and not (tmp_path / "a").exists()


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


def test_a_gap_of_exactly_the_floor_passes_d3_whatever_the_float_rounding():
    """Walk 15 cases 70, 71: 100·(0.208 − 0.188) = 1.9999999999999991 flagged D3 at its 2 pp floor."""
    assert 100.0 * (0.208 - 0.188) < 2.0  # the float noise this guards against
    c = check_d3(accuracy_gap_pp(0.208, 0.188), TH)
    print(c)
    assert c["value"] == 2.0 and c["status"] == "PASS" and c["margin"] == 0.0
    mean_gap = mean_std([accuracy_gap_pp(0.208, 0.189), accuracy_gap_pp(0.209, 0.188)])["mean"]
    assert check_d3(mean_gap, TH)["status"] == "PASS"
    assert check_d3(accuracy_gap_pp(0.2079, 0.188), TH)["status"] == "FLAG"  # one example under: flagged
