"""Walk 17's causes: each reproduced as the walker did it, failing without its fix."""

import json

import pytest

import depthaudit as da
from depthaudit.cli import main

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "2", "--epochs", "1"]


@pytest.mark.parametrize("cfg", ["saturation", "grow"])
def test_an_unknown_method_or_dataset_of_a_depth_sweep_is_a_config_error_naming_its_field(cfg, tmp_path):
    """Cases 68, 69: SaturationConfig/GrowConfig(method="nope") and dataset="nope" were plain UsageErrors."""
    make = {"saturation": lambda **k: da.SaturationConfig(family="resmlp", extra=(1,), epochs=1, **k),
            "grow": lambda **k: da.GrowConfig(family="resmlp", extra=1, epochs=1, **k)}[cfg]
    for bad in ("nope", "kp:zz=1", "fa:head=bogus"):  # (case 70: a bad option value named method_options)
        with pytest.raises(da.ConfigError) as exc:
            make(dataset="mnist1d", method=bad)
        print(exc.value)
        assert exc.value.field == "method" and bad in str(exc.value)
        assert exc.value.render(cli=True).startswith("--method")
    run = {"saturation": da.saturation, "grow": da.grow}[cfg]
    with pytest.raises(da.ConfigError) as exc:
        run(make(dataset="nope"), tmp_path / "o", progress=False)
    print(exc.value)
    assert exc.value.field == "dataset" and "not known" in str(exc.value)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_a_grow_of_an_ungrowable_method_names_the_method_field():
    with pytest.raises(da.ConfigError) as exc:
        da.GrowConfig(family="resmlp", dataset="mnist1d", extra=1, method="sb")
    assert exc.value.field == "method" and "cannot grow" in str(exc.value)


def test_a_rel_or_element_grid_reports_again_without_being_called_edited(tmp_path, capsys):
    """Cases 85, 86: report of `intervene --penalty-form rel` said its intervention.json was edited (λ = 0's
    audit stores abs, as a zero penalty has no form)."""
    out = tmp_path / "ir"
    assert main(["intervene", *TINY, "--methods", "bp", "--lambdas", "0", "0.01", "--penalty-form", "rel",
                 "--penalty-reduction", "element", "--out", str(out)]) == 0
    doc = json.loads((out / "intervention.json").read_text())
    assert (doc["penalty_form"], doc["penalty_reduction"]) == ("rel", "element")
    capsys.readouterr()
    assert main(["report", str(out)]) == 0, capsys.readouterr().err
    doc["penalty_reduction"] = "example"  # an edit is still found: the λ > 0 audit ran with element
    (out / "intervention.json").write_text(json.dumps(doc))
    assert main(["report", str(out)]) == 2
    assert "its penalty reduction 'example' is not its audits' ('element')" in capsys.readouterr().err


