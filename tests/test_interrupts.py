"""Interrupts stop work: SIGINT/SIGTERM to the sweep, or to its whole process group, within seconds.

Real processes, real signals: every worker is gone, finished runs are kept (and valid), in-flight runs
are discarded without a temp file left, the queue is not trained on, one line is printed, exit 130.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depthaudit.stores import read_record

# runs of a few seconds each, 8 of them: an interrupt after the first lands mid-sweep

def _ctrl_c_delivered() -> None:
    """In the child, before exec: SIGINT as a terminal job gets it. A test runner started in the background by a
    non-interactive shell has SIGINT ignored, which its children inherit and Python then honours (no
    KeyboardInterrupt): these tests are about what the CLI does when Ctrl-C does arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

LADDER = ["ladder", "--dataset", "mnist1d", "--d-hidden", "64", "--num-blocks", "2", "--methods", "fa", "bp",
          "--k-values", "0", "1", "2", "--seeds", "1", "--epochs", "8", "--probe-batches", "1",
          "--probe-batch-size", "64"]
RUNS = "ladder_d64_L2_mnist1d.runs"
pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc for the worker processes")


def _signal_and_wait(proc, send, timeout: float) -> tuple[str, float]:
    """Send the signal, wait for the command to end (killing its group if it does not): its stderr, seconds."""
    t0 = time.time()
    send()
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return err, time.time() - t0


