"""Walk 22's causes: each reproduced as the walker did it, failing without its fix."""

from depthaudit.cli import main


def test_report_of_a_probes_folder_never_sends_its_warm_start_to_the_audit(tmp_path, capsys):
    """W1 (cases 57, 58): report of a probes folder with --pre-epochs noted its warm_start store as an audit whose
    report was missing ("rerun the audit … with --out P2/warm_start"), which then wrote an audit into it."""
    p = tmp_path / "P2"
    assert main(["probes", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--method", "dfa", "--alphas", "0", "--seeds", "1", "--pre-epochs", "1", "--out", str(p)]) == 0
    assert (p / "warm_start").is_dir()
    capsys.readouterr()
    assert main(["report", str(p)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "warm_start" not in err and "it holds probes results: their card is probes_dfa.md" in err
    assert main(["report", str(p / "warm_start")]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "it is the BP warm start's store of the probes in" in err and "rerun the audit" not in err


def test_a_python_config_refuses_a_choice_the_cli_refuses():
    """W2 (cases 150, 155): SaturationConfig(analysis_split="val") and AuditConfig(d1_stat="nope") were built and
    run (d1_stat "nope" measured as "mean"); the CLI refuses both."""
    import pytest

    import depthaudit as da

    b = da.TrainConfig(dataset="mnist1d")
    for make, field in ((lambda: da.AuditConfig(base=b, methods=("bp",), d1_stat="nope"), "d1_stat"),
                        (lambda: da.LadderConfig(base=b, methods=("bp",), d1_stat="nope"), "d1_stat"),
                        (lambda: da.SaturationConfig(family="resmlp", analysis_split="val"), "analysis_split"),
                        (lambda: da.SaturationConfig(family="hf", grow_train="x"), "grow_train")):
        with pytest.raises(da.ConfigError) as exc:
            make()
        print(exc.value)
        assert exc.value.field == field and "not known; use one of" in str(exc.value)
