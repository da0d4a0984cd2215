"""Walk 33's wrong (and closest-to-wrong unclear) cases, reproduced as the walker did them (docs/walks/walk33_*)."""

import json

from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]


def test_identity_stores_what_ran_not_the_idle_training_flags(tmp_path, capsys):
    """Case 63: ``identity --epochs 3`` noted that --epochs has no effect, then stored "epochs": 3 in its config
    (a rerun without it stored 20): cli.md "such a flag never makes another configuration: the config stores what
    ran". Idle flags are stored at their defaults, so the two checks' JSON configs are one."""
    base = ["identity", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--seeds", "1",
            "--probe-batches", "1", "--probe-batch-size", "16"]
    assert main([*base, "--epochs", "3", "--lr", "0.01", "--methods", "fa", "--out", str(tmp_path / "a.json")]) == 0
    assert "no effect with identity" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["config"] == b["config"] and a["per_seed"] == b["per_seed"]
    assert a["config"]["d_hidden"] == 16 and a["config"]["method"] == "bp"


def test_a_misspelt_registration_keyword_is_refused_where_it_is_written(tmp_path, capsys, monkeypatch):
    """W1 (cases 166, 167): DATASETS.register("d33d", epoch=2) — epochs misspelt — was kept unread: the dataset
    trained 20 epochs without a word; METHODS/MODELS.register took any keyword. Each registry names the keywords
    it takes; another is refused at the register call (the plug-in's import, named with its file and line)."""
    import pytest

    from depthaudit.data import DATASETS
    from depthaudit.methods import METHODS
    from depthaudit.models import MODELS

    for reg, kw, takes in ((DATASETS, {"epoch": 2}, "epochs, augment, generated, images, overwrite"),
                           (METHODS, {"foo": 1}, "overwrite"), (MODELS, {"epcohs": 3}, "width_multiple, overwrite")):
        with pytest.raises(ValueError, match=f"has no keyword '{next(iter(kw))}' \\(it takes {takes}\\)"):
            reg.register("x33", **kw)
        assert "x33" not in reg
    (tmp_path / "p33d.py").write_text(
        "import numpy as np\nfrom depthaudit.data import DATASETS, ArrayData\n\n\n"
        "@DATASETS.register('d33d', epoch=2)\ndef d33d(data_dir=None, download=False):\n"
        "    r = np.random.default_rng(0)\n"
        "    return ArrayData(r.normal(size=(64, 8)).astype('float32'), r.integers(0, 2, 64),\n"
        "                     r.normal(size=(32, 8)).astype('float32'), r.integers(0, 2, 32))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["--plugin", "p33d", "train", "--dataset", "d33d", "--out", str(tmp_path / "T")]) == 2
    finally:
        __import__("sys").modules.pop("p33d", None)
    err = capsys.readouterr().err.strip()
    assert "--plugin p33d" in err and "has no keyword 'epoch'" in err and "p33d.py:5" in err, err
    assert "d33d" not in DATASETS and not (tmp_path / "T").exists()


def test_a_folder_holding_only_another_commands_claim_is_said_so(tmp_path, capsys):
    """Case 188: a folder holding an interrupted audit's claim and no run was refused to a ladder as "holds the
    results of another command (audit)": it holds no result. The refusal says it is the claim of an interrupted or
    running audit; one with results reads as before."""
    import shutil

    out = tmp_path / "SG"
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"{out} holds the results of another command (audit); ladder cannot write there: use another --out")
    shutil.rmtree(out / "runs")
    for f in out.glob("*"):
        if f.name not in ("identity.json", ".lock"):
            f.unlink()
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "(audit: its claim, identity.json, and no result yet — an interrupted or running audit)" in err, err


def test_a_sweeps_base_may_not_carry_trains_own_settings(tmp_path):
    """W3 (cases 204–208): a sweep's base TrainConfig with credit_mix (ProbesConfig: every "dfa_scratch" run was
    90% BP), warm_start (AuditConfig, LadderConfig: the frozen baseline started from trained weights, so BP was
    flagged on D3) or train_blocks (ProbesConfig: every run trained the last block) trained every run with it
    under the plain method's name. Each is refused naming the field (exc.field), as AuditConfig's train_blocks
    was (case 202: that one named no field)."""
    import pytest

    import depthaudit as da

    assert main(["train", *C, "--out", str(tmp_path / "T")]) == 0
    ckpt = str(tmp_path / "T" / "checkpoint.pt")
    cases = [(da.ProbesConfig, {"method": "dfa", "credit_mix": 0.9}, "credit_mix"),
             (da.ProbesConfig, {"method": "dfa", "warm_start": ckpt}, "warm_start"),
             (da.ProbesConfig, {"method": "dfa", "train_blocks": "last:1"}, "train_blocks"),
             (da.AuditConfig, {"warm_start": ckpt}, "warm_start"),
             (da.LadderConfig, {"warm_start": ckpt}, "warm_start"),
             (da.AuditConfig, {"train_blocks": "last:1"}, "train_blocks"),
             (da.LadderConfig, {"train_blocks": "none"}, "train_blocks")]
    for make, kw, field in cases:
        base = da.TrainConfig(dataset="mnist1d", d_hidden=16, num_blocks=2, epochs=1, **kw)
        with pytest.raises(da.ConfigError) as e:
            make(base=base)
        assert e.value.field == field and f"the base config's {field}" in str(e.value), (make, str(e.value))
    make = da.ProbesConfig(base=da.TrainConfig(dataset="mnist1d", method="dfa"))  # the plain base is taken
    assert make.base.credit_mix is None and make.base.warm_start is None


def test_a_bad_warmup_names_its_flag(tmp_path, capsys):
    """W2 (case 176): `--warmup 5` (extending.md's old example read it as epochs) was refused as "unknown method
    '5'" with no flag named."""
    assert main(["train", *C, "--warmup", "5", "--out", str(tmp_path / "W")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("depthaudit: error: --warmup '5': unknown method '5'"), err
    assert not (tmp_path / "W").exists()
