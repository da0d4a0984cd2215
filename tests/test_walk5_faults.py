"""What the fifth independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import json
import re

import depthaudit as da
from depthaudit.cli import main

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_train_blocks_is_stored_in_its_one_spelling(tmp_path):
    """12 (unclear): `--train-blocks ALL` trained as all but was stored verbatim ("ALL") in the record."""
    for given, stored in (("ALL", "all"), (" None ", "none"), ("LAST:01", "last:1")):
        assert da.TrainConfig(num_blocks=1, train_blocks=given).train_blocks == stored
    assert main(["train", *TINY, "--train-blocks", "ALL", "--out", str(tmp_path / "t")]) == 0
    rec = json.loads((tmp_path / "t" / "result.json").read_text())
    assert rec["config"]["train_blocks"] == "all"


def test_a_model_too_big_for_the_machine_is_refused_before_it_is_allocated(tmp_path, capsys, monkeypatch):
    """`train --num-blocks 100000000` allocated until the 24 GB machine swapped (killed by hand after minutes)."""
    import depthaudit.loop as loop

    out = tmp_path / "big"
    for cmd in (["train", *TINY, "--num-blocks", "100000000", "--out", str(out)],
                ["audit", *TINY, "--num-blocks", "100000000", "--methods", "fa", "--out", str(out)],
                ["identity", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "100000000",
                 "--out", str(tmp_path / "id.json")]):
        assert main(cmd) == 2, cmd[0]
        err = capsys.readouterr().err
        assert "--num-blocks 100000000, --d-hidden 8: the model has" in err and "GiB free on cpu" in err, err
        assert not out.exists() and not (tmp_path / "id.json").exists()
    # the rule itself: 16 bytes per parameter against what is free (here a pretend 1 MiB machine)
    monkeypatch.setattr(loop, "free_memory", lambda device: 2**20)
    cfg = da.TrainConfig(dataset="mnist1d", d_hidden=256, num_blocks=4, epochs=1)
    import torch

    from depthaudit.data import load_data
    from depthaudit.errors import UsageError

    data = load_data("mnist1d", None, False, torch.device("cpu"))
    model, _ = loop.build(da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), data)
    params = sum(p.numel() for p in loop.build_model("resmlp", data.input_shape, 10, 256, 4, None, 0).parameters())
    assert 16 * params > 2**20 > 16 * sum(p.numel() for p in model.parameters())
    import pytest

    with pytest.raises(UsageError, match=re.escape(f"the model has {params:.3g} parameters")):
        loop.build(cfg, data)


def _edit_first_acc(path, key_filter=None):
    doc = json.loads(path.read_text())
    key = sorted(k for k in doc["runs"] if key_filter is None or key_filter(k))[-1]
    doc["runs"][key]["final"]["test_acc"] = 0.9725
    path.write_text(json.dumps(doc))
    return key


def _orphaned_edit(args, folder, glob, moved, capsys):
    """Run ``args``, edit its JSON's last run's accuracy, move its records away, then `report`: its stderr."""
    import shutil

    assert main(args) == 0
    path = next(folder.glob(glob))
    _edit_first_acc(path)
    shutil.move(path.with_suffix(".runs"), moved)
    capsys.readouterr()
    assert main(["report", str(folder)]) == 2
    return path, capsys.readouterr().err


def test_a_json_edited_while_its_records_are_away_is_neither_rendered_nor_reused(tmp_path, capsys):
    """80–82: with `.runs` moved away (or a file in its place) an edited ladder/saturation JSON was rendered, and a
    rerun laundered the edit into a new sealed record."""
    import shutil

    lad = tmp_path / "L"
    args = ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--output_dir", str(lad)]
    path, err = _orphaned_edit(args, lad, "ladder_*.json", tmp_path / "moved", capsys)
    assert "was edited after it was written" in err and "run records (ladder_d8_L1_mnist1d.runs) are missing" in err
    assert main(args) == 0  # the rerun: named, every run retrained, the edit nowhere
    cap = capsys.readouterr()
    assert "its runs are not reused" in cap.err and "2 of 2 runs already finished" not in cap.err
    assert "0.9725" not in path.read_text() and "0.973" not in cap.out
    assert not any("0.9725" in p.read_text() for p in path.with_suffix(".runs").glob("*.json"))
    assert main(["report", str(lad)]) == 0

    # a file where the records folder must be: named as such
    shutil.rmtree(path.with_suffix(".runs"))
    path.with_suffix(".runs").write_text("not a folder")
    capsys.readouterr()
    assert main(["report", str(lad)]) == 2
    assert "is not a folder (a file stands where" in capsys.readouterr().err

    sat = tmp_path / "S"
    sargs = ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--extra", "0",
             "--epochs", "1", "--analysis-batches", "1", "--out", str(sat)]
    _, err = _orphaned_edit(sargs, sat, "saturation_*.json", tmp_path / "smoved", capsys)
    assert "was edited after it was written" in err


def test_an_unsealed_json_of_an_earlier_version_still_becomes_records(tmp_path, capsys):
    """The other side of the rule: a JSON older than records and seals (no .runs, no seal) is read as before."""
    import shutil

    from depthaudit.stores import SEAL

    lad = tmp_path / "L"
    args = ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--output_dir", str(lad)]
    assert main(args) == 0
    path = next(lad.glob("ladder_*.json"))
    doc = json.loads(path.read_text())
    doc.pop(SEAL)
    for rec in doc["runs"].values():  # an earlier version's runs: no executor stamp (it came with record folders)
        rec["provenance"].pop("executor")
    path.write_text(json.dumps(doc))
    shutil.rmtree(path.with_suffix(".runs"))
    capsys.readouterr()
    assert main(args) == 0
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    assert len(list(path.with_suffix(".runs").glob("*%2F*.json"))) == 2  # its runs became records


def test_an_altered_decoded_cache_is_rebuilt_from_the_source(tmp_path, monkeypatch, capsys):
    """105: the decoded CIFAR cache (.npz) replaced by one with other labels trained silently, its results naming
    the zip's sha256."""
    import numpy as np

    from depthaudit.data.base import ArrayData, cache_dir, cached_arrays

    monkeypatch.setenv("DEPTHAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (20, 4, 4, 3), dtype=np.uint8)
    y = rng.integers(0, 3, 20).astype(np.int64)
    builds = []

    def build():
        builds.append(1)
        return ArrayData(x, y, x[:5], y[:5], 3, "src", "a" * 64)

    first = cached_arrays("toy", build)
    again = cached_arrays("toy", build)
    assert len(builds) == 1 and np.array_equal(again.y_train, y)  # an intact entry is read, not rebuilt
    path = cache_dir() / "decoded" / "toy.npz"
    z = dict(np.load(path))
    z["y_train"] = np.zeros_like(z["y_train"])  # the walker's edit: every label 0, the rest (hashes too) kept
    np.savez(path, **z)
    capsys.readouterr()
    got = cached_arrays("toy", build)
    assert len(builds) == 2 and np.array_equal(got.y_train, y) and np.array_equal(first.x_train, got.x_train)
    assert "is damaged, altered or older than its digest; it is rebuilt from the source" in capsys.readouterr().err


def test_python_configs_refuse_an_empty_path_as_the_cli_does():
    """56: TrainConfig(data_dir="") was accepted and read as "the default cache"."""
    import pytest

    for cls, kw in ((da.TrainConfig, {"data_dir": ""}), (da.TrainConfig, {"warm_start": " "}),
                    (da.SaturationConfig, {"text": ""}), (da.GrowConfig, {"data_dir": ""})):
        with pytest.raises(da.ConfigError, match="is an empty path; give a path"):
            cls(**kw)


def test_integers_beyond_64_bits_are_refused_in_one_line(tmp_path, capsys):
    """16–18: --d-hidden / --num-blocks / --extra 99999999999999999999 were internal-error tracebacks."""
    for cmd in (["train", *TINY, "--d-hidden", "99999999999999999999", "--out", str(tmp_path / "t")],
                ["train", *TINY, "--num-blocks", "99999999999999999999", "--out", str(tmp_path / "t")],
                ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--extra", "99999999999999999999",
                 "--out", str(tmp_path / "s")]):
        assert main(cmd) == 2
        assert "99999999999999999999 must be <= 9223372036854775807" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_saturation_table_holding_earlier_depths_says_so(tmp_path, capsys):
    """93 (unclear): `saturation --extra 1` into a folder of `--extra 0` printed the N=0 row too, without a word."""
    args = ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1",
            "--analysis-batches", "1", "--out", str(tmp_path / "s")]
    assert main([*args, "--extra", "0"]) == 0
    assert "did not ask for" not in capsys.readouterr().err
    assert main([*args, "--extra", "1"]) == 0
    assert "also 1 this call did not ask for (N0)" in capsys.readouterr().err


