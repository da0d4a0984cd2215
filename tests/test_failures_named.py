"""Issue 36: every failure says what happened, in one line, exit 2, and keeps what finished.

Real processes where the process's own surroundings matter (HOME, stdout, signals), real files otherwise.
"""

import errno
import os
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

import depthaudit.io as dio
from depthaudit.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def _env(tmp_path, **extra):
    given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *given]), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache"), "MPLCONFIGDIR": str(tmp_path / "mpl"), **extra}
    return {k: v for k, v in env.items() if v is not None}


def _run(args, tmp_path, stdout=subprocess.PIPE, **env):
    p = subprocess.run([sys.executable, "-m", "depthaudit", *args], cwd=tmp_path, env=_env(tmp_path, **env),
                       stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)
    return p.returncode, p.stderr


def _only_error(err: str) -> str:
    """The one error line; nothing else but the command's own progress lines, never a traceback."""
    bad = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("depthaudit train:", "epoch "))]
    assert len(bad) == 1 and bad[0].startswith("depthaudit: error: "), err
    assert "Traceback" not in err and "internal error" not in err and "Exception ignored" not in err, err
    return bad[0]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("env", [{"HOME": "/proc", "DEPTHAUDIT_CACHE_DIR": None, "XDG_CACHE_HOME": None},
                                 {"DEPTHAUDIT_CACHE_DIR": "/proc/depthaudit-cache"}], ids=["home-proc", "cache-proc"])
def test_an_unusable_home_or_cache_is_named_not_called_internal(tmp_path, env):
    rc, err = _run(["train", *TINY, "--out", "o"], tmp_path, **env)
    line = _only_error(err)
    print(rc, line)
    assert rc == 2 and "/proc/" in line and "DEPTHAUDIT_CACHE_DIR" in line and "standard output" not in line


def test_an_out_that_is_a_dangling_symlink_is_refused_before_training(tmp_path):
    (tmp_path / "o").symlink_to(tmp_path / "gone" / "deeper")
    rc, err = _run(["train", *TINY, "--out", "o"], tmp_path)
    line = _only_error(err)
    print(rc, line)
    assert rc == 2 and "is a symbolic link to" in line and "which does not exist" in line
    assert "epoch 1/" not in err and (tmp_path / "o").is_symlink()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["train", *TINY, "--out", "o"],
                                  ["ladder", "--dataset", "mnist1d", "--list-cells", "--out", "lc"],
                                  ["audit", "--help"], ["--version"]],
                         ids=["train", "list-cells", "help", "version"])
def test_a_full_stdout_exits_2_in_one_line_and_the_result_is_kept(tmp_path, args):
    with open("/dev/full", "w") as full:
        rc, err = _run(args, tmp_path, stdout=full)
    print(rc, err)
    assert rc == 2 and "cannot write the standard output (No space left on device)" in _only_error(err)
    if args[0] == "train":
        assert (tmp_path / "o" / "result.json").is_file()


