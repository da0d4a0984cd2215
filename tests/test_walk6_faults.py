"""What the sixth independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import json
import os
import subprocess
import sys

from depthaudit.cli import main

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def _audit(tmp_path):
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    return a


def test_the_report_scripts_check_their_options_and_their_output(tmp_path, capsys):
    """83, 84, 86: a negative budget, an unknown dataset accepted; a user's own PNG replaced by the claim figure."""
    from PIL import Image

    from depthaudit.report import claim, field

    a = _audit(tmp_path)
    capsys.readouterr()
    for opts, words in ((["--epochs", "-1"], "--epochs '-1': give the budget, an integer >= 1"),
                        (["--epochs", "x"], "--epochs 'x'"), (["--dataset", "nosuch"], "--dataset 'nosuch' not known"),
                        (["--epochs"], "--epochs needs a value")):
        assert field.main([str(tmp_path / "f.md"), str(a), *opts]) == 2, opts
        assert words in capsys.readouterr().err
    assert not (tmp_path / "f.md").exists()
    photo = tmp_path / "photo.png"
    Image.new("RGB", (10, 10)).save(photo)
    before = photo.read_bytes()
    assert claim.main([str(photo), str(a)]) == 2
    assert "give a new or depthaudit-written .png path" in capsys.readouterr().err and photo.read_bytes() == before
    assert claim.main([str(tmp_path / "c.png"), str(a)]) == 0
    assert claim.main([str(tmp_path / "c.png"), str(a)]) == 0  # its own figure: replaced
    Image.new("RGB", (10, 10)).save(tmp_path / "g.png")  # the field table's figure name, a user's picture
    assert field.main([str(tmp_path / "g.md"), str(a)]) == 2
    assert "g.png exists and is not depthaudit's figure" in capsys.readouterr().err and not (tmp_path / "g.md").exists()


def test_the_report_scripts_end_quietly_when_stdout_fails(tmp_path):
    """91–94: the field/claim scripts into /dev/full or a closed pipe were tracebacks."""
    a = _audit(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for mod, first in (("depthaudit.report.field", str(tmp_path / "f.md")),
                       ("depthaudit.report.claim", str(tmp_path / "c.png"))):
        cmd = [sys.executable, "-m", mod, first, str(a)] + (["--dataset", "mnist1d", "--epochs", "1"]
                                                              if mod.endswith("field") else [])
        with open("/dev/full", "w") as full:
            p = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
        assert p.returncode == 2 and "cannot write the standard output" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        p.stdout.close()  # the reader is gone before a line is printed
        _, err = p.communicate(timeout=300)
        assert p.returncode == 141 and b"Traceback" not in err, err


def test_an_edited_store_identity_is_named_and_never_outweighs_the_sealed_records(tmp_path, capsys):
    """107–109: a hand-edited .runs/identity.json (lr 0.001 → 0.5) was blamed on the ladder JSON; following the advice
    rebuilt a JSON claiming lr 0.5, and a `--lr 0.5` ladder then replaced every intact lr-0.001 record."""
    import shutil

    base = ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--probe-batches", "1"]
    lad = tmp_path / "l"
    assert main([*base, "--output_dir", str(lad)]) == 0
    path = next(lad.glob("ladder_*.json"))
    runs = path.with_suffix(".runs")
    records = {p.name: p.read_bytes() for p in runs.glob("*%2F*.json")}
    marker = runs / "identity.json"
    doc = json.loads(marker.read_text())
    doc["identity"]["lr"] = 0.5
    marker.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["report", str(lad)]) == 2
    assert f"{marker} differs from the sealed run records beside it (in: lr): it was edited" in capsys.readouterr().err
    shutil.move(path, tmp_path / "moved.json")  # the walker followed the old advice: the JSON moved away
    assert main([*base, "--lr", "0.5", "--output_dir", str(lad)]) == 2
    marker.unlink()  # and the claim removed too: the records' own place still says lr 0.001
    assert main([*base, "--lr", "0.5", "--output_dir", str(lad)]) == 2
    assert "holds runs of a different configuration (differs in: lr)" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in runs.glob("*%2F*.json")} == records  # nothing replaced
    assert main(["report", str(lad)]) == 0  # rebuilt from the records, under their own claim
    assert json.loads(path.read_text())["identity"]["lr"] == 0.001