def test_python_values_in_another_shape_are_taken_or_named(tmp_path):
    """53, 65, 71 (unclear): method='fa:head=exact' said "unknown method"; lambdas='0.1' was split into characters;
    seeds as a generator was refused with its repr."""
    import pytest

    with pytest.raises(da.ConfigError, match=r"is a method spec \(name:options\); give method='fa', "
                                             r"method_options=\{'head': 'exact'\}"):
        da.TrainConfig(method="fa:head=exact")
    with pytest.raises(da.ConfigError, match="got the string '0.1'"):
        da.InterveneConfig(audit=da.AuditConfig(base=da.TrainConfig()), lambdas="0.1")
    res = da.identity(da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1), seeds=(s for s in (1, 2)),
                      probe_batches=1, probe_batch_size=16)
    assert res.record["seeds"] == [1, 2]


def test_notes_for_warmup_flags_without_effect(tmp_path, capsys):
    """13, 14 (unclear): --warmup-fraction without --warmup, or --warmup with fraction 0, said nothing."""
    assert main(["train", *TINY, "--warmup-fraction", "0.5", "--out", str(tmp_path / "a")]) == 0
    assert "--warmup-fraction has no effect without --warmup" in capsys.readouterr().err
    assert main(["train", *TINY, "--warmup", "dfa", "--warmup-fraction", "0", "--out", str(tmp_path / "b")]) == 0
    assert "--warmup dfa has no effect with --warmup-fraction 0" in capsys.readouterr().err


