"""Walk 18's causes: each reproduced as the walker did it, failing without its fix."""

import json
import os
import subprocess
import sys

import pytest

import depthaudit as da

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "2", "--epochs", "1"]


def test_python_refusals_of_optimizer_methods_and_augment_are_config_errors_naming_the_field(tmp_path):
    """Cases 55-57: an unknown optimizer, an unknown method in a sweep's methods, augment on a non-image dataset
    were plain UsageErrors without .field (the last in CLI wording)."""
    b = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1)
    cases = [(lambda: da.TrainConfig(optimizer="nope"), "optimizer", "optimizer 'nope' not known"),
             (lambda: da.AuditConfig(base=b, methods=("bp", "nope")), "methods", "unknown method 'nope'"),
             (lambda: da.LadderConfig(base=b, methods=("nope",)), "methods", "unknown method 'nope'"),
             (lambda: da.train(da.TrainConfig(dataset="mnist1d", augment="crop", d_hidden=8, num_blocks=2, epochs=1),
                               tmp_path / "t", progress=False), "augment", "use augment=none")]
    for make, field, text in cases:
        with pytest.raises(da.ConfigError) as exc:
            make()
        print(exc.value)
        assert exc.value.field == field and text in str(exc.value) and "--" not in str(exc.value)
    assert not (tmp_path / "t").exists()


def test_two_concurrent_grids_into_one_intervention_folder_say_which_report_was_replaced(tmp_path):
    """Cases 79, 80: two intervenes (λ 0.1 and 0.01) into one fresh folder both said "wrote …"; one report was
    silently gone. Whatever the timing, the one that writes second reads the first's grid under the folder's
    lock and says it replaced it; the file left is its grid."""
    out = tmp_path / "ci"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "depthaudit", "intervene", *TINY, "--methods", "bp", "--out", str(out), "--penalty"]
    procs = {lam: subprocess.Popen([*cmd, lam], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for lam in ("0.1", "0.01")}
    res = {lam: p.communicate(timeout=600) for lam, p in procs.items()}
    for lam, p in procs.items():
        print(lam, p.returncode, res[lam][1][-400:])
        assert p.returncode == 0
    noted = [lam for lam, (_, err) in res.items() if "note: replaced" in err]
    assert len(noted) == 1, noted
    left = json.loads((out / "intervention.json").read_text())["lambdas"]
    assert left == [0.0, float(noted[0])]
    other = "0.1" if noted[0] == "0.01" else "0.01"
    assert f"the report of the grid λ ∈ 0, {other}, by λ ∈ 0, {noted[0]}" in res[noted[0]][1]


def test_the_depth_sweeps_train_the_resmlp_under_either_optimizer(tmp_path, capsys):
    """Case 85: saturation/grow --family resmlp had no --optimizer although they train under the audit's recipe."""
    from depthaudit.cli import main

    sat = ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--extra", "0",
           "--epochs", "1"]
    assert main([*sat, "--optimizer", "sgd", "--out", str(tmp_path / "s")]) == 0
    doc = json.loads(next((tmp_path / "s").glob("saturation_*.json")).read_text())
    cfg = next(iter(doc["runs"].values()))["config"]
    assert (cfg["optimizer"], cfg["lr"], cfg["weight_decay"]) == ("sgd", 3e-4, 5e-4) and doc["identity"]["optimizer"]
    assert main([*sat, "--out", str(tmp_path / "a")]) == 0  # adamw: the file it always was (no optimizer entry)
    doc = json.loads(next((tmp_path / "a").glob("saturation_*.json")).read_text())
    cfg = next(iter(doc["runs"].values()))["config"]
    assert "optimizer" not in cfg and (cfg["lr"], cfg["weight_decay"]) == (1e-3, 0.01)  # the records it always held
    assert "optimizer" not in doc["identity"]
    g = da.GrowConfig(family="resmlp", dataset="mnist1d", d_hidden=8, extra=1, epochs=2, optimizer="sgd")
    assert g.lr == 3e-4 and g.weight_decay == 5e-4
    capsys.readouterr()
    assert main(["grow", "--family", "resnet", "--optimizer", "sgd", "--out", str(tmp_path / "g")]) == 2
    assert "the resnet family trains with AdamW" in capsys.readouterr().err and not (tmp_path / "g").exists()


def test_a_generated_datasets_no_effect_data_flags_make_no_other_configuration(tmp_path, capsys):
    """Cases 107, 137: --data-dir/--download were noted as having no effect with mnist1d, yet made "another
    configuration" (and another default folder) of the same run."""
    from depthaudit.cli import main

    assert da.TrainConfig(dataset="mnist1d", data_dir="/x", download=True) == da.TrainConfig(dataset="mnist1d")
    out = tmp_path / "dd"
    assert main(["train", *TINY, "--data-dir", "/nonexistent", "--out", str(out)]) == 0
    assert "--data-dir has no effect" in capsys.readouterr().err
    assert main(["train", *TINY, "--out", str(out)]) == 2
    assert "(this configuration's)" in capsys.readouterr().err


