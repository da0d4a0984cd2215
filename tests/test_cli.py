"""Bad input: one line naming the problem, exit code 2, no output folder. Run as a real subprocess."""

import pickle
import subprocess
import sys

import pytest


def run(args, tmp_path, env_cache):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "depthaudit.cli", *args, "--out", str(out)],
                       capture_output=True, text=True, env=env_cache, timeout=120)
    return p, out


@pytest.fixture
def env_cache(tmp_path):
    import os

    return {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}


def _write_archive(path, payload: bytes):
    path.write_bytes(payload)


CASES = {
    "unknown method": (["train", "--method", "nope"], "unknown method 'nope'; choose one of"),
    "unknown arch": (["train", "--arch", "nope"], "--arch"),
    "unknown dataset": (["train", "--dataset", "nope"], "--dataset"),
    "k > L": (["train", "--num-blocks", "4", "--train-blocks", "last:5"], "k=5 exceeds --num-blocks 4"),
    "bad train-blocks": (["train", "--train-blocks", "some"], "not understood"),
    "missing data dir": (["train", "--dataset", "cifar10", "--data-dir", "/nonexistent/x"], "does not exist"),
    "empty data dir": (["train", "--dataset", "cifar10", "--data-dir", "{tmp}"], "--dataset mnist1d"),
    "bad device": (["train", "--device", "tpu"], "--device"),
    "negative epochs": (["train", "--epochs", "-1"], "--epochs"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_one_line_exit_2_no_output(case, tmp_path, env_cache):
    args, needle = CASES[case]
    d = tmp_path / "empty"
    d.mkdir()
    p, out = run([a.replace("{tmp}", str(d)) for a in args], tmp_path, env_cache)
    print(case, "→", p.stderr.strip())
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and needle in p.stderr
    assert not out.exists()


def test_corrupt_pickle_folder(tmp_path, env_cache):
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (d / f).write_bytes(b"this is not a pickle")
    p, out = run(["train", "--dataset", "cifar10", "--data-dir", str(tmp_path)], tmp_path, env_cache)
    print(p.stderr.strip())
    assert p.returncode == 2 and "corrupt" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_corrupt_zip(tmp_path, env_cache):
    z = tmp_path / "cifar.zip"
    z.write_bytes(b"PK\x03\x04 garbage")
    p, out = run(["train", "--dataset", "cifar10", "--data-dir", str(z)], tmp_path, env_cache)
    print(p.stderr.strip())
    assert p.returncode == 2 and "zip" in p.stderr and not out.exists()


def test_checksum_mismatch(tmp_path, env_cache):
    # an official-archive name holding the wrong bytes must be refused before extraction
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(pickle.dumps({"not": "cifar"}))
    p, out = run(["train", "--dataset", "cifar10", "--data-dir", str(tmp_path)], tmp_path, env_cache)
    print(p.stderr.strip())
    assert p.returncode == 2 and "checksum mismatch" in p.stderr and not out.exists()
    assert not (tmp_path / "cifar-10-batches-py").exists()


def test_existing_result_refused_without_force(tmp_path, env_cache):
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.json").write_text("{}")
    p, _ = run(["train"], tmp_path, env_cache)  # a file that is not a depthaudit record: the user's, never --force'd
    assert p.returncode == 2 and "is not depthaudit's" in p.stderr and "--force" not in p.stderr
    assert (out / "result.json").read_text() == "{}"


def test_underscore_spellings_and_help(tmp_path, env_cache):
    p = subprocess.run([sys.executable, "-m", "depthaudit.cli", "train", "--help"], capture_output=True,
                       text=True, env=env_cache)
    # one line per flag: the dashed spelling is listed, the underscore one accepted (below); advanced flags
    # (method options, cluster resources) only in --help-all, and every help fits a screen
    assert p.returncode == 0 and "--d-hidden N" in p.stdout and "--d_hidden" not in p.stdout
    assert "(default: 256)" in p.stdout and "--help-all" in p.stdout and "--ep-beta" not in p.stdout
    full = subprocess.run([sys.executable, "-m", "depthaudit.cli", "train", "--help-all"], capture_output=True,
                          text=True, env=env_cache)
    assert full.returncode == 0 and "--ep-beta" in full.stdout and len(full.stdout) > len(p.stdout)
    for cmd in ("audit", "intervene", "ladder", "probes", "train", "saturation", "grow", "identity", "report"):
        h = subprocess.run([sys.executable, "-m", "depthaudit.cli", cmd, "--help"], capture_output=True, text=True,
                           env=env_cache).stdout
        print(cmd, len(h.splitlines()), "lines")
        assert len(h.splitlines()) <= 64, cmd
    p, out = run(["train", "--d_hidden", "8", "--num_blocks", "1", "--epochs", "1", "--no_checkpoint"],
                 tmp_path, env_cache)
    assert p.returncode == 0, p.stderr
    import json

    cfg = json.loads((out / "result.json").read_text())["config"]
    assert cfg["d_hidden"] == 8 and cfg["num_blocks"] == 1