def test_intervene_does_not_say_it_skipped_what_it_just_trained(tmp_path, capsys):
    """44 (unclear): after training every run, intervene printed "2 of 2 runs already finished … skipping" per λ."""
    assert main(["intervene", *TINY, "--methods", "bp", "--lambdas", "0", "0.1", "--probe-batches", "1",
                 "--out", str(tmp_path / "i")]) == 0
    assert "already finished" not in capsys.readouterr().err


def test_a_folder_where_a_record_or_checkpoint_must_be_is_named_before_training(tmp_path, capsys):
    """77, 78, 85 (unclear): a folder in place of result.json was announced "trains again", trained, then refused;
    runs/ as a file was blamed on a record; a folder in place of checkpoint.pt dropped the CKA section silently."""
    import shutil

    a = tmp_path / "a"
    args = ["audit", *TINY, "--methods", "bp", "fa", "--probe-batches", "1", "--out", str(a)]
    assert main(args) == 0
    run = next(a.glob("runs/*_bp_all_*"))
    (run / "result.json").unlink()
    (run / "result.json").mkdir()
    capsys.readouterr()
    assert main(["report", str(a)]) == 2
    assert "move it away, then rerun" in capsys.readouterr().err
    assert main(args) == 2  # refused before anything trains (no wasted run)
    err = capsys.readouterr().err
    assert "it is not replaced: move it away and rerun" in err and "run bp/" not in err and "run fa/" not in err
    shutil.rmtree(run / "result.json")
    assert main(args) == 0
    fa = next(a.glob("runs/*_fa_all_*"))
    (fa / "checkpoint.pt").unlink()
    (fa / "checkpoint.pt").mkdir()
    capsys.readouterr()
    assert main(args) == 2
    assert "checkpoint.pt is not a file; the CKA to BP reads it" in capsys.readouterr().err
    b = tmp_path / "b"
    shutil.copytree(a, b, ignore=shutil.ignore_patterns("runs"))
    (b / "runs").write_text("x")
    assert main(["report", str(b)]) == 2
    assert f"{b / 'runs'} is not a folder (a file stands where the run records must be)" in capsys.readouterr().err


def test_configs_are_hashable():
    """58 (unclear): hash(TrainConfig(...)) was a TypeError (its method_options is a dict), unlike a frozen config."""
    a, b = da.TrainConfig(), da.TrainConfig()
    fa, exact = da.TrainConfig().with_method("fa"), da.TrainConfig().with_method("fa:head=exact")
    assert hash(a) == hash(b) and len({a, b, fa, exact}) == 3 and {a: 1}[b] == 1
    assert len({da.AuditConfig(base=a), da.AuditConfig(base=b)}) == 1


