"""Walk 26's wrong and unclear cases, each reproduced as the walker did it (docs/walks/walk26_*.txt)."""

import os

import pytest

import depthaudit as da
from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_the_same_command_with_probe_batches_beyond_the_split_reuses_its_report(tmp_path, capsys):
    """Cases 27–29, 34: --probe-batches 20 (15 fit the split, 15 recorded) was "another audit" than its own report
    when run again, grown, or assembled from --cell runs."""
    out = str(tmp_path / "a")
    args = ["audit", *C, "--seeds", "1", "--probe-batches", "20", "--out", out]
    assert main([*args, "--methods", "bp"]) == 0
    assert "measuring (and recording) 15 batches" in capsys.readouterr().err
    assert main([*args, "--methods", "bp"]) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    assert main([*args, "--methods", "bp", "fa"]) == 0  # grown
    assert "2 of 4 runs already finished" in capsys.readouterr().err
    cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1),
                         methods=("bp", "fa"), seeds=(1,), probe_batches=20)
    assert da.audit(cfg, out, progress=False).record["config"]["probe_batches"] == 15


def test_an_unfinished_growth_is_named_as_one_not_as_an_edit(tmp_path, capsys):
    """Case 38: after a growth that stopped before its report, the original command was told the claim "was edited"."""
    out = tmp_path / "g"
    args = ["audit", *C, "--methods", "bp", "--probe-batches", "1", "--probe-batch-size", "32", "--out", str(out)]
    assert main([*args, "--seeds", "1"]) == 0
    from depthaudit.api import audit_identity  # noqa: I001 (the claim a growth to seeds 1 2 makes before it trains)
    from depthaudit.stores import claim_folder
    grown = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1),
                           methods=("bp",), seeds=(1, 2), probe_batches=1, probe_batch_size=32)
    import json

    sha = json.loads((out / "report.json").read_text())["provenance"]["data"]["sha256"]
    claim_folder(out, "audit", audit_identity(grown, sha))
    capsys.readouterr()
    assert main([*args, "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "is claimed by an audit with more seeds that has not finished" in err and "edited" not in err
    assert "to finish it, name everything it holds too (seeds 1 2)" in err
    assert main([*args, "--seeds", "1", "2"]) == 0  # following it


def test_a_fifo_at_a_report_file_is_refused_before_training(tmp_path, capsys):
    """Case 36: a FIFO at cosine_heatmap.png was refused only after the growth's runs had trained."""
    out = tmp_path / "g"
    args = ["audit", *C, "--methods", "bp", "--probe-batches", "1", "--probe-batch-size", "32", "--out", str(out)]
    assert main([*args, "--seeds", "1"]) == 0
    (out / "cosine_heatmap.png").unlink()
    os.mkfifo(out / "cosine_heatmap.png")
    n = len(list((out / "runs").iterdir()))
    capsys.readouterr()
    assert main([*args, "--seeds", "1", "2"]) == 2
    err = capsys.readouterr().err
    assert "cosine_heatmap.png is a FIFO" in err and "run bp/trained/s2" not in err
    assert len(list((out / "runs").iterdir())) == n


def test_report_of_a_fifo_record_advises_what_works(tmp_path, capsys):
    """Case 6: report named a FIFO ladder record and advised the rerun, which refuses it (walk 25 W2's fix)."""
    out = tmp_path / "l"
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
                 "--out", str(out)]) == 0
    rec = next(out.glob("ladder_*.runs")) / "bp%2Fk1%2Fs1.json"
    rec.unlink()
    os.mkfifo(rec)
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "no rerun replaces it: move it away, then rerun the ladder command" in err


def test_a_method_spec_in_the_method_field_advises_typed_options():
    """Case 17: the advice method_options={'beta': '0.1'} (a string) was itself refused as not a number."""
    with pytest.raises(da.ConfigError) as exc:
        da.TrainConfig(method="ep:beta=0.1")
    assert "method_options={'beta': 0.1}" in str(exc.value)
    assert da.TrainConfig(method="ep", method_options={"beta": 0.1}).method_options["beta"] == 0.1


