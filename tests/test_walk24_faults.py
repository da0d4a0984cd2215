"""Walk 24's wrong and unclear cases, each reproduced as the walker did it (docs/walks/walk24_*.txt)."""

import json

import depthaudit as da
from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]
BASE = dict(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)


def _with_plugin_quantity(out, record: dict) -> None:
    """Store in each trained run's record a quantity of a plug-in not loaded here (as its diagnostic stores it)."""
    from depthaudit.diagnostics import MEASUREMENT_KEY
    from depthaudit.stores import seal, unsealed

    for m in record["methods"]:
        for slug in m["runs"]["trained"]:
            path = out / "runs" / slug / "result.json"
            rec = unsealed(json.loads(path.read_text()))
            rec["history"][-1][MEASUREMENT_KEY]["gn24"] = {"per_layer": [1.0, 2.0]}
            path.write_text(json.dumps(seal(rec)))


def test_an_audit_rerun_without_the_plugin_of_a_section_says_so(tmp_path, capsys):
    """W1 (cases 63, 64): the audit rerun without --plugin rewrote its report without the plug-in's section, unsaid
    (`report` says it: cli.md). Now the audit gives the same note, from the CLI and from Python."""
    out = tmp_path / "g"
    cfg = da.AuditConfig(base=da.TrainConfig(**BASE), methods=("bp", "fa"), seeds=(1,), probe_batches=1,
                         probe_batch_size=32)
    res = da.audit(cfg, out, progress=False)
    assert "gn24" not in capsys.readouterr().err
    _with_plugin_quantity(out, res.record)
    da.audit(cfg, out, progress=False)
    err = capsys.readouterr().err
    print(err)
    assert f"{out / 'report.json'}: the runs measured gn24, which no loaded diagnostic renders" in err
    assert "rerun the audit with --plugin MODULE (its runs are reused and summarised" in err
    argv = ["audit", *C, "--methods", "bp", "fa", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
            "--out", str(out)]
    assert main(argv) == 0
    assert err.splitlines()[-1] in capsys.readouterr().err  # the CLI: the same line
    assert main(["report", str(out)]) == 0
    assert "the runs measured gn24" in capsys.readouterr().err


def test_a_name_taken_by_a_built_in_is_said_to_be_depthaudits():
    """Case 58: "diagnostic 'credit_cosine' is already registered at <plug-in>.py:7" read as if the plug-in held it."""
    import pytest

    from depthaudit.diagnostics import DIAGNOSTICS
    from depthaudit.methods import METHODS

    with pytest.raises(ValueError) as exc:
        DIAGNOSTICS.register("credit_cosine")(type("Mine", (), {"__module__": "p24d"}))
    print(exc.value)
    assert "diagnostic 'credit_cosine' is taken: it is depthaudit's own (depthaudit.diagnostics." in str(exc.value)
    METHODS.register("mine24")(METHODS.get("bp"))  # a plug-in's name: named as the module that registered it
    try:
        with pytest.raises(ValueError, match=r"method 'mine24' is taken: it is depthaudit's own \(depthaudit.methods"):
            METHODS.register("mine24")(METHODS.get("fa"))
        mine = type("M24", (), {"__module__": "my_methods"})
        METHODS.register("mine24b")(mine)
        with pytest.raises(ValueError, match=r"method 'mine24b' is taken: it is registered by my_methods; register "
                                             "yours under another name"):
            METHODS.register("mine24b")(mine)
    finally:
        for n in ("mine24", "mine24b"):
            METHODS._items.pop(n, None)
            METHODS._meta.pop(n, None)


def test_a_grow_file_with_one_arm_says_the_other_is_missing():
    """Case 96: an interrupted grow's report showed the grown row alone, the scratch arm silently absent."""
    from depthaudit.report.saturation import grow_md

    rec = {"final": {"blocks": 2, "train_loss": 1.0, "test_loss": 1.2, "test_acc": 0.5}}
    md = grow_md({"runs": {"grown": rec}})
    print(md)
    assert "| grown | 2 | 1.0000 | 1.2000 | 0.5000 |" in md
    assert "| scratch | — | not trained yet: rerun the grow command to train it | — | — |" in md
    assert "not trained yet" not in grow_md({"runs": {"grown": rec, "scratch": rec}})