def test_identity_says_its_methods_are_idle_and_offers_no_hidden_flag_for_a_typo(capsys):
    """Cases 126, 127: identity took --methods silently, and --method was told "did you mean --methods?"."""
    from depthaudit.cli import main

    assert main(["identity", *TINY, "--seeds", "1", "--methods", "fa", "dfa"]) == 0
    assert "--methods have no effect with identity" in capsys.readouterr().err  # (with --epochs: both idle)
    assert main(["identity", *TINY, "--seeds", "1", "--method", "fa"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --method fa" in err and "did you mean" not in err
    assert main(["audit", *TINY, "--method", "fa"]) == 2
    assert "did you mean --methods?" in capsys.readouterr().err  # a flag the command shows: still offered


@pytest.mark.parametrize("what,text", [
    ("METHODS.register('r18m')(42)", "method 'r18m': register a class or function that builds it, not int 42"),
    ("MODELS.register('r18a')(5)", "arch 'r18a': register a class or function that builds it, not int 5"),
    ("DATASETS.register('r18d', epochs=-1)(lambda data_dir=None, download=False: None)",
     "its registered epochs (the default budget) must be an integer >= 1, got -1"),
    ("DATASETS.register('r18d', augment='spin')(lambda data_dir=None, download=False: None)",
     "its registered augment 'spin' is not one of")])
def test_a_plugin_registering_what_breaks_the_contract_is_named_at_import(what, text, tmp_path, monkeypatch):
    """Cases 140, 141, 143, 144: a non-callable was an internal error at use; a bad dataset default was refused as
    if the user had typed --epochs/--augment, the plug-in unnamed."""
    plug = tmp_path / "preg18.py"
    plug.write_text("from depthaudit.methods import METHODS\nfrom depthaudit.models import MODELS\n"
                    f"from depthaudit.data import DATASETS\n{what}\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "preg18", "train", *TINY, "--out",
                        str(tmp_path / "t")], env=env, capture_output=True, text=True, timeout=300)
    print(p.stderr)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "--plugin preg18: importing it raised ValueError" in p.stderr and text in p.stderr
    assert "preg18.py:4" in p.stderr and not (tmp_path / "t").exists()


def test_an_all_zero_grid_says_its_penalty_form_is_idle_and_titles_no_form(tmp_path, capsys):
    """Case 168: intervene --lambdas 0 --penalty-form rel said nothing and titled the report "rel form"."""
    from depthaudit.cli import main

    out = tmp_path / "i"
    assert main(["intervene", *TINY, "--methods", "bp", "--lambdas", "0", "--penalty-form", "rel", "--out",
                 str(out)]) == 0
    assert "note: --penalty-form rel has no effect: every λ of --lambdas is 0" in capsys.readouterr().err
    assert (out / "intervention.md").read_text().startswith("# Scale-penalty intervention (abs form, λ ∈ 0;")
    b = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1)
    with pytest.warns(UserWarning, match="has no effect: every λ is 0"):
        icfg = da.InterveneConfig(audit=da.AuditConfig(base=b, methods=("bp",)), lambdas=(0,), penalty_form="rel")
    assert icfg.penalty_form == "abs"


def test_a_method_without_credits_and_a_too_short_text_say_what_to_fix(tmp_path):
    """Unclear cases 142, 152: a CreditMethod without credits() raised a bare NotImplementedError; a text too short
    for the context named neither the text nor a fix."""
    from depthaudit.errors import UsageError
    from depthaudit.methods import CreditMethod
    from depthaudit.models import build_model

    class NoCredits(CreditMethod):
        pass

    model = build_model("resmlp", (7,), 5, 8, 2, 2, 0)
    with pytest.raises(NotImplementedError) as exc:
        NoCredits(model, 0).credits(model, None, None)
    print(exc.value)
    assert "NoCredits (" in str(exc.value) and "test_walk18_faults.py:" in str(exc.value)
    assert "defines no credits(model, tr, e); implement it" in str(exc.value)
    from depthaudit.data.text import load_text

    short = tmp_path / "short.txt"
    short.write_text("a b c d e f g h i j k l m n o p")
    with pytest.raises(UsageError) as exc:
        load_text(str(short), 64, "cpu")
    print(exc.value)
    assert f"--text {short}" in str(exc.value) and "too few for --context 64" in str(exc.value)
    assert "smaller --context" in str(exc.value)


def test_report_of_a_parent_skips_a_folder_standing_where_a_json_must_be_and_renders_the_rest(tmp_path, capsys):
    """Unclear case 94: a ladder_*.json that is a folder ended the whole report; the folders after it were never
    rendered."""
    from depthaudit.cli import main

    (tmp_path / "Df" / "ladder_d16_L2_mnist1d.json").mkdir(parents=True)
    assert main(["audit", *TINY, "--methods", "bp", "--out", str(tmp_path / "ok")]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    print(err)
    assert f"(from {tmp_path / 'ok'})" in out
    assert f"note: skipped {tmp_path / 'Df'}: " in err and "a folder stands where a file must be" in err
    assert "1 folder(s) could not be rendered" in err.splitlines()[-1]