def test_probes_of_another_recipe_are_refused_without_an_advice_that_fails(tmp_path, capsys):
    """Case 70: probes with another --lr into a probes folder advised --replace-report, which the α sweep's store
    (one configuration per file) then refused."""
    out = str(tmp_path / "p")
    args = ["probes", *C, "--method", "fa", "--seeds", "1", "--alphas", "0", "1", "--probe-batches", "1",
            "--probe-batch-size", "32", "--out", out]
    assert main(args) == 0
    claim = (tmp_path / "p" / "probes_fa.identity.json").read_bytes()
    capsys.readouterr()
    assert main([*args, "--lr", "0.005"]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "credit_mix_fa_d8_L1_mnist1d.json holds runs of a different configuration (differs in: lr)" in err
    assert "--replace-report" not in err
    assert (tmp_path / "p" / "probes_fa.identity.json").read_bytes() == claim  # the claim untouched


def test_a_margin_that_is_not_zero_never_prints_as_zero():
    """Case 68: a D1 pass by 0.001 decade printed its margin "+0.0" (beside another row's "−0.004")."""
    from depthaudit.verdicts import Thresholds, check_cells, check_d1, check_d3

    th = Thresholds()
    assert check_cells(check_d1(49.9, th), ".3g") == ("49.9", "+0.001")
    assert check_cells(check_d3(2.0, th), "+.1f") == ("+2.0", "+0.0")  # a zero margin is zero


def test_the_probes_warm_start_store_is_no_output_folder(tmp_path, capsys):
    """Cases 102, 103: an audit into PR/warm_start (the probes' BP warm-start store) took the probes' runs for its
    own, advised moving them away, and claimed the folder (train then called it the audit's)."""
    out = tmp_path / "p"
    assert main(["probes", *C, "--method", "fa", "--seeds", "1", "--alphas", "0", "--pre-epochs", "1",
                 "--probe-batches", "1", "--probe-batch-size", "32", "--out", str(out)]) == 0
    before = sorted(p.name for p in (out / "warm_start").rglob("*"))
    capsys.readouterr()
    for argv in (["audit", *C, "--methods", "bp", "--seeds", "1", "--out"], ["train", *C, "--out"],
                 ["ladder", *C, "--methods", "bp", "--seeds", "1", "--output_dir"]):
        assert main([*argv, str(out / "warm_start")]) == 2
        err = capsys.readouterr().err
        assert "it is the BP warm-start store of the probes in" in err, err
    assert sorted(p.name for p in (out / "warm_start").rglob("*")) == before


def test_a_report_defines_the_statistic_and_floor_it_measured_with(tmp_path):
    """Cases 133, 134: --d1-stat mean and --eps 1e-6 audits' definitions (and the Γ title) described the defaults."""
    import json

    out = tmp_path / "a"
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
                 "--d1-stat", "mean", "--eps", "1e-6", "--out", str(out)]) == 0
    defs = json.loads((out / "report.json").read_text())["definitions"]
    assert "= mean over probe examples" in defs["rho"] and "median" not in defs["rho"]
    assert "eps=1e-06" in defs["cosine"] and "eps=1e-8" not in defs["cosine"]
    md = (out / "report.md").read_text()
    assert "ε = 1e-06, fp32" in md and "ε = 1e-8" not in md


def test_an_unknown_warmup_method_is_refused_even_at_fraction_zero(tmp_path, capsys):
    """Case 120: --warmup nonsense --warmup-fraction 0 trained (noted idle); Python's TrainConfig refuses it."""
    assert main(["train", *C, "--warmup", "nonsense", "--warmup-fraction", "0", "--out", str(tmp_path / "t")]) == 2
    assert "--warmup 'nonsense': unknown method 'nonsense'" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
    with pytest.raises(da.ConfigError):
        da.TrainConfig(dataset="mnist1d", warmup="nonsense", warmup_fraction=0.0)


