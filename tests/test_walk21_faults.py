"""Walk 21's causes: each reproduced as the walker did it, failing without its fix."""

import pytest

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_the_blank_out_note_is_said_once_by_a_sweep(tmp_path, capsys):
    """W1: the note on an --out ending with a blank was printed twice by audit, ladder and --list-cells."""
    for cmd in (["audit", *C, "--methods", "bp"], ["ladder", *C, "--methods", "bp", "--seeds", "1"],
                ["audit", *C, "--methods", "bp", "--list-cells"]):
        out = str(tmp_path / f"{cmd[0]}{len(cmd)} ")
        assert main([*cmd, "--out", out]) == 0
        err = capsys.readouterr().err
        assert err.count("begins or ends with a blank") == 1, err


@pytest.mark.parametrize("cmd,name", [(["audit", *C, "--methods", "bp"], "report.json"),
                                      (["intervene", *C, "--methods", "bp", "--penalty", "0.1"], "intervention.json")])
def test_a_truncated_report_of_ours_is_named_damaged_not_foreign(cmd, name, tmp_path, capsys):
    """W2: audit and intervene called their own truncated report "not depthaudit's"."""
    out = tmp_path / "o"
    assert main([*cmd, "--out", str(out)]) == 0
    (out / name).write_bytes((out / name).read_bytes()[:100])
    capsys.readouterr()
    assert main([*cmd, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "cannot be read as JSON (a damaged or truncated result" in err and "is not depthaudit's" not in err
    (out / name).unlink()  # moved away, as the line says: the rerun rebuilds it from the stored runs
    assert main([*cmd, "--out", str(out)]) == 0 and "already finished" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--alpha", "0.01"], ["--low-signal", "0.01"]])
def test_another_measurement_setting_is_another_saturation_refused_not_retrained(flag, tmp_path, capsys):
    """W3: --alpha / --low-signal into a stored sweep were "its files changed?": every depth retrained, replaced."""
    S = ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1", "--extra",
         "0", "--out", str(tmp_path / "S")]
    assert main(S) == 0
    f = tmp_path / "S" / "saturation_resmlp_bp_mnist1d.json"
    before = f.read_bytes()
    capsys.readouterr()
    assert main([*S, *flag]) == 2
    err = capsys.readouterr().err
    print(err)
    assert f"holds runs of a different configuration (differs in: {flag[0][2:].replace('-', '_')})" in err
    assert "files changed" not in err and f.read_bytes() == before
    assert main(S) == 0 and "1 of 1 runs already finished" in capsys.readouterr().err  # the default: the same store


def test_the_field_builder_takes_the_equals_spelling(tmp_path, capsys):
    """W4: --epochs=10 was "unknown option --epochs=10; the options are --epochs N …"."""
    from depthaudit.report.field import main as field_main

    src = str(__import__("pathlib").Path(__file__).parents[1] / "docs" / "results" / "field_sgd_e100")
    assert field_main([str(tmp_path / "f.md"), src, "--epochs=100", "--dataset=cifar10"]) == 0
    assert field_main([str(tmp_path / "g.md"), src, "--epochs", "100"]) == 0
    assert (tmp_path / "f.md").read_text() == (tmp_path / "g.md").read_text()


def test_probes_notes_a_repeated_seed(tmp_path, capsys):
    """W5: probes --seeds 2 2 folded the seed without the note every other sweep prints."""
    assert main(["probes", *C, "--method", "dfa", "--alphas", "0", "--seeds", "2", "2",
                 "--out", str(tmp_path / "p")]) == 0
    assert "--seeds repeats 2; each value counts once" in capsys.readouterr().err


def test_a_text_familys_idle_flags_are_noted_and_name_no_other_run(tmp_path, capsys):
    """W6-W8: saturation --family gpt with --arch / --dataset retrained ("its files changed?") though the runs were
    bit-identical; --data-dir was noted then refused; --download, --continue-lr, --grow-*, --bootstrap: no note."""
    import depthaudit as da

    G = ["saturation", "--family", "gpt", "--d-hidden", "16", "--context", "16", "--extra", "0", "--epochs", "1",
         "--out", str(tmp_path / "G")]
    assert main(G) == 0
    for extra, note in ((["--arch", "vit"], "--arch has no effect with --family gpt"),
                        (["--dataset", "mnist1d"], "--dataset has no effect with --family gpt"),
                        (["--data-dir", str(tmp_path)], "--data-dir has no effect with --family gpt"),
                        (["--download"], "--download has no effect with --family gpt"),
                        (["--continue-lr", "1e-4", "--grow-train", "block"],
                         "--continue-lr, --grow-train have no effect"),
                        (["--bootstrap", "5"], "--bootstrap has no effect with --family gpt")):
        capsys.readouterr()
        assert main([*G, *extra]) == 0, extra
        err = capsys.readouterr().err
        assert note in err and "1 of 1 runs already finished" in err and "differs" not in err, err
        assert "error" not in err
    base = dict(family="gpt", extra=(0,), epochs=1)
    assert da.SaturationConfig(**base, arch="vit", dataset="mnist1d", data_dir="/x", bootstrap=5) == \
        da.SaturationConfig(**base)
    assert da.GrowConfig(family="resnet", arch="vit") == da.GrowConfig(family="resnet")
    assert da.GrowConfig(family="resmlp", arch="vit").arch == "vit"  # resmlp builds --arch: kept