def test_a_vit_shallow_baseline_takes_a_width_its_heads_divide(tmp_path, capsys):
    """125: `audit --arch vit --shallow-baseline` computed width 22 (not a multiple of 4 heads), was refused after
    claiming the folder, and the corrected command was then refused as another audit."""
    out = tmp_path / "a"
    args = ["audit", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1", "--arch",
            "vit", "--methods", "bp", "--probe-batches", "1", "--out", str(out)]
    assert main([*args, "--shallow-baseline"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["methods"][0]["shallow"]["d_hidden"] % 4 == 0
    import depthaudit as da
    from depthaudit.data import load_data
    from depthaudit.experiments.shallow import matched_shallow

    data = load_data("mnist1d", None, False, __import__("torch").device("cpu"))
    m = matched_shallow(da.TrainConfig(dataset="mnist1d", d_hidden=16, num_blocks=2), data.input_shape, 10, 1)
    plain = matched_shallow(da.TrainConfig(dataset="mnist1d", d_hidden=16, num_blocks=2, arch="vit"),
                            data.input_shape, 10, 1)
    assert m["d_hidden"] >= 1 and plain["d_hidden"] % 4 == 0


def test_walk6_unclear_outcomes_made_clear(tmp_path, monkeypatch, capsys):
    """Walk 6's unclear 2, 5, 6, 9: a refused CIFAR source left a decoded copy under the CIFAR name in the cache;
    AuditConfig(base=TrainConfig(method='fa')) trained bp/fa/dfa but stored fa in its identity; np.float32(1e-3)
    was refused as "must be a number"; claim with nothing to plot wrote an empty figure and exited 0."""
    import io
    import zipfile

    import numpy as np
    import pytest
    from PIL import Image

    import depthaudit as da
    from depthaudit.report import claim

    monkeypatch.setenv("DEPTHAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    z = tmp_path / "three.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for split in ("train", "test"):
            for c in ("a", "b", "c"):
                buf = io.BytesIO()
                Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(buf, format="PNG")
                zf.writestr(f"{split}/{c}/0.png", buf.getvalue())
    assert main(["train", "--dataset", "cifar10", "--data-dir", str(z), "--epochs", "1",
                 "--out", str(tmp_path / "t")]) == 2
    assert "expects 32×32 RGB images of 10 classes" in capsys.readouterr().err
    assert not list((tmp_path / "cache").rglob("cifar10-*.npz"))  # no decoded copy under the CIFAR name
    assert main(["train", "--dataset", "imagefolder", "--data-dir", str(z), "--epochs", "1", "--d-hidden", "8",
                 "--num-blocks", "1", "--out", str(tmp_path / "i")]) == 0  # the same zip under its own name: cached
    assert list((tmp_path / "cache").rglob("imagefolder-*.npz"))

    with pytest.raises(da.ConfigError, match="the base config's method 'fa' is not what this sweep trains"):
        da.AuditConfig(base=da.TrainConfig(method="fa"))
    c = da.TrainConfig(lr=np.float32(1e-3), epochs=np.int64(3))
    assert type(c.lr) is float and type(c.epochs) is int and c.epochs == 3
    with pytest.raises(da.ConfigError, match="epochs must be an integer"):
        da.TrainConfig(epochs=np.bool_(True))

    empty = tmp_path / "empty"
    empty.mkdir()
    assert claim.main([str(tmp_path / "c.png"), str(empty)]) == 2
    assert "nothing to plot" in capsys.readouterr().err and not (tmp_path / "c.png").exists()


def test_a_listing_is_not_refused_for_a_folder_it_could_not_write(tmp_path, monkeypatch, capsys):
    """Walk 6 unclear 3: `ladder --list-cells` on a read-only store was refused, though a listing writes nothing."""
    import depthaudit.io as dio

    base = ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--probe-batches", "1",
            "--output_dir", str(tmp_path / "l")]
    assert main(base) == 0
    monkeypatch.setattr(dio.os, "access", lambda path, mode: False)  # what a read-only mount answers, even to root
    capsys.readouterr()
    assert main([*base, "--list-cells"]) == 0
    assert "bp/k1/s1\tdone" in capsys.readouterr().out
    assert main([*base, "--lr", "0.002"]) == 2  # a command that writes: still refused there
    assert "is not writable" in capsys.readouterr().err


def test_stored_only_on_another_device_says_why_nothing_is_found(tmp_path, capsys):
    """Walk 6 unclear 4: `--device cuda --stored-only` on a CPU-trained ladder said only "not finished"."""
    base = ["ladder", *TINY, "--methods", "bp", "--seeds", "1", "--probe-batches", "1",
            "--output_dir", str(tmp_path / "l")]
    assert main(base) == 0
    capsys.readouterr()
    assert main([*base, "--device", "cuda", "--stored-only"]) == 2
    assert "they are stored as trained on cpu, and a run is not reused on another device" in capsys.readouterr().err