def _full_disk_while_writing(monkeypatch, pattern: str):
    """Writes into a file whose path holds ``pattern`` fail as on a full disk, at the write itself."""
    real = dio.os.fdopen

    def fdopen(fd, *a, **k):
        fh = real(fd, *a, **k)
        if pattern not in os.readlink(f"/proc/self/fd/{fd}"):
            return fh

        class Full:
            def __getattr__(self, name):
                return getattr(fh, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fh.close()

            def write(self, data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return Full()

    monkeypatch.setattr(dio.os, "fdopen", fdopen)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="maps a descriptor to its path through /proc")
def test_a_disk_that_fills_while_the_checkpoint_is_saved_keeps_the_run(tmp_path, monkeypatch, capsys):
    _full_disk_while_writing(monkeypatch, "checkpoint.pt")
    assert main(["train", *TINY, "--out", str(tmp_path / "o")]) == 2
    line = _only_error(capsys.readouterr().err)
    print(line)
    assert "checkpoint.pt: No space left on device" in line and "the run is kept in" in line
    assert (tmp_path / "o" / "result.json").is_file() and not (tmp_path / "o" / "checkpoint.pt").exists()
    assert not list((tmp_path / "o").glob(".*.tmp"))


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` × ``height`` pixels (and holds none): a decompression bomb's header."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def test_an_image_claiming_20000_by_20000_pixels_is_one_line(tmp_path, capsys):
    from PIL import Image

    for split in ("train", "test"):
        for cls in ("a", "b"):
            (tmp_path / "imgs" / split / cls).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / "imgs" / split / cls / "0.png")
    (tmp_path / "imgs" / "train" / "a" / "1.png").write_bytes(_png_header(20000, 20000))
    rc = main(["train", "--dataset", "imagefolder", "--data-dir", str(tmp_path / "imgs"), *TINY[2:],
               "--out", str(tmp_path / "o")])
    line = _only_error(capsys.readouterr().err)
    print(rc, line)
    assert rc == 2 and "cannot decode image" in line and "1.png" in line and "decompression bomb" in line
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    import numpy as np
    import torch

    root = tmp_path_factory.mktemp("lm")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=97, n_positions=64, bos_token_id=0,
                                  eos_token_id=0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(root / "gpt2")
    np.save(root / "tokens.npy", np.random.default_rng(0).integers(0, 97, 4000).astype(np.int64))
    return root


def test_a_context_beyond_the_models_positions_is_one_line(tiny_lm, tmp_path, capsys):
    rc = main(["saturation", "--family", "hf", "--model", str(tiny_lm / "gpt2"), "--text",
               str(tiny_lm / "tokens.npy"), "--context", "128", "--out", str(tmp_path / "o")])
    line = _only_error(capsys.readouterr().err)
    print(rc, line)
    assert rc == 2 and "--context 128 exceeds the 64 positions" in line and not (tmp_path / "o").exists()


def test_a_truncated_safetensors_is_one_line(tiny_lm, tmp_path, capsys):
    import shutil

    model = shutil.copytree(tiny_lm / "gpt2", tmp_path / "gpt2")
    weights = model / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as fh:
        fh.truncate(size // 2)
    rc = main(["saturation", "--family", "hf", "--model", str(model), "--text", str(tiny_lm / "tokens.npy"),
               "--context", "16", "--out", str(tmp_path / "o")])
    line = _only_error(capsys.readouterr().err)
    print(rc, line)
    assert rc == 2 and "model.safetensors is truncated" in line and not (tmp_path / "o").exists()


PLUGIN = ("from depthaudit.methods import METHODS, FA\n\n@METHODS.register('{name}')\nclass Ends(FA):\n"
          "    name = '{name}'\n\n    def credits(self, model, tr, e):\n        {body}\n")


@pytest.mark.parametrize("body, said", [("import sys; sys.exit(0)", "called sys.exit(0)"),
                                        ("raise KeyboardInterrupt", "raised KeyboardInterrupt")],
                         ids=["sys-exit-0", "keyboard-interrupt"])
@pytest.mark.parametrize("command", ["train", "audit", "ladder"])
def test_a_plugin_that_ends_the_command_inside_credits_is_named(tmp_path, monkeypatch, capsys, body, said, command):
    name = f"ends{abs(hash((body, command))) % 10**6}"
    (tmp_path / f"plugin_{name}.py").write_text(PLUGIN.format(name=name, body=body))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "")
    extra = {"train": ["--method", name], "audit": ["--methods", name, "--seeds", "1", "--probe-batches", "1",
                                                    "--probe-batch-size", "16"],
             "ladder": ["--methods", name, "--seeds", "1", "--k-values", "1", "--probe-batches", "1",
                        "--probe-batch-size", "16"]}[command]
    rc = main(["--plugin", f"plugin_{name}", command, *TINY, *extra, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("depthaudit: error")]
    print(rc, lines)
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err
    assert f"plug-in plugin_{name} {said} at " in lines[0] and f"plugin_{name}.py:8 (in credits)" in lines[0]
    assert not list((tmp_path / "o").rglob("result.json")) and not list((tmp_path / "o").rglob("*.runs/fa*"))


@pytest.mark.parametrize("body, said", [("import sys; sys.exit(0)", "called sys.exit(0)"),
                                        ("raise KeyboardInterrupt", "raised KeyboardInterrupt")],
                         ids=["sys-exit-0", "keyboard-interrupt"])
def test_a_plugin_that_ends_a_jobs_2_worker_inside_credits_is_named(tmp_path, monkeypatch, capsys, body, said):
    """In a worker process the plug-in's SystemExit/KeyboardInterrupt comes back as its named failure, exit 2."""
    name = f"wends{abs(hash(body)) % 10**6}"
    (tmp_path / f"plugin_{name}.py").write_text(PLUGIN.format(name=name, body=body))
    monkeypatch.syspath_prepend(str(tmp_path))  # (spawned workers get the parent's sys.path)
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "")
    rc = main(["--plugin", f"plugin_{name}", "audit", *TINY, "--methods", name, "bp", "--seeds", "1",
               "--probe-batches", "1", "--probe-batch-size", "16", "--jobs", "2", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("depthaudit: error")]
    print(rc, lines)
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err
    assert f"plug-in plugin_{name} {said} at " in lines[0] and f"plugin_{name}.py:8 (in credits)" in lines[0]
    assert not (tmp_path / "o" / "report.json").exists()


def test_an_empty_method_list_is_refused_before_the_folder_is_claimed(tmp_path):
    import depthaudit as da
    from depthaudit.errors import UsageError

    with pytest.raises(UsageError, match="methods is empty"):  # the config refuses itself, before any folder
        cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", epochs=1, d_hidden=8, num_blocks=1), methods=())
        da.audit(cfg, tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("call", ["train", "audit", "ladder", "identity", "intervene-no-lambdas"])
def test_the_api_refuses_an_empty_out_and_empty_lambdas_before_anything_is_claimed(tmp_path, monkeypatch, call):
    """As the CLI refuses `--out ""`: da.train(cfg, "") must not write into the current folder."""
    import depthaudit as da
    from depthaudit.errors import ConfigError

    monkeypatch.chdir(tmp_path)  # where an empty path would land ("" is the current folder)
    base = da.TrainConfig(dataset="mnist1d", epochs=1, d_hidden=8, num_blocks=1)
    audit = da.AuditConfig(base=base, methods=("bp",), seeds=(1,), probe_batches=1, probe_batch_size=16)
    run = {"train": lambda: da.train(base, "", progress=False),
           "audit": lambda: da.audit(audit, "", progress=False),
           "ladder": lambda: da.ladder(da.LadderConfig(base=base, methods=("fa",), seeds=(1,), k_values=(1,),
                                                       probe_batches=1, probe_batch_size=16), "", progress=False),
           "identity": lambda: da.identity(base, seeds=(1,), probe_batches=1, probe_batch_size=16, out=""),
           "intervene-no-lambdas": lambda: da.intervene(audit, tmp_path / "o", lambdas=(), progress=False)}[call]
    with pytest.raises(ConfigError) as exc:
        run()
    print(call, exc.value)
    assert ("is an empty path" if call != "intervene-no-lambdas" else "lambdas is empty") in str(exc.value)
    assert len(str(exc.value).splitlines()) == 1 and not list(tmp_path.iterdir())


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_second_ctrl_c_just_after_a_jobs_2_sweep_ends_is_quiet(tmp_path):
    args = ["ladder", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--methods", "fa",
            "--k-values", "0", "1", "--seeds", "1", "--epochs", "1", "--probe-batches", "1", "--probe-batch-size",
            "16", "--jobs", "2", "--out", "o"]
    p = subprocess.Popen([sys.executable, "-m", "depthaudit", *args], cwd=tmp_path, env=_env(tmp_path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = []
    for line in p.stderr:  # the last run's line: the sweep has ended, its pool shuts down and the process exits
        err.append(line)
        if "2/2 runs" in line:
            break
    for _ in range(2):  # Ctrl-C twice, as a user whose sweep seemed slow to end
        p.send_signal(signal.SIGINT)
        time.sleep(0.05)
    out, rest = p.communicate(timeout=120)
    err = "".join(err) + rest
    print(p.returncode, err[-2000:])
    assert "2/2 runs" in err and "Traceback" not in err and "Exception ignored" not in err
    assert p.returncode in (0, 130)
    if p.returncode == 130:
        assert err.strip().splitlines()[-1].startswith("depthaudit: interrupted"), err