def test_a_card_names_the_recipe_numbers_a_run_changed(tmp_path):
    """Case 105: an --lr 0.002 audit's card and report.md read exactly like the protocol recipe's."""
    from depthaudit.experiments.families import budget_text

    assert budget_text({"epochs": 5, "optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.01, "batch_size": 128}) \
        == "5 epochs"
    assert budget_text({"epochs": 5, "optimizer": "adamw", "lr": 2e-3, "weight_decay": 0.01, "batch_size": 64}) \
        == "5 epochs, lr 0.002, batch 64"
    assert budget_text({"epochs": 5, "optimizer": "sgd", "lr": 3e-4, "weight_decay": 5e-4}) == "5 epochs, optimizer sgd"
    out = tmp_path / "a"
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--lr", "0.002", "--probe-batches", "1",
                 "--probe-batch-size", "32", "--out", str(out)]) == 0
    assert "1 epochs, lr 0.002, seeds [1]" in (out / "report.md").read_text()


def test_jobs_without_training_is_said_to_do_nothing(tmp_path, capsys):
    """Case 110: --stored-only --jobs 4 (nothing may train) took --jobs without a word (cli.md: idle flags noted)."""
    out = str(tmp_path / "a")
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--list-cells", "--jobs", "4", "--out", out]) == 0
    assert "--jobs has no effect with --list-cells: nothing trains" in capsys.readouterr().err
    main(["audit", *C, "--methods", "bp", "--seeds", "1", "--stored-only", "--jobs", "4", "--out", out])
    assert "--jobs has no effect with --stored-only: nothing trains" in capsys.readouterr().err


def test_a_batch_above_the_split_is_stored_as_trained(tmp_path, capsys):
    """W2 (cases 119, 120, 126): --batch-size 100000 on 8000 examples trained one batch of 8000 a step but stored
    100000, so the same run under 8000 was another configuration (train, audit and saturation alike)."""
    t = str(tmp_path / "t")
    assert main(["train", *C, "--batch-size", "20000", "--out", t]) == 0
    err = capsys.readouterr().err
    assert "batch size 20000 exceeds the 8000 training examples: training (and recording) batch size 8000" in err
    assert json.loads((tmp_path / "t" / "result.json").read_text())["config"]["batch_size"] == 8000
    assert main(["train", *C, "--batch-size", "8000", "--out", t]) == 2  # the same run: this configuration's
    assert "already exists (this configuration's)" in capsys.readouterr().err
    a = str(tmp_path / "a")
    small = ["--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32", "--out", a]
    assert main(["audit", *C, "--batch-size", "100000", *small]) == 0
    capsys.readouterr()
    assert main(["audit", *C, "--batch-size", "8000", *small]) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    sat = da.saturation(da.SaturationConfig(family="resmlp", dataset="mnist1d", d_hidden=8, epochs=1, extra=(0,),
                                            batch_size=100000), tmp_path / "s", progress=False)
    assert [r["config"]["batch_size"] for r in sat.record["runs"].values()] == [8000]