def test_another_grid_into_an_intervention_folder_is_said_when_it_replaces_the_report(tmp_path, capsys):
    """Case 87: `--penalty 0.01` into a folder reporting (0, 0.1) replaced its report without a word."""
    out = tmp_path / "ir"
    assert main(["intervene", *TINY, "--methods", "bp", "--penalty", "0.1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["intervene", *TINY, "--methods", "bp", "--penalty", "0.1", "--out", str(out)]) == 0
    assert "note: replaced" not in capsys.readouterr().err  # the same grid: nothing replaced
    assert main(["intervene", *TINY, "--methods", "bp", "--penalty", "0.01", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "note: replaced" in err and "λ ∈ 0, 0.1, by λ ∈ 0, 0.01" in err and err.count("note: replaced") == 1
    assert json.loads((out / "intervention.json").read_text())["lambdas"] == [0.0, 0.01]


def test_a_penalty_form_given_without_a_penalty_is_said_not_dropped_silently(tmp_path, capsys):
    """Case 3: InterveneConfig(audit=AuditConfig(base=TrainConfig(penalty_form="rel"))) trained every λ abs, unsaid."""
    with pytest.warns(UserWarning, match="penalty_form='rel' has no effect without scale_penalty > 0"):
        base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1, penalty_form="rel")
    assert base.penalty_form == "abs"
    icfg = da.InterveneConfig(audit=da.AuditConfig(base=base, methods=("bp",)), penalty=0.1, penalty_form="rel")
    assert icfg.penalty_form == "rel"  # the grid's form: InterveneConfig's own, as the warning says
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no warning of our own making on the way
        da.TrainConfig(penalty_form="rel", scale_penalty=0.1)
        res = da.intervene(icfg, tmp_path / "ir", progress=False)
        assert main(["train", *TINY, "--penalty-form", "rel", "--penalty-reduction", "element",
                     "--out", str(tmp_path / "t")]) == 0
    forms = {k: a["config"]["base"]["penalty_form"] for k, a in res.record["audits"].items()}
    assert forms == {"0": "abs", "0.1": "rel"}
    err = capsys.readouterr().err
    assert "--penalty-form rel has no effect" in err and "--penalty-reduction element has no effect" in err


def test_python_refusals_of_a_cell_and_an_identity_target_are_config_errors_in_keywords(tmp_path):
    """Cases 114, 115: SweepOptions(cell=…) naming no cell said --cell/--list-cells; da.identity(out=<folder>)
    called an empty folder another command's file."""
    b = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1)
    with pytest.raises(da.ConfigError) as exc:
        da.ladder(da.LadderConfig(base=b, methods=("bp",), seeds=(1,)), tmp_path / "l",
                  sweep=da.SweepOptions(cell="99"), progress=False)
    print(exc.value)
    msg = str(exc.value)
    assert exc.value.field == "cell" and msg.startswith("cell=99: no such cell") and "--" not in msg
    assert exc.value.render(cli=True).startswith("--cell 99: no such cell") and "see --list-cells" in \
        exc.value.render(cli=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(da.ConfigError) as exc:
        da.identity(b, [1], out=tmp_path / "empty", progress=False)
    print(exc.value)
    assert exc.value.field == "out" and "is a folder; give a .json file path" in str(exc.value)
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(da.ConfigError, match="choose another out$"):
        da.identity(b, [1], out=tmp_path / "x.json", progress=False)


def test_the_probes_file_carries_its_config_and_provenance(tmp_path):
    """Case 109: probes_{method}.json held rows of numbers only (no config, version, commit, torch, data hash)."""
    b = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1, method="dfa")
    res = da.probes(da.ProbesConfig(base=b, alphas=(0.0, 1.0), seeds=(42, 7)), tmp_path / "p", progress=False)
    doc = json.loads(res.path.read_text())
    assert doc == res.record
    c, p = doc["config"], doc["provenance"]
    assert (c["method"], c["alphas"], c["seeds"], c["pre_epochs"]) == ("dfa", [0.0, 1.0], [42, 7], 0)
    assert c["base"] == b.to_dict() and len(c["probe"]) == 2
    assert p["version"] == da.__version__ and p["torch"] and p["device"] and p["seed"] == 42 and "git" in p
    assert p["data"]["sha256"] and p["data"]["name"] == "mnist1d"


def test_report_of_a_probes_run_store_points_to_the_probes_command_not_a_second_refusal(tmp_path, capsys):
    """Case 10: report of credit_mix_*.runs said `depthaudit report <folder>`, which refuses again (no probes)."""
    out = tmp_path / "p"
    assert main(["probes", *TINY, "--method", "dfa", "--alphas", "0", "1", "--out", str(out)]) == 0
    store = next(out.glob("credit_mix_*.runs"))
    capsys.readouterr()
    assert main(["report", str(store)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert f"it is the run store of the probes in {out.resolve()}" in err and "probes command" in err
    assert "depthaudit report" not in err
