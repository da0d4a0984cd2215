"""Walk 28's wrong cases, each reproduced as the walker did it (docs/walks/walk28_*.txt), as real processes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1", "--probe-batches", "1",
     "--probe-batch-size", "32"]

PLUGIN = '''
import ctypes, os
import torch
from depthaudit.methods import METHODS
from depthaudit.methods.dfa import DFA

HOW = os.environ.get("W28", "")
calls = [0]

@METHODS.register("w28")
class W28(DFA):
    def credits(self, model, tr, e):
        calls[0] += 1
        if calls[0] >= 3:
            if HOW == "os_exit":
                os._exit(7)
            if HOW == "libc_exit":
                ctypes.CDLL(None)._exit(5)  # below Python: nothing can name it but its exit status
            if HOW == "inplace":
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(0.5)
            if HOW == "gradoff":
                torch.set_grad_enabled(False)
            if HOW == "oserr":
                raise OSError(28, "No space left on device", "/plug/scratch.bin")
            if HOW == "memerr":
                raise MemoryError()
        return super().credits(model, tr, e)
'''


def _run(tmp_path, how, jobs, out):
    (tmp_path / "w28plug.py").write_text(PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]), "W28": how,
           "OMP_NUM_THREADS": "1", "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "w28plug", "audit", *C, "--methods", "bp",
                           "w28", "--seeds", "1", "2", "--jobs", str(jobs), "--out", str(tmp_path / out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_plugins_os_exit_is_named_as_the_plugins(tmp_path, jobs):
    """W1 (cases 55, 56): a plug-in's os._exit(7) in credits() was "a worker process died (killed, or out of
    memory?)" and "died again … rerun with fewer --jobs", and with --jobs 1 exit 7 with no line at all."""
    p = _run(tmp_path, "os_exit", jobs, "o")
    last = p.stderr.strip().splitlines()[-1]
    print(p.returncode, last)
    assert p.returncode == 2, p.stderr[-2000:]
    assert last.startswith("depthaudit: error: plug-in w28plug called os._exit(7) at ") and "w28plug.py:" in last
    assert "Traceback" not in p.stderr and "worker process died" not in p.stderr
    assert not list((tmp_path / "o").rglob("*.tmp*"))  # nothing half-written


def test_a_worker_that_exits_below_python_says_its_status_not_memory(tmp_path):
    """W1: a worker that ended itself (libc _exit(5), below any Python handler) is said to have exited with its
    status, and the advice is to see the error with --jobs 1 — not "killed, or out of memory?"."""
    p = _run(tmp_path, "libc_exit", 2, "o")
    print(p.returncode, p.stderr[-600:])
    assert p.returncode == 2
    assert "a worker process died (it exited with status 5, not killed" in p.stderr
    assert p.stderr.strip().splitlines()[-1].endswith("rerun with --jobs 1 to see the error in this process")
    assert "out of memory" not in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "set_grad_enabled"])
def test_the_api_trains_whatever_the_callers_grad_mode(tmp_path, mode):
    """W2 (cases 97, 98, 103, 104): da.train / da.audit called under torch.no_grad(), inference_mode() or
    set_grad_enabled(False) (a notebook's state) failed inside the training step with a RuntimeError and its
    traceback; they train as they would otherwise, bit for bit, and the caller's mode is as it was."""
    import contextlib

    import torch

    import depthaudit as da

    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    ref = da.train(base, tmp_path / "ref", progress=False).record["final"]
    ctx = {"no_grad": torch.no_grad(), "inference_mode": torch.inference_mode()}.get(mode, contextlib.nullcontext())
    before = torch.is_grad_enabled()
    try:
        if mode == "set_grad_enabled":
            torch.set_grad_enabled(False)
        with ctx:
            got = da.train(base, tmp_path / "m", progress=False).record["final"]
            assert not torch.is_grad_enabled()  # the caller's mode, untouched after the call
            acfg = da.AuditConfig(base=base, methods=("bp",), seeds=(1,), probe_batches=1, probe_batch_size=32)
            rep = da.audit(acfg, tmp_path / "a", progress=False).record
    finally:
        torch.set_grad_enabled(before)
    print(ref["test_acc"], got["test_acc"], rep["methods"][0]["trained_test_acc"])
    assert got["test_acc"] == ref["test_acc"] and got["test_loss"] == ref["test_loss"]
    assert rep["methods"][0]["trained_test_acc"]["mean"] is not None and rep["methods"][0]["checks"]["D1"]["value"] > 0