def _descendants(pid: int) -> list[int]:
    kids, out = {}, []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p.name))
    todo = [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _records(out: Path) -> list[Path]:
    return sorted(p for p in (out / RUNS).glob("*.json") if p.name != "identity.json") if (out / RUNS).is_dir() else []


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    c = tmp_path_factory.mktemp("cache")
    subprocess.run([sys.executable, "-m", "depthaudit", *LADDER, "--k-values", "0", "--methods", "fa", "--epochs", "1",
                    "--out", str(tmp_path_factory.mktemp("warm"))], check=True, capture_output=True,
                   env={**os.environ, "DEPTHAUDIT_CACHE_DIR": str(c)}, timeout=600)
    return c


@pytest.mark.parametrize("jobs, sig, target", [
    (1, signal.SIGINT, "process"), (1, signal.SIGTERM, "group"),
    (2, signal.SIGINT, "process"), (2, signal.SIGINT, "group"),
    (2, signal.SIGTERM, "process"), (2, signal.SIGTERM, "group")])
def test_interrupt_stops_every_worker_within_seconds(tmp_path, cache, jobs, sig, target):
    out = tmp_path / "o"
    env = {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(cache)}
    proc = subprocess.Popen([sys.executable, "-m", "depthaudit", *LADDER, "--jobs", str(jobs), "--out", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # its own process group, as a terminal's job
                            preexec_fn=_ctrl_c_delivered)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not _records(out):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    time.sleep(0.5)  # the next runs are in flight
    procs = _descendants(proc.pid)
    if jobs == 2:
        assert len([p for p in procs if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]) >= 2
    stored = _records(out)
    err, took = _signal_and_wait(proc, lambda: (os.killpg if target == "group" else os.kill)(proc.pid, sig), 60)
    names = {p: Path(f"/proc/{p}/cmdline").read_text(errors="replace").replace("\0", " ")[:80] for p in procs
             if _alive(p)}
    t1 = time.time()
    while time.time() - t1 < 5 and any(_alive(p) for p in procs):  # the resource tracker follows its driver
        time.sleep(0.1)
    left = [(p, names.get(p)) for p in procs if _alive(p)]
    for p, _ in left:
        os.kill(p, signal.SIGKILL)
    print(f"jobs {jobs}, {signal.Signals(sig).name} to the {target}: exit {proc.returncode} after {took:.1f} s; "
          f"{len(stored)} stored at the signal, {len(_records(out))} after; stderr tail: {err.splitlines()[-1:]}")
    assert proc.returncode == 130, err
    assert took < 20, took
    assert not left, f"processes still alive after the sweep exited: {left}"
    lines = err.strip().splitlines()
    who = "every worker stopped" if jobs > 1 else "the run in flight stopped"  # (--jobs 1 has no workers: walk 25)
    assert lines[-1].startswith(f"depthaudit: interrupted: {who}"), err
    assert sum("interrupted" in ln for ln in lines) == 1 and "Traceback" not in err, err
    after = _records(out)
    time.sleep(2)
    assert _records(out) == after  # nobody trains on
    import re

    said = re.search(r"(?:the|all) (\d+) (?:finished )?run\(s\)", lines[-1])  # the line counts what is stored,
    assert said and int(said.group(1)) == len(after), (lines[-1], len(after))  # a late worker's too (walk 27 W3)
    assert len(after) <= len(stored) + jobs < 8  # the queue was not trained; at most the runs in flight finished
    assert all(read_record(p)[0] is not None for p in after)  # every kept record intact
    assert not list(out.rglob("*.tmp")), list(out.rglob("*.tmp"))  # no half-written file
    doc = json.loads((out / "ladder_d64_L2_mnist1d.json").read_text())
    assert set(doc["runs"]) <= {p.stem.replace("%2F", "/") for p in after}


def test_interrupt_cancels_ray_tasks(tmp_path, cache):
    """--executor ray: SIGINT cancels the tasks and shuts the local cluster down; one line, exit 130."""
    pytest.importorskip("ray")
    out = tmp_path / "o"
    proc, err, took, left, stored = _signalled_mid_sweep(
        out, cache, ["--executor", "ray", "--cpus-per-run", "1"], lambda p: os.kill(p.pid, signal.SIGINT),
        wait=120, linger=15, env={"RAY_AUTH_MODE": "disabled"})
    for p in left:
        os.kill(p, signal.SIGKILL)
    print(f"ray: exit {proc.returncode} after {took:.1f} s; {len(stored)} stored at the signal, "
          f"{len(_records(out))} after; left {left}")
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("depthaudit: interrupted: every worker stopped"), err
    assert not left
    after = _records(out)
    time.sleep(2)
    assert _records(out) == after and len(after) < 6
    assert all(read_record(p)[0] is not None for p in after)


def test_interrupt_of_a_slurm_sweep_says_what_is_left_and_how_to_cancel(tmp_path, cache):
    """--executor slurm: the array is the scheduler's, so it keeps running; the line says so and names scancel."""
    pytest.importorskip("submitit")
    out = tmp_path / "o"
    env = {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(cache)}
    log = tmp_path / "stderr"
    with open(log, "w") as fh:  # not a pipe: the array's local stand-ins inherit it and outlive the command
        proc = subprocess.Popen([sys.executable, "-m", "depthaudit", *LADDER, "--executor", "slurm",
                                 "--slurm-cluster", "local", "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                                stderr=fh, start_new_session=True, preexec_fn=_ctrl_c_delivered)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and "array tasks submitted" not in log.read_text():
            time.sleep(0.1)
        time.sleep(1)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        err = log.read_text()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the local stand-ins of the array tasks
        except ProcessLookupError:
            pass
    last = err.strip().splitlines()[-1]
    print(last)
    assert proc.returncode == 130, err
    assert last.startswith("depthaudit: interrupted:") and "still queued or running" in last
    assert "to stop them" in last and "a rerun collects them" in last


def _signalled_mid_sweep(out: Path, cache, args: list[str], send, wait: float = 60, linger: float = 5,
                         env: dict | None = None) -> tuple[object, str, float, list[int], list]:
    """Start the ladder with ``args``, wait for its first record, ``send(proc)``; then wait ``wait`` s for it and
    ``linger`` s for its workers to end. Returns the process, its stderr, the seconds it took, the workers left
    alive and the records stored when the signal was sent."""
    env = {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(cache), **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "depthaudit", *LADDER, *args, "--out", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_ctrl_c_delivered)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not _records(out):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    procs = _descendants(proc.pid)
    stored = _records(out)
    err, took = _signal_and_wait(proc, lambda: send(proc), wait)
    t1 = time.time()
    while time.time() - t1 < linger and any(_alive(p) for p in procs):
        time.sleep(0.1)
    return proc, err, took, [p for p in procs if _alive(p)], stored


@pytest.mark.parametrize("jobs, gap", [(1, 0.05), (2, 0.3)])
def test_a_second_sigterm_during_the_stop_is_absorbed_exit_130(tmp_path, cache, jobs, gap):
    """Walk 11 cases 105-108: SIGTERM twice (a scheduler's repeated TERM) ended the process with 143, killed in
    its cleanup; like a second Ctrl-C it is absorbed: one line, exit 130, no worker or temp file left."""
    def twice(proc):
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(gap)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)

    proc, err, took, left, _ = _signalled_mid_sweep(tmp_path / "o", cache, ["--jobs", str(jobs)], twice)
    print(f"jobs {jobs}: exit {proc.returncode} after {took:.1f} s; stderr tail: {err.splitlines()[-1:]}")
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("depthaudit: interrupted"), err
    assert "Traceback" not in err and not left and not list((tmp_path / "o").rglob("*.tmp"))


@pytest.mark.parametrize("target", ["process", "group"])
def test_a_hang_up_stops_like_an_interrupt(tmp_path, cache, target):
    """Walk 13 case 69: SIGHUP (the terminal closed) killed the command with 129, no line, its claim left behind."""
    proc, err, took, left, _ = _signalled_mid_sweep(
        tmp_path / "o", cache, ["--jobs", "2"],
        lambda p: (os.killpg if target == "group" else os.kill)(p.pid, signal.SIGHUP))
    print(f"SIGHUP to the {target}: exit {proc.returncode} after {took:.1f} s; {err.splitlines()[-1:]}")
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("depthaudit: interrupted"), err
    assert "Traceback" not in err and not left and not list((tmp_path / "o").rglob("*.tmp"))