def test_a_plugins_lingering_thread_neither_hangs_nor_deafens_the_command(tmp_path):
    """W5 (115): a plug-in's non-daemon thread made `audit --jobs 2` hang before its report (workers never exited),
    and `--jobs 1` / `train` hang after it, deaf to Ctrl-C. Real processes, the installed entry point."""
    import os
    import subprocess
    import sys

    (tmp_path / "walk5_spinner.py").write_text(
        "import threading, time\n\ndef spin():\n    while True:\n        time.sleep(0.5)\n\n"
        "threading.Thread(target=spin, daemon=False, name='spinner').start()\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    for jobs in ("2", "1"):
        out = tmp_path / f"a{jobs}"
        p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "walk5_spinner", "audit", *TINY,
                            "--methods", "bp", "--probe-batches", "1", "--jobs", jobs, "--out", str(out)],
                           env=env, capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stderr
        assert (out / "report.json").is_file() and "ends without waiting for them" in p.stderr, p.stderr
        if jobs == "2":
            assert "after their runs were stored (a plug-in's thread still running?)" in p.stderr


def test_a_plugin_dataset_without_a_data_hash_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    """W6 (125): ArrayData(..., sha256=None) trained every run, then an internal-error traceback in the card."""
    (tmp_path / "walk5_nosha.py").write_text(
        "import numpy as np\nfrom depthaudit.data.base import DATASETS, ArrayData\n\n@DATASETS.register('walk5nosha')\n"
        "def load(data_dir=None, download=False):\n    rng = np.random.default_rng(0)\n"
        "    x = rng.normal(size=(200, 6)).astype(np.float32)\n    y = rng.integers(0, 3, 200)\n"
        "    return ArrayData(x[:150], y[:150], x[150:], y[150:], 3, 'nosha', None)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "za"
    assert main(["--plugin", "walk5_nosha", "audit", "--dataset", "walk5nosha", "--d-hidden", "8", "--num-blocks",
                 "1", "--epochs", "1", "--methods", "bp", "--probe-batch-size", "10", "--probe-batches", "2",
                 "--out", str(out)]) == 2
    assert "its ArrayData sha256 is None; give a non-empty string" in capsys.readouterr().err
    assert not out.exists()
    # walk 11 case 47: a "sha256" that is no digest (it names the data in every record) is refused the same way
    (tmp_path / "walk11_badsha.py").write_text((tmp_path / "walk5_nosha.py").read_text().replace(
        "'nosha', None)", "'nosha', '../../etc')").replace("'walk5nosha'", "'walk11badsha'"))
    assert main(["--plugin", "walk11_badsha", "train", "--dataset", "walk11badsha", "--d-hidden", "8", "--num-blocks",
                 "1", "--epochs", "1", "--out", str(out)]) == 2
    assert "its ArrayData sha256 is '../../etc', not a sha256 digest" in capsys.readouterr().err
    assert not out.exists()


def test_a_report_whose_seal_was_removed_beside_sealed_records_is_refused(tmp_path, capsys):
    """W7 (136): deleting report.json's record_sha256 let an edited provenance (device, date) be rendered."""
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    doc = json.loads((a / "report.json").read_text())
    doc.pop("record_sha256")
    doc["provenance"]["device"] = "cuda H100"
    (a / "report.json").write_text(json.dumps(doc))
    md = (a / "report.md").read_text()
    capsys.readouterr()
    assert main(["report", str(a)]) == 2
    assert "has no record_sha256 seal though the run records beside it are sealed" in capsys.readouterr().err
    assert (a / "report.md").read_text() == md and "H100" not in md


def test_a_plugin_that_ignores_ctrl_c_at_import_cannot_deafen_the_command(tmp_path):
    """116 (unclear): a plug-in setting SIGINT/SIGTERM to SIG_IGN at import made Ctrl-C do nothing. Real process,
    real SIGINT."""
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "walk5_deaf.py").write_text("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "depthaudit", "--plugin", "walk5_deaf", "train", "--dataset",
                          "mnist1d", "--d-hidden", "64", "--num-blocks", "2", "--epochs", "2000",
                          "--out", str(tmp_path / "t")], env=env, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # (as a terminal delivers it)
    deadline = time.monotonic() + 120
    err = ""
    while time.monotonic() < deadline:  # wait until it trains (its first epoch line), then Ctrl-C
        line = p.stderr.readline()
        err += line
        if line.startswith("epoch 1/"):
            break
    p.send_signal(signal.SIGINT)
    _, rest = p.communicate(timeout=60)
    err += rest
    assert p.returncode == 130, err
    assert "a plug-in changed the SIGINT handler at import; restored" in err and "interrupted" in err
    assert not (tmp_path / "t" / "result.json").exists()