def test_a_warmup_that_rounds_to_no_step_is_stored_as_none(tmp_path, capsys):
    """W3 (cases 121, 122): --warmup dfa --warmup-fraction 0.005 (0 of 63 steps) trained plain fa, bit for bit, but
    stored dfa/0.005: another configuration than plain fa's, unsaid."""
    t = str(tmp_path / "t")
    assert main(["train", *C, "--method", "fa", "--out", t]) == 0
    capsys.readouterr()
    assert main(["train", *C, "--method", "fa", "--warmup", "dfa", "--warmup-fraction", "0.005", "--out", t]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "--warmup dfa has no effect with --warmup-fraction 0.005: 0.005 × 63 steps rounds to no step" in err
    assert "already exists (this configuration's)" in err
    res = da.train(da.TrainConfig(**BASE, method="fa", warmup="dfa", warmup_fraction=0.02), tmp_path / "w",
                   progress=False)  # 0.02 × 63 = 1.26: one step under dfa, kept
    assert res.record["config"]["warmup"] == "dfa"


def test_every_swapped_checkpoint_is_named_at_once(tmp_path, capsys):
    """Case 137: two swapped checkpoints were named one per attempt (a failed rerun for each damaged run)."""
    out = tmp_path / "b"
    argv = ["audit", *C, "--methods", "bp", "fa", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
            "--out", str(out)]
    assert main(argv) == 0
    a, b = (next((out / "runs").glob(f"*_{m}_all_*")) / "checkpoint.pt" for m in ("bp", "fa"))
    pa, pb = a.read_bytes(), b.read_bytes()
    a.write_bytes(pb)
    b.write_bytes(pa)
    before = (out / "report.json").read_bytes()
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    print(err)
    assert f"2 checkpoints are not the ones their run records were written with (or cannot be read): {a}, {b}" in err
    assert (out / "report.json").read_bytes() == before


def test_a_ladder_gain_rounds_as_the_audit_gap_of_the_same_runs():
    """Case 42: the ladder's gain k=0→k=L read "+1.3" where the audit's D3 of the same two runs read "+1.4"
    (100 × (0.1735 − 0.16) is 1.3499… in floats; a gap of counts over one test set is 1.35)."""
    from depthaudit.experiments.ladder import aggregate

    rec = lambda acc: {"status": "ok", "final": {"test_acc": acc}, "history": []}  # noqa: E731
    doc = {"identity": {"num_blocks": 2}, "runs": {"bp/k0/s1": rec(0.16), "bp/k2/s1": rec(0.1735)}}
    gain = aggregate(doc)["helpers"]["bp"]["gain_pp_k0_to_kL"]
    print(gain, 100 * (0.1735 - 0.16))
    assert gain == 1.35 and f"{gain:+.1f}" == "+1.4"


def test_a_record_names_the_plugin_code_it_ran(tmp_path):
    """Case 152: a run of a plug-in's method recorded no trace of the plug-in (module, file, digest)."""
    import hashlib
    import subprocess
    import sys

    (tmp_path / "p24prov.py").write_text(
        "from depthaudit.methods import METHODS\nfrom depthaudit.methods.bp import BP\n\n\n"
        "@METHODS.register('bp24prov')\nclass BP24(BP):\n    pass\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "p24prov", "train", *C, "--method",
                        "bp24prov", "--out", str(tmp_path / "t")], capture_output=True, text=True, env=env,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    prov = json.loads((tmp_path / "t" / "result.json").read_text())["provenance"]
    print(prov["plugins"])
    digest = hashlib.sha256((tmp_path / "p24prov.py").read_bytes()).hexdigest()
    assert prov["plugins"] == [{"module": "p24prov", "file": str(tmp_path / "p24prov.py"), "sha256": digest}]
    p = subprocess.run([sys.executable, "-m", "depthaudit", "train", *C, "--out", str(tmp_path / "plain")],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr  # no plug-in: no key
    assert "plugins" not in json.loads((tmp_path / "plain" / "result.json").read_text())["provenance"]


def _arrays(n_test: int, tag: str):
    """64 flat training examples of 8 features and ``n_test`` held-out ones, 3 classes (a plug-in's data)."""
    import hashlib

    import numpy as np

    from depthaudit.data import ArrayData

    rng = np.random.default_rng(0)
    return ArrayData(rng.normal(size=(64, 8)).astype(np.float32), rng.integers(0, 3, 64),
                     rng.normal(size=(n_test, 8)).astype(np.float32), rng.integers(0, 3, n_test), num_classes=3,
                     source=tag, sha256=hashlib.sha256(tag.encode()).hexdigest())


def _flat_loader(data_dir=None, download=False):
    return _arrays(32, "w24")


def test_an_image_augment_from_a_registration_blames_the_registration(tmp_path, capsys):
    """Case 56: a dataset registered with augment="crop+flip" but flat inputs was refused as "--augment crop+flip:
    … use --augment none", a flag the user never gave."""
    from depthaudit.data import DATASETS

    DATASETS.register("w24aug", epochs=1, augment="crop+flip")(_flat_loader)
    try:
        args = ["train", "--dataset", "w24aug", "--d-hidden", "8", "--num-blocks", "1"]
        assert main([*args, "--out", str(tmp_path / "t")]) == 2
        err = capsys.readouterr().err
        print(err)
        assert f"--dataset w24aug is registered with augment='crop+flip' (its loader: {__file__}:" in err
        assert "register it with augment='none', or give --augment none" in err
        assert main([*args, "--augment", "crop", "--out", str(tmp_path / "t")]) == 2  # the user's own flag: named
        assert "--augment crop: w24aug is not an image dataset; use --augment none" in capsys.readouterr().err
        assert main([*args, "--augment", "none", "--out", str(tmp_path / "t")]) == 0
        assert not (tmp_path / "t").exists() or (tmp_path / "t" / "result.json").is_file()
    finally:
        DATASETS._items.pop("w24aug", None)
        DATASETS._meta.pop("w24aug", None)


def _one_test_loader(data_dir=None, download=False):
    return _arrays(1, "w24one")


def test_a_held_out_split_too_small_for_any_probe_batch_blames_the_data(tmp_path, capsys):
    """W8 (cases 201, 202): 1 held-out example gave "use at most 1", which the parser then refuses (B_p >= 2)."""
    from depthaudit.data import DATASETS

    DATASETS.register("w24one", epochs=1)(_one_test_loader)
    try:
        base = ["--dataset", "w24one", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]
        for argv in (["audit", *base, "--methods", "bp", "--seeds", "1", "--out", str(tmp_path / "a")],
                     ["identity", *base, "--out", str(tmp_path / "i.json")],
                     ["ladder", *base, "--seeds", "1", "--out", str(tmp_path / "l")]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            print(err)
            assert f"--dataset w24one (its loader: {__file__}:" in err
            assert "has 1 held-out example; a probe batch needs at least 2" in err and "use at most" not in err
        assert not any(tmp_path.iterdir())  # nothing written
    finally:
        DATASETS._items.pop("w24one", None)
        DATASETS._meta.pop("w24one", None)


def test_an_out_through_a_missing_folder_is_refused_without_making_it(tmp_path, monkeypatch, capsys):
    """W5 (cases 168, 169): --out x/../a5 (x missing) was refused but left the empty folder x behind."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", *C, "--out", "a5"]) == 0
    capsys.readouterr()
    for argv in (["train", *C, "--out", "x/../a5"], ["audit", *C, "--methods", "bp", "--out", "y/sub/../../A1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        print(err)
        assert "which does not exist, before '..'; give the folder without the detour (" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a5"]
    (tmp_path / "z").mkdir()
    assert main(["train", *C, "--out", "z/../a5"]) == 2  # an existing detour resolves: the run's own refusal
    assert "already exists (this configuration's)" in capsys.readouterr().err


def test_a_tracking_interval_beyond_the_budget_is_the_budget(tmp_path, capsys):
    """Case 198: --track-every 5 on a 1-epoch budget measured what --track-every 1 does, as another run."""
    out = str(tmp_path / "a")
    args = ["audit", *C, "--methods", "fa", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32"]
    assert main([*args, "--track-every", "5", "--out", out]) == 0
    err = capsys.readouterr().err
    assert "--track-every 5 is beyond the 1-epoch budget" in err
    assert json.loads((tmp_path / "a" / "report.json").read_text())["config"]["track_every"] == 1
    assert main([*args, "--track-every", "1", "--out", out]) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    cfg = da.AuditConfig(base=da.TrainConfig(**BASE), methods=("fa",), track_every=3)
    assert cfg.track_every == 1 and da.AuditConfig(base=da.TrainConfig(**BASE), track_every=0).track_every == 0


def test_a_rerun_with_a_batch_above_the_split_reuses_its_audit(tmp_path, capsys):
    """W2 follow-up: the CLI's early report check compared the flag's 100000 with the stored 8000 and refused."""
    out = str(tmp_path / "a")
    args = ["audit", *C, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32"]
    for _ in range(2):
        assert main([*args, "--batch-size", "100000", "--out", out]) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    for _ in range(2):  # (a fresh folder: 128 is another batch than the 8000 stored above)
        assert main([*args, "--warmup", "dfa", "--warmup-fraction", "0.005", "--out", str(tmp_path / "w")]) == 0
    assert main([*args, "--out", str(tmp_path / "w")]) == 0  # no warm-up: the same audit
    assert "2 of 2 runs already finished" in capsys.readouterr().err


def test_batch_runs_that_stack_nothing_is_said(tmp_path, capsys):
    """Case 189: --batch-runs 3 on brsf (which trains one by one) gave no word; stackable runs give none."""
    args = ["ladder", *C, "--seeds", "1", "2", "--batch-runs", "3", "--probe-batches", "1", "--probe-batch-size", "32"]
    assert main([*args, "--methods", "brsf", "--out", str(tmp_path / "b")]) == 0
    assert "--batch-runs 3: none of these 4 runs can train stacked" in capsys.readouterr().err
    assert main([*args, "--methods", "fa", "--out", str(tmp_path / "f")]) == 0
    assert "can train stacked" not in capsys.readouterr().err