@pytest.mark.parametrize("how,said", [
    ("inplace", "W28.credits() changed the model's parameters or their .grad in place; credits() must only read"),
    ("gradoff", "W28.credits() switched autograd off (torch.set_grad_enabled) and left it so"),
])
def test_a_plugin_credits_that_touches_the_model_or_grad_mode_is_named(tmp_path, how, said):
    """A plug-in whose credits() scaled the weights in place ended in torch's "modified by an inplace operation"
    traceback as an internal error; one that switched autograd off, in a line about what it returned."""
    p = _run(tmp_path, how, 1, "o")
    last = p.stderr.strip().splitlines()[-1]
    print(p.returncode, last)
    assert p.returncode == 2 and said in last and last.startswith("depthaudit: error: plug-in w28plug")
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("cmd", [["train"], ["audit", "--methods", "bp", "--seeds", "1"],
                                 ["ladder", "--methods", "bp", "--seeds", "1"],
                                 ["probes", "--method", "fa", "--seeds", "1", "--pre-epochs", "0"],
                                 ["intervene", "--methods", "bp", "--seeds", "1", "--penalty", "0.1"]])
def test_an_out_below_a_loop_of_links_is_one_line(tmp_path, capsys, cmd):
    """W3 (cases 139, 141, 151): --out LOOPA/x (LOOPA → LOOPB → LOOPA) was pathlib's "Symlink loop" traceback, an
    internal error; --out LOOPA itself was already one line."""
    from depthaudit.cli import main

    (tmp_path / "LOOPA").symlink_to(tmp_path / "LOOPB")
    (tmp_path / "LOOPB").symlink_to(tmp_path / "LOOPA")
    out = tmp_path / "LOOPA" / "x"
    c = C[:8] if cmd[0] == "train" else C  # (train measures nothing: no probe flags)
    assert main([cmd[0], *c, *cmd[1:], "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    print(err)
    assert err == (f"depthaudit: error: --out {out}: {tmp_path / 'LOOPA'} is a loop of symbolic links "
                   f"({tmp_path / 'LOOPA'} → {tmp_path / 'LOOPB'} → …); remove one of the links, or choose another "
                   "--out")


def test_a_home_below_a_loop_of_links_does_not_stop_the_figures(tmp_path):
    """A HOME under a loop of links made matplotlib's import raise (its config folder cannot be resolved): the
    command now gives matplotlib a private folder; what remains is the data cache's one line, with its fix."""
    (tmp_path / "LOOPA").symlink_to(tmp_path / "LOOPB")
    (tmp_path / "LOOPB").symlink_to(tmp_path / "LOOPA")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path / "LOOPA" / "x"),
           "OMP_NUM_THREADS": "1", "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("MPLCONFIGDIR", None)
    env.pop("XDG_CONFIG_HOME", None)
    env.pop("XDG_CACHE_HOME", None)
    p = subprocess.run([sys.executable, "-m", "depthaudit", "audit", *C, "--methods", "bp", "--seeds", "1", "--out",
                        str(tmp_path / "a")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    print(p.returncode, p.stderr[-500:])
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert (tmp_path / "a" / "cosine_heatmap.png").is_file()


HOLD = ("import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\ntime.sleep(float(sys.argv[2]))\n")


@pytest.mark.parametrize("cmd,lock", [(["audit", "--methods", "bp", "--seeds", "1"], ".lock"),
                                      (["intervene", "--methods", "bp", "--seeds", "1", "--penalty", "0.1"], ".lock"),
                                      (["ladder", "--methods", "bp", "--seeds", "1"], "ladder_d8_L1_mnist1d.lock")])
def test_report_renders_under_the_lock_its_command_writes_under(tmp_path, cmd, lock):
    """W4 (cases 176–178, 181, 182): `depthaudit report DIR` run while an audit (or intervene) wrote DIR rewrote
    report.json from the copy it had read before, over the report the audit had just written. It now reads and
    writes under the folder's lock (a ladder's: its store's lock), the lock the command writes its report under:
    while another process holds it, report waits, then renders what is there."""
    from depthaudit.cli import main

    out = tmp_path / "d"
    assert main([cmd[0], *C, *cmd[1:], "--out", str(out)]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / lock), "8"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    rep = subprocess.Popen([sys.executable, "-m", "depthaudit", "report", str(out)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            rep.wait(timeout=5)  # (it imports torch in about 2 s, then waits for the lock)
    finally:
        holder.wait(timeout=60)
    o, e = rep.communicate(timeout=300)
    print(rep.returncode, e[-300:])
    assert rep.returncode == 0 and "Traceback" not in e


@pytest.mark.parametrize("how,said", [
    ("oserr", "raised OSError: [Errno 28] No space left on device: '/plug/scratch.bin'"),
    ("memerr", "raised MemoryError at ")])
def test_a_plugins_os_or_memory_error_is_the_plugins_with_any_jobs(tmp_path, how, said):
    """W5 (cases 189–191): the same exception from the same plug-in line was the plug-in's in a --jobs 2 worker
    and a full disk or exhausted memory (advice: a smaller model) with --jobs 1."""
    lines = []
    for jobs in (1, 2):
        p = _run(tmp_path, how, jobs, f"o{jobs}")
        lines.append(p.stderr.strip().splitlines()[-1])
        print(p.returncode, lines[-1])
        assert p.returncode == 2 and "Traceback" not in p.stderr
    assert lines[0] == lines[1]
    assert lines[0].startswith(f"depthaudit: error: plug-in w28plug {said}") and "w28plug.py:" in lines[0]


def test_intervene_refuses_a_second_grid_beside_its_config(tmp_path):
    """W6 (cases 208, 211): da.intervene(InterveneConfig(…, lambdas=A), out, lambdas=B) trained A and dropped B
    without a word; two grids are now refused before anything is read or written."""
    import depthaudit as da

    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    ac = da.AuditConfig(base=base, methods=("bp",), seeds=(1,))
    for cfg in (da.InterveneConfig(audit=ac, lambdas=(0, 0.1)), da.InterveneConfig(audit=ac, penalty=0.1)):
        with pytest.raises(da.ConfigError) as e:
            da.intervene(cfg, tmp_path / "i", lambdas=(0, 0.01), progress=False)
        print(e.value)
        assert str(e.value).startswith("lambdas (0, 0.01) beside an InterveneConfig, which has its own grid (0.0, 0.1)")
    assert not (tmp_path / "i").exists()


@pytest.mark.parametrize("name,cmd", [("result.json", "train"), ("checkpoint.pt", "train"), ("identity.json", "train"),
                                      ("identity.json", "audit")])
def test_a_fifo_where_a_command_writes_is_refused_before_anything(tmp_path, capsys, name, cmd):
    """W8 (cases 226–237): a FIFO result.json was "already exists; pass --force" (which then trained the whole run
    and refused at the write); a FIFO checkpoint.pt was found after training; a FIFO identity.json was refused
    after the lock files were made. Each is now refused first, and the folder is left as it was."""
    from depthaudit.cli import main

    out = tmp_path / "t"
    out.mkdir()
    os.mkfifo(out / name)
    extra = ["--methods", "bp", "--seeds", "1"] if cmd == "audit" else []
    for force in ([], ["--force"]) if cmd == "train" else ([],):
        assert main([cmd, *(C if cmd == "audit" else C[:8]), *extra, *force, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        print(err)
        assert err == (f"depthaudit: error: {out / name} is a FIFO (named pipe), not a file depthaudit writes; it is "
                       "left as it is: give a file path (or a folder) that is free, or move it away")
        assert sorted(p.name for p in out.iterdir()) == [name]


def test_a_plugin_that_fails_to_import_in_the_workers_only_is_one_line(tmp_path):
    """W9 (cases 261, 262): a plug-in whose import fails in the --jobs workers only printed an "Exception in
    initializer" traceback per worker and ended "a worker process died again (killed, or out of memory?)"."""
    (tmp_path / "w28child.py").write_text(
        "import multiprocessing\nfrom depthaudit.methods import METHODS\nfrom depthaudit.methods.dfa import DFA\n"
        "if multiprocessing.current_process().name != 'MainProcess':\n"
        "    raise ImportError('the licence server is unreachable from workers')\n"
        "@METHODS.register('w28c')\nclass W28C(DFA):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "w28child", "audit", *C, "--methods", "bp",
                        "w28c", "--seeds", "1", "--jobs", "2", "--out", str(tmp_path / "o")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    print(p.returncode, p.stderr[-700:])
    assert p.returncode == 2 and "Traceback" not in p.stderr and "died" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        "depthaudit: error: --plugin w28child: importing it raised ImportError: the licence server is unreachable "
        f"from workers at {tmp_path / 'w28child.py'}:5")


def test_a_sweep_past_the_open_file_limit_is_one_line(tmp_path):
    """W7 (cases 218, 219): `ulimit -n 12` and --jobs 2 was an internal error at os.pipe() (Too many open files)."""
    import resource

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "audit", *C, "--methods", "bp", "fa", "--seeds", "1",
                        "--jobs", "2", "--out", str(tmp_path / "o")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (12, 12)))
    print(p.returncode, p.stderr[-500:])
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "Too many open files; the process hit its open-file limit: raise it (`ulimit -n 1024`), or use fewer " \
        "--jobs" in p.stderr.strip().splitlines()[-1]


def test_paths_through_a_dangling_link_or_a_loop_are_named(tmp_path, capsys):
    """Unclear cases 143, 144: `report LOOPA` said only "not a folder"; --out DANG/x (DANG → nowhere) was "DANG: File
    exists; something that is not a folder stands where a folder must be"."""
    from depthaudit.cli import main

    (tmp_path / "LOOPA").symlink_to(tmp_path / "LOOPB")
    (tmp_path / "LOOPB").symlink_to(tmp_path / "LOOPA")
    (tmp_path / "DANG").symlink_to(tmp_path / "nowhere")
    assert main(["report", str(tmp_path / "LOOPA" / "x")]) == 2
    assert f"is not a folder ({tmp_path / 'LOOPA'} is a loop of symbolic links)" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "DANG")]) == 2
    assert f"({tmp_path / 'DANG'} is a symbolic link to {tmp_path / 'nowhere'}, which does not exist)" in \
        capsys.readouterr().err
    assert main(["train", *C[:8], "--out", str(tmp_path / "DANG" / "x")]) == 2
    err = capsys.readouterr().err.strip()
    print(err)
    assert err == (f"depthaudit: error: --out {tmp_path / 'DANG' / 'x'}: {tmp_path / 'DANG'} is a symbolic link to "
                   f"{tmp_path / 'nowhere'}, which does not exist; make that folder, or choose another --out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DANG", "LOOPA", "LOOPB"]


def test_a_fifo_where_a_ladder_writes_its_table_is_refused_before_a_run(tmp_path, capsys):
    """Unclear case 240: a FIFO at ladder_….md was refused only after every run had trained (the .json and .png
    written beside it)."""
    from depthaudit.cli import main

    out = tmp_path / "l"
    out.mkdir()
    os.mkfifo(out / "ladder_d8_L1_mnist1d.md")
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ladder_d8_L1_mnist1d.md is a FIFO (named pipe)" in err and "epoch" not in err
    assert [p.name for p in out.iterdir()] == ["ladder_d8_L1_mnist1d.md"]