def test_a_plugin_methods_own_bad_default_is_blamed_on_the_method(tmp_path, monkeypatch, capsys):
    """120 (unclear): an Option default outside its own range blamed the user's --method spec."""
    (tmp_path / "walk5_baddef.py").write_text(
        "from depthaudit.methods import METHODS, FA\nfrom depthaudit.methods.options import Option\n\n"
        "@METHODS.register('walk5baddef')\nclass BadDef(FA):\n    name = 'walk5baddef'\n"
        "    options = {**FA.options, 'gain': Option(-1.0, 'a gain', lo=0, lo_open=True)}\n\n"
        "    def __init__(self, model, seed, gain=-1.0, **kw):\n        super().__init__(model, seed, **kw)\n"
        "        self.gain = gain\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["--plugin", "walk5_baddef", "train", *TINY, "--method", "walk5baddef",
                 "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "method walk5baddef: its option gain's default -1.0 breaks the option's own declaration" in err, err
    assert main(["--plugin", "walk5_baddef", "train", *TINY, "--method", "walk5baddef:gain=2",
                 "--out", str(tmp_path / "t")]) == 0  # the user's value: taken


def test_monitor_and_capture_inputs_are_checked_where_given(tmp_path):
    """149, 155, 156 (unclear): capture_credits with 64 inputs and 10 labels was a raw torch error; report(budget=-1)
    was stored as 1 epoch; TrainingMonitor(name="") gave a blank card column."""
    import pytest
    import torch

    from depthaudit.errors import UsageError
    from depthaudit.models import ResMLP

    model = ResMLP((8,), 3, d_hidden=8, num_blocks=1, seed=0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 3, (10,), generator=g)
    with pytest.raises(UsageError, match="x holds 64 examples but y 10 labels"):
        da.capture_credits(model, x, y)
    with pytest.raises(UsageError, match="name=''"):
        da.TrainingMonitor(model, [(x, torch.randint(0, 3, (64,), generator=g))], name="", log=None)
    mon = da.TrainingMonitor(model, [(x, torch.randint(0, 3, (64,), generator=g))], log=None)
    mon.step(0)
    mon.step(5)
    for bad in (-1, 4, 2.5):
        with pytest.raises(UsageError, match="budget="):
            mon.report(test_acc=0.5, budget=bad)
    assert mon.report(test_acc=0.5, budget=10)["config"]["base"]["epochs"] == 10


def test_a_probes_cell_says_what_the_warm_start_needs(tmp_path, capsys):
    """147 (unclear): with --pre-epochs, a cell said report would write the tables once every cell finished."""
    assert main(["probes", *TINY, "--pre-epochs", "1", "--alphas", "0", "--seeds", "1", "--cell", "0",
                 "--out", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "the same command without --cell trains the BP warm start's runs" in out


def test_report_says_which_results_it_skipped_inside_a_run_store(tmp_path, capsys):
    """135 (unclear): a ladder copied inside an audit's runs/ folder was skipped without a word."""
    import shutil

    a, lad = tmp_path / "a", tmp_path / "l"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    assert main(["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--probe-batches", "1",
                 "--output_dir", str(lad)]) == 0
    for f in lad.iterdir():
        (shutil.copytree if f.is_dir() else shutil.copy)(f, a / "runs" / f.name)
    capsys.readouterr()
    assert main(["report", str(a)]) == 0
    assert "skipped" in (err := capsys.readouterr().err) and "ladder_d8_L1_mnist1d.json: it lies inside" in err


def test_removing_the_json_seal_too_does_not_let_an_orphan_edit_through(tmp_path, capsys):
    """Walk 6 (40–46): the walk-5 fix held only while the JSON kept its seal; deleting record_sha256 as well made an
    edited ladder/grow JSON without its records pass as an earlier version's, rendered and laundered into records."""
    import shutil

    from depthaudit.stores import SEAL

    for name, args in (("ladder", ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--probe-batches", "1",
                                   "--output_dir"]),
                       ("grow", ["grow", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8",
                                 "--extra", "1", "--epochs", "1", "--out"])):
        out = tmp_path / name
        assert main([*args, str(out)]) == 0, name
        path = next(out.glob(f"{name}_*.json"))
        doc = json.loads(path.read_text())
        doc.pop(SEAL)
        key = sorted(doc["runs"])[-1]
        doc["runs"][key]["final"]["test_acc"] = 0.9725
        path.write_text(json.dumps(doc))
        shutil.move(path.with_suffix(".runs"), tmp_path / f"{name}_moved")
        capsys.readouterr()
        assert main(["report", str(out)]) == 2, name
        assert "has no record_sha256 seal though it was written by a version that seals it" in capsys.readouterr().err
        assert main([*args, str(out)]) == 0, name  # retrained, the edit nowhere
        assert "0.9725" not in path.read_text()
        assert not any("0.9725" in p.read_text() for p in path.with_suffix(".runs").glob("*.json")), name


def test_an_intervention_json_whose_own_fields_were_edited_is_refused(tmp_path, capsys):
    """Walk 6 (48, 49): intervention.json's penalty_form or λ grid edited by hand was rendered in its title."""
    i = tmp_path / "i"
    assert main(["intervene", *TINY, "--methods", "bp", "--lambdas", "0", "0.1", "--probe-batches", "1",
                 "--out", str(i)]) == 0
    good = (i / "intervention.json").read_text()
    for edit, words in ((lambda d: d.update(penalty_form="rel"), "its penalty form 'rel' is not its audits'"),
                        (lambda d: d.update(lambdas=[0.0, 0.5]), "its λ grid [0.0, 0.5] is not that of the audits")):
        doc = json.loads(good)
        edit(doc)
        (i / "intervention.json").write_text(json.dumps(doc))
        md = (i / "intervention.md").read_text()
        capsys.readouterr()
        assert main(["report", str(i)]) == 2
        assert words in capsys.readouterr().err
        assert (i / "intervention.md").read_text() == md


def test_a_plugin_model_with_the_wrong_number_of_logits_is_named_before_training(tmp_path, monkeypatch, capsys):
    """Walk 6 (65): a plug-in model whose readout gave num_classes - 3 logits was an internal-error traceback from the
    loss, mid-run, with the audit's folder claimed."""
    (tmp_path / "walk6_fewc.py").write_text(
        "import math\nimport torch\nfrom torch import nn\nfrom depthaudit.models import MODELS, ResidualAdapter\n\n"
        "class Net(nn.Module):\n    def __init__(self, din, d, L, k):\n        super().__init__()\n"
        "        self.stem = nn.Linear(din, d)\n"
        "        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(L)])\n"
        "        self.head = nn.Linear(d, k)\n\n    def forward(self, x):\n        h = self.stem(x.flatten(1))\n"
        "        for layer in self.layers:\n            h = h + layer(h)\n        return self.head(h)\n\n"
        "@MODELS.register('walk6fewc')\n"
        "def fewc(input_shape, num_classes, d_hidden=32, num_blocks=4, mlp_ratio=4, seed=0):\n"
        "    torch.manual_seed(seed)\n    return ResidualAdapter(Net(math.prod(input_shape), d_hidden, num_blocks, "
        "num_classes - 3), embed='stem', blocks='layers', readout='head', block_includes_residual=False)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for cmd, flag in (("train", "--out"), ("audit", "--out")):
        out = tmp_path / cmd
        assert main(["--plugin", "walk6_fewc", cmd, *TINY, "--arch", "walk6fewc", flag, str(out)]) == 2, cmd
        err = capsys.readouterr().err
        assert "walk6_fewc.py:" in err and "returns logits of shape (2, 7)" in err and "not (2, 10)" in err, err
        assert not out.exists()


def test_method_option_counts_beyond_64_bits_are_refused(tmp_path, capsys):
    """Walk 6 (15, 17, 18): --ep-steps / --cb-draws beyond int64 trained forever or crashed in torch."""
    for flag, method in (("--ep-steps", "ep"), ("--cb-draws", "cb")):
        assert main(["train", *TINY, "--method", method, flag, "99999999999999999999",
                     "--out", str(tmp_path / method)]) == 2
        assert "must be <= 9223372036854775807" in capsys.readouterr().err
    import pytest

    with pytest.raises(da.ConfigError, match="must be <= 9223372036854775807"):
        da.TrainConfig(method="cb", method_options={"draws": 10**20})
