"""Walk 42's unclear cases, settled (docs/walks/walk42_*.txt)."""

import json

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]
SMALL = ["--probe-batches", "1", "--probe-batch-size", "32"]


def test_saturation_takes_the_method_option_flags_as_every_command_that_trains_a_method(tmp_path, capsys):
    """Case 68: ``saturation --method fa --fa-head exact`` was "unrecognized arguments", though methods.md says
    each option has a flag that sets it for the chosen method. The flag is the spec's option: the same file and
    runs as ``--method fa:head=exact``; a family that takes no method notes it has no effect."""
    sat = ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "16", "--extra", "0",
           "--epochs", "1", "--out", str(tmp_path / "S")]
    assert main([*sat, "--method", "fa", "--fa-head", "exact"]) == 0
    assert (tmp_path / "S" / "saturation_resmlp_fa-headexact_mnist1d.json").is_file()
    capsys.readouterr()
    assert main([*sat, "--method", "fa:head=exact"]) == 0  # the same configuration: its run reused
    assert "1 of 1 runs already finished" in capsys.readouterr().err
    assert main([*sat, "--method", "bp", "--fa-head", "exact", "--list-cells"]) == 0
    assert "--fa-head is an option of" in capsys.readouterr().err
    rec = json.loads((tmp_path / "S" / "saturation_resmlp_fa-headexact_mnist1d.json").read_text())
    assert {r["config"]["method"] for r in rec["runs"].values()} == {"fa:head=exact"}


def test_an_audits_identity_section_is_the_same_for_its_seeds_in_any_order(tmp_path, capsys):
    """Case 119: the same audit with its seeds in another order (cli.md: "the same audit") reused every run but
    re-measured its identity section on the first seed's probe examples: the numbers changed, unsaid. Measured
    over the seeds in ascending order, the section is bit-for-bit the same."""
    base = ["audit", *C, "--methods", "bp", *SMALL]
    assert main([*base, "--seeds", "1", "2", "--out", str(tmp_path / "A")]) == 0
    first = json.loads((tmp_path / "A" / "report.json").read_text())["identity"]
    assert main([*base, "--seeds", "2", "1", "--out", str(tmp_path / "A")]) == 0
    again = json.loads((tmp_path / "A" / "report.json").read_text())["identity"]
    print(first["summary"], again["summary"])
    assert first == again
