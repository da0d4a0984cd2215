"""Sweep workers: they import the parent's plug-ins, and never outlive the parent."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from depthaudit.cli import main

TINY = ["--epochs", "1", "--d-hidden", "8", "--num-blocks", "1", "--probe-batches", "1", "--probe-batch-size", "16"]


def test_plugins_reach_the_workers(tmp_path, monkeypatch):
    (tmp_path / "myplug.py").write_text(
        "from depthaudit.methods import METHODS, FA\n\n"
        "@METHODS.register('myfa')\nclass MyFA(FA):\n    name = 'myfa'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "")  # restored after the test
    assert main(["--plugin", "myplug", "audit", "--methods", "myfa", "--jobs", "2", *TINY, "--out", "a"]) == 0
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    assert [m["method"] for m in rep["methods"]] == ["myfa"] and rep["methods"][0]["status"] == ["ok"]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_parent(tmp_path):
    cmd = [sys.executable, "-m", "depthaudit.cli", "audit", "--methods", "bp", "fa", "--jobs", "2",
           "--epochs", "50", "--d-hidden", "32", "--num-blocks", "2", "--out", str(tmp_path / "a")]
    parent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers, t0 = [], time.time()
    while time.time() - t0 < 120 and len(workers) < 2:  # wait for the pool to start its workers
        time.sleep(1)
        workers = [p for p in _children(parent.pid)
                   if "spawn_main" in open(f"/proc/{p}/cmdline").read().replace("\0", " ")
                   and "resource_tracker" not in open(f"/proc/{p}/cmdline").read()]
    assert len(workers) == 2, "the sweep did not start its workers"
    time.sleep(3)  # let them reach their initializer
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    t0 = time.time()
    while time.time() - t0 < 90 and any(_alive(w) for w in workers):
        time.sleep(0.5)
    left = [w for w in workers if _alive(w)]
    print(f"workers {workers}: alive {time.time() - t0:.1f}s after the parent's SIGKILL: {left}")
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert not left


def test_workers_report_progress_at_every_tenth_of_the_budget(tmp_path, capfd):
    """A spawned worker draws no bar: its run's epoch lines at every tenth of the budget reach stderr (heartbeat)."""
    import depthaudit as da

    args = ["audit", "--methods", "bp", "--jobs", "2", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1",
            "--epochs", "20", "--probe-batches", "1", "--out", str(tmp_path / "a")]
    assert main(args) == 0
    err = capfd.readouterr().err
    for key in ("bp/trained/s42", "bp/frozen/s42"):
        epochs = [int(line.split("epoch ")[1].split("/")[0]) for line in err.splitlines()
                  if line.startswith(f"  {key}: epoch ")]
        assert epochs == list(range(2, 21, 2)), (key, epochs)
    cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=3), methods=("bp",),
                         probe_batches=1)
    da.audit(cfg, tmp_path / "quiet", sweep=da.SweepOptions(jobs=2), progress=False)
    assert "epoch" not in capfd.readouterr().err  # progress=False: the workers are quiet too