def test_a_plugin_familys_other_setting_is_another_configuration(tmp_path, capsys):
    """Cases 110, 111: a plug-in family (no saturation_identity) under another --d-hidden or --base-blocks had its
    stored depths "changed files": retrained and replaced by another configuration's."""
    from depthaudit.experiments.families import FAMILIES, DepthFamily
    from depthaudit.models import build_model

    @FAMILIES.register("wide26t")
    class Wide26(DepthFamily):
        help = "the reference ResMLP at d=8"

        def build(self, run, data, device):
            return build_model("resmlp", data.input_shape, data.num_classes, 8, run.base_blocks + run.extra, None,
                               run.seed).to(device)

    try:
        out = tmp_path / "s"
        args = ["saturation", "--family", "wide26t", "--dataset", "mnist1d", "--epochs", "1", "--extra", "0", "1",
                "--out", str(out)]
        assert main(args) == 0
        f = next(out.glob("saturation_*.json"))
        before = f.read_bytes()
        capsys.readouterr()
        assert main([*args, "--base-blocks", "2"]) == 2
        err = capsys.readouterr().err
        print(err)
        assert "holds runs of a different configuration (its run N0 differs in: base_blocks)" in err
        assert "will replace it" not in err and f.read_bytes() == before
        assert main(args) == 0 and "2 of 2 runs already finished" in capsys.readouterr().err
    finally:
        FAMILIES._items.pop("wide26t", None)
        FAMILIES._meta.pop("wide26t", None)


def test_a_live_log_without_training_needs_no_logger_installed(tmp_path, monkeypatch, capsys):
    """Cases 158, 159: --log wandb with --stored-only was noted idle, then refused for want of wandb."""
    import sys

    out = str(tmp_path / "a")
    args = ["audit", *C, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
            "--out", out]
    assert main(args) == 0
    monkeypatch.setitem(sys.modules, "wandb", None)  # as on a machine without it (the import fails)
    capsys.readouterr()
    assert main([*args, "--stored-only", "--log", "wandb"]) == 0
    assert "--log has no effect with --stored-only" in capsys.readouterr().err
    assert main([*args, "--list-cells", "--log", "wandb"]) == 0
    assert main([*args, "--log", "wandb"]) == 2  # where it would log: the missing package is named
    assert "needs Weights & Biases" in capsys.readouterr().err


def test_an_executor_without_training_needs_no_scheduler(tmp_path, monkeypatch, capsys):
    """Case 160: --executor slurm --stored-only (nothing trains) was refused: "no SLURM here (sbatch …)"."""
    import shutil

    assert shutil.which("sbatch") is None  # (this machine has no SLURM, as the walker's)
    out = str(tmp_path / "a")
    args = ["audit", *C, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
            "--out", out]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--stored-only", "--executor", "slurm"]) == 0
    assert "--executor has no effect with --stored-only: nothing trains" in capsys.readouterr().err
    assert main([*args, "--executor", "slurm"]) == 2  # where it would train: refused, named
    assert "no SLURM here" in capsys.readouterr().err


def test_a_card_names_a_penalty_and_an_mlp_ratio_a_run_changed():
    """Case 131: a penalised or --mlp-ratio 3 audit's card header read exactly like the plain recipe's."""
    from depthaudit.experiments.families import budget_text

    base = {"epochs": 5, "optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.01, "batch_size": 128, "arch": "resmlp",
            "variant": "ref", "mlp_ratio": 1, "scale_penalty": 0.0}
    assert budget_text(base) == "5 epochs"
    assert budget_text({**base, "scale_penalty": 0.1, "penalty_form": "rel", "penalty_reduction": "example",
                        "mlp_ratio": 3}) == "5 epochs, scale penalty λ 0.1 (rel, example), mlp ratio 3"
    assert budget_text({**base, "variant": "v0.1", "mlp_ratio": 4}) == "5 epochs"  # that variant's own ratio


def test_a_spec_of_an_unknown_method_names_the_method(tmp_path):
    """Walk 27 case 35: TrainConfig(method="o26:k=3") (o26 not registered) advised method='o26', itself unknown."""
    with pytest.raises(da.ConfigError) as exc:
        da.TrainConfig(dataset="mnist1d", method="o26:k=3")
    print(exc.value)
    assert "method 'o26' not known; use one of" in str(exc.value) and "is a method spec" not in str(exc.value)


def test_train_into_another_commands_folder_leaves_no_lock(tmp_path, capsys):
    """Walk 27 W4 (cases 165, 166): train --out <an audit folder> was refused but left a new .train.lock there."""
    out = tmp_path / "a"
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
                 "--out", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["train", *C, "--out", str(out)]) == 2
    assert "holds the results of another command (audit); train cannot write there" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before
